import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, test } from "vitest";
import { coreBindings } from "../../src/server/cores/index.js";
import { repoRoot } from "../helpers/laneway.js";
import { unusedIndexExports } from "./export-surface.js";
import { importCycles, readImportGraph } from "./import-graph.js";

/**
 * The layout rules of docs/architecture.md, checked on the source: no
 * import loops; each layer imports only what lies below it; the cores know
 * nothing of Connect or HTTP; the error mapping has no per-core chain.
 */

const graph = readImportGraph(repoRoot, "src");
const folderOf = (file: string) => file.split("/")[1]!;

/**
 * The cores' folders: one per binding, and the swarm bus, the member's side
 * of the swarm core (the hub in src/swarm/ builds on it).
 */
const coreFolders = [...coreBindings.map((b) => b.name), "swarm-bus"];

/** What each folder of src/ may import from the others. */
const allowed: Record<string, readonly string[]> = {
  log: [],
  encoding: [],
  files: [],
  errors: ["log"],
  config: ["log", "encoding"],
  "fault-injection": ["config"],
  nats: ["log", "files"],
  validation: [],
  kmap: ["errors", "log", "encoding", "config", "fault-injection", "validation"],
  lanes: ["errors", "log", "encoding", "config", "nats", "fault-injection", "validation"],
  "swarm-bus": ["errors", "log", "config", "nats", "fault-injection", "files"],
  swarm: ["errors", "log", "config", "nats", "fault-injection", "files", "swarm-bus"],
  startup: ["config", "lanes", "log", "files"],
  client: ["kmap", "swarm", "participant", "log", "config", "encoding"],
  server: ["errors", "log", "config", "startup", "nats", "kmap", "lanes", "swarm", "validation", "fault-injection", "client"],
  participant: [],
  cli: ["config", "startup", "server", "client", "log", "nats", "fault-injection", "errors", "participant", "swarm", "swarm-bus", "lanes", "encoding"],
};

test("src/ has no import loop", () => {
  expect(importCycles(graph)).toEqual([]);
});

test("each folder of src/ imports only the layers below it", () => {
  const violations: string[] = [];
  for (const [file, targets] of graph.edges) {
    const from = folderOf(file);
    for (const target of targets) {
      if (!target.startsWith("src/")) continue;
      const to = folderOf(target);
      if (to === from) continue;
      if (!(allowed[from] ?? []).includes(to)) violations.push(`${file} imports ${target}`);
    }
  }
  expect(violations).toEqual([]);
});

test("the cores hold no Connect or HTTP types", () => {
  const violations: string[] = [];
  for (const [file, specifiers] of graph.specifiers) {
    if (!coreFolders.includes(folderOf(file))) continue;
    for (const s of specifiers) {
      if (s.startsWith("@connectrpc/") || s === "node:http" || s === "node:http2") violations.push(`${file} imports ${s}`);
    }
  }
  expect(violations).toEqual([]);
});

test("outside a core, only its index (and its internal entry, for the server binding and the swarm hub) is imported", () => {
  const violations: string[] = [];
  for (const [file, targets] of graph.edges) {
    for (const target of targets) {
      const core = [...coreFolders, "nats", "startup", "files"].find((c) => target.startsWith(`src/${c}/`));
      if (core === undefined || file.startsWith(`src/${core}/`)) continue;
      const internalAllowed = file.startsWith("src/server/cores/") || (core === "swarm-bus" && file.startsWith("src/swarm/"));
      const entry = target === `src/${core}/index.ts` || (target === `src/${core}/internal.ts` && internalAllowed);
      if (!entry) violations.push(`${file} imports ${target}`);
    }
  }
  expect(violations).toEqual([]);
});

test("each core's index.ts exports only what is used outside the core (tests, benchmarks and examples included)", () => {
  const folders = coreFolders.filter((core) => existsSync(join(repoRoot, "src", core, "index.ts")));
  expect(folders).toEqual(expect.arrayContaining(["lanes", "swarm", "kmap", "swarm-bus"]));
  const unused = Object.fromEntries(folders.map((core) => [core, unusedIndexExports(repoRoot, `src/${core}`)]));
  expect(unused).toEqual(Object.fromEntries(folders.map((core) => [core, []])));
});

test("src/config/ holds only server-wide settings: it imports no core", () => {
  const configImports = [...graph.edges].filter(([file]) => file.startsWith("src/config/")).flatMap(([, targets]) => targets);
  expect(configImports.filter((t) => !t.startsWith("src/config/") && !t.startsWith("src/log/") && !t.startsWith("src/encoding/"))).toEqual([]);
});

test("the error mapping has no per-core chain: one CoreError check and one reason table", () => {
  const text = readFileSync(join(repoRoot, "src/server/error-mapping.ts"), "utf8");
  const checks = [...text.matchAll(/instanceof (\w+)/g)].map((m) => m[1]);
  expect(checks).toEqual(["CoreError", "ConnectError", "Error"]);
});

test("every core binding names its services, their principals and its error domain", () => {
  const services = coreBindings.flatMap((b) => b.services.map((s) => s.service.typeName));
  expect(new Set(services).size).toBe(services.length);
  expect(coreBindings.map((b) => [b.name, b.errors.domain])).toEqual([
    ["lanes", "lanes"],
    ["swarm", "swarm"],
    ["kmap", "kmap"],
  ]);
});
