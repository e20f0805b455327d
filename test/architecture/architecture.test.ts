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
 * Files outside src/server/cores and src/server/services that still import
 * a core, each for a reason: the client verifies a Kmap transaction's signature with the
 * core's canonical bytes; the CLI's offline commands (the grant check, the
 * lanes permissions) run a core's code without a server; the hive's lane
 * adapter (a Connect client of a lane) reads the hub whose changes it
 * publishes.
 */
const importersOfCores = {
  client: ["kmap", "swarm"],
  files: ["src/client/verify-transaction.ts"],
  folders: ["src/cli/", "src/client/hive-lanes/"],
};

/** The cores, from the binding list: each is a folder of src/ with the binding's name. */
const cores = coreBindings.map((b) => b.name);

/** What a core may import: the layers below it (and, for a core that needs one, the extra of `coreExtras`). */
const coreLayers = ["errors", "log", "encoding", "config", "nats", "fault-injection", "validation", "observe"];
/**
 * The swarm core is two folders: the swarm bus (what a hive member holds)
 * and the hub, built on it. Files written whole or not at all go through
 * src/files.
 */
const coreExtras: Record<string, readonly string[]> = {
  kmap: ["files"],
  // A core's own folder builds on its other folders; both write through src/files.
  ...Object.fromEntries(coreBindings.flatMap((b) => (b.folders ?? []).map((folder) => [folder, ["files"]]))),
  ...Object.fromEntries(coreBindings.filter((b) => b.folders !== undefined).map((b) => [b.name, ["files", ...b.folders!]])),
};

/** The cores' folders: each binding's, then its other folders (the swarm bus, the member's side of the swarm core). */
const coreFolders = coreBindings.flatMap((b) => [b.name, ...(b.folders ?? [])]);

/** The core folder whose binding lists `folder` among its other folders, if any. */
const ownerOf = (folder: string) => coreBindings.find((b) => b.folders?.includes(folder))?.name;

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
  observe: [],
  ...Object.fromEntries(coreFolders.map((core) => [core, [...coreLayers, ...(coreExtras[core] ?? [])]])),
  startup: ["config", "log", "files"],
  client: [...importersOfCores.client, "participant", "log", "config", "encoding"],
  server: ["errors", "log", "config", "startup", "nats", "validation", "fault-injection", "client", "observe", ...cores],
  participant: [],
  cli: ["config", "startup", "server", "client", "log", "nats", "fault-injection", "errors", "participant", "encoding", ...coreFolders],
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

test("outside a core, only its index (its internal entry for the server binding and the swarm hub, Kmap's storage-free signature check for the client) is imported", () => {
  const violations: string[] = [];
  for (const [file, targets] of graph.edges) {
    for (const target of targets) {
      const core = [...coreFolders, "nats", "startup", "files"].find((c) => target.startsWith(`src/${c}/`));
      if (core === undefined || file.startsWith(`src/${core}/`)) continue;
      const owner = ownerOf(core);
      const internalAllowed = file.startsWith("src/server/cores/") || (owner !== undefined && file.startsWith(`src/${owner}/`));
      const entry =
        target === `src/${core}/index.ts` ||
        (target === `src/${core}/internal.ts` && internalAllowed) ||
        (target === "src/kmap/signature.ts" && file.startsWith("src/client/"));
      if (!entry) violations.push(`${file} imports ${target}`);
    }
  }
  expect(violations).toEqual([]);
});

/**
 * Whose uses of a core's index do not count: the swarm bus's index is the
 * member's surface, so a name only the hub (src/swarm) uses belongs in the
 * bus's internal.ts. What the hub's own index passes on to its callers (the
 * one error class) counts.
 */
const notMembers: Record<string, { folders: readonly string[]; except: readonly string[] }> = Object.fromEntries(
  coreBindings.flatMap((b) => (b.folders ?? []).map((folder) => [folder, { folders: [`src/${b.name}`], except: [`src/${b.name}/index.ts`] }])),
);

test("each core's index.ts exports only what is used outside the core (tests, benchmarks and examples included; for the swarm bus, outside the hub too)", () => {
  // Every core folder has an index: the one door from outside.
  const folders = coreFolders.filter((core) => existsSync(join(repoRoot, "src", core, "index.ts")));
  expect(folders).toEqual(coreFolders);
  const unused = Object.fromEntries(folders.map((core) => [core, unusedIndexExports(repoRoot, `src/${core}`, notMembers[core])]));
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

test("only src/server/cores/** and src/server/services/** import a core (and the few files named above)", () => {
  const violations: string[] = [];
  for (const [file, targets] of graph.edges) {
    if (coreFolders.includes(folderOf(file))) continue;
    if (file.startsWith("src/server/cores/") || file.startsWith("src/server/services/")) continue;
    if (importersOfCores.files.includes(file) || importersOfCores.folders.some((f) => file.startsWith(f))) continue;
    for (const target of targets) if (cores.includes(folderOf(target))) violations.push(`${file} imports ${target}`);
  }
  expect(violations).toEqual([]);
});

test("no core is named in src/server outside cores/ and services/, in src/config, in src/errors or in src/observe", () => {
  // Each core's name and its singular (`lanes`, `lane`: a reason code like `lane_conflict` names the core too), not inside a longer word (`laneway`).
  const forms = [...new Set([...cores, "hive"].flatMap((core) => [core, core.replace(/s$/, "")]))];
  const named = new RegExp(`\\b(${forms.join("|")})(?![a-z])`, "i");
  const violations: string[] = [];
  for (const file of graph.edges.keys()) {
    const shared =
      (file.startsWith("src/server/") && !file.startsWith("src/server/cores/") && !file.startsWith("src/server/services/")) ||
      ["src/config/", "src/errors/", "src/observe/"].some((folder) => file.startsWith(folder));
    if (!shared) continue;
    readFileSync(join(repoRoot, file), "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (named.test(line)) violations.push(`${file}:${i + 1}: ${line.trim()}`);
      });
  }
  expect(violations).toEqual([]);
});

test("every core binding names its services, their principals and its error domain; each core is a folder of src/", () => {
  const services = coreBindings.flatMap((b) => b.services.map((s) => s.service.typeName));
  expect(new Set(services).size).toBe(services.length);
  for (const binding of coreBindings) {
    expect(binding.errors.domain).toBe(binding.name);
    expect([...graph.edges.keys()]).toContain(`src/${binding.name}/index.ts`);
    for (const { principal } of binding.services) expect(principal === "operator" || Object.hasOwn(binding.principals ?? {}, principal), principal).toBe(true);
  }
});

/**
 * The hub reaches the broker and Redis through the swarm bus and three
 * stores of its own: the slot buckets (slot-store.ts), the slot responder's
 * subscription (slot-responder.ts) and the hub's Redis records
 * (redis-accounts.ts). The credential formats (@nats-io/nkeys, @nats-io/jwt)
 * are not clients and may be used where credentials are minted.
 */
const hubClientFiles = ["src/swarm/slots/slot-store.ts", "src/swarm/slots/slot-responder.ts", "src/swarm/redis-accounts.ts"];

test("in the hub, only its three stores import the NATS or Redis client", () => {
  const clients = (s: string) => s === "ioredis" || ["@nats-io/transport-node", "@nats-io/jetstream", "@nats-io/kv", "@nats-io/nats-core"].includes(s);
  const importers = [...graph.specifiers].filter(([file, specifiers]) => file.startsWith("src/swarm/") && specifiers.some(clients)).map(([file]) => file);
  expect(importers.sort()).toEqual([...hubClientFiles].sort());
});

/** A line that writes a file's content: a write call, a hard link, or an open for writing. */
const writesAFile = /\b(writeFile|writeFileSync|appendFile|appendFileSync|writeSync|linkSync|link)\(|\bopen(Sync)?\([^)]*["'](w|wx|a|ax|r\+)["']/;

test("every file Laneway writes goes through src/files (one fsync rule): no plain write, link or open for writing elsewhere in src/", () => {
  const violations: string[] = [];
  for (const file of graph.edges.keys()) {
    if (file.startsWith("src/files/")) continue;
    readFileSync(join(repoRoot, file), "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (writesAFile.test(line)) violations.push(`${file}:${i + 1}: ${line.trim()}`);
      });
  }
  expect(violations).toEqual([]);
});

test("docs/architecture.md's drawing names every folder of src/ and every folder of src/server", () => {
  const doc = readFileSync(join(repoRoot, "docs/architecture.md"), "utf8");
  const drawing = doc.slice(doc.indexOf("## Layers"), doc.indexOf("```", doc.indexOf("```", doc.indexOf("## Layers")) + 3));
  const folders = new Set([...graph.edges.keys()].map(folderOf));
  for (const folder of folders) expect(drawing, `src/${folder}`).toMatch(new RegExp(`src/${folder}(?![a-z-])`));
  const serverRooms = new Set([...graph.edges.keys()].filter((f) => f.startsWith("src/server/") && f.split("/").length > 3).map((f) => f.split("/")[2]!));
  for (const room of serverRooms) expect(drawing, `src/server/${room}/`).toMatch(new RegExp(`\\b${room}/`));
});
