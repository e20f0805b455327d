import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, test } from "vitest";
import { coreBindings } from "../../src/server/cores/index.js";
import { repoRoot } from "../helpers/laneway.js";
import { importCycles, readImportGraph } from "./import-graph.js";

/**
 * The layout rules of docs/architecture.md, checked on the source: no
 * import loops; each layer imports only what lies below it; the cores know
 * nothing of Connect or HTTP; the error mapping has no per-core chain.
 */

const graph = readImportGraph(repoRoot, "src");
const folderOf = (file: string) => file.split("/")[1]!;

/** What each folder of src/ may import from the others. */
const allowed: Record<string, readonly string[]> = {
  log: [],
  encoding: [],
  errors: ["log"],
  config: ["log", "encoding"],
  "fault-injection": ["config"],
  nats: ["log"],
  validation: [],
  kmap: ["errors", "log", "encoding", "config", "fault-injection", "validation"],
  lanes: ["errors", "log", "encoding", "config", "nats", "fault-injection", "validation"],
  swarm: ["errors", "log", "encoding", "config", "nats", "fault-injection", "participant"],
  startup: ["config", "lanes", "log"],
  client: ["kmap"],
  server: ["errors", "log", "config", "startup", "nats", "kmap", "lanes", "swarm", "validation", "fault-injection", "client"],
  participant: [],
  cli: ["config", "startup", "server", "client", "log", "nats", "fault-injection", "errors", "participant", "swarm", "lanes", "encoding"],
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
    if (!["kmap", "lanes", "swarm"].includes(folderOf(file))) continue;
    for (const s of specifiers) {
      if (s.startsWith("@connectrpc/") || s === "node:http" || s === "node:http2") violations.push(`${file} imports ${s}`);
    }
  }
  expect(violations).toEqual([]);
});

test("outside a core, only its index (its internal entry for the server binding, Kmap's storage-free signature check for the client) is imported", () => {
  const violations: string[] = [];
  for (const [file, targets] of graph.edges) {
    for (const target of targets) {
      const core = ["kmap", "lanes", "swarm", "nats", "startup"].find((c) => target.startsWith(`src/${c}/`));
      if (core === undefined || file.startsWith(`src/${core}/`)) continue;
      const entry =
        target === `src/${core}/index.ts` ||
        (target === `src/${core}/internal.ts` && file.startsWith("src/server/cores/")) ||
        (target === "src/kmap/signature.ts" && file.startsWith("src/client/"));
      if (!entry) violations.push(`${file} imports ${target}`);
    }
  }
  expect(violations).toEqual([]);
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
