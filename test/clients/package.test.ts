import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, test } from "vitest";
import { repoRoot, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";

/**
 * The package as a user gets it: `npm pack` (whose prepack builds the
 * library entries into dist/), a scratch project that `npm install`s the
 * tarball offline, and plain node (no tsx) importing `laneway/participant`
 * and `laneway/client` by name and calling a real Laneway with them.
 *
 * The scratch project takes Laneway's dependencies from the repository's
 * node_modules (file: links), so the install needs no registry.
 */

const run = promisify(execFile);

/** Prints how many modules of better-sqlite3 the process loaded after importing the given modules. */
const SQLITE_PROBE = `
import { createRequire } from "node:module";
for (const specifier of process.argv.slice(1)) await import(specifier);
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((path) => path.includes("better-sqlite3"));
console.log(JSON.stringify({ loaded: loaded.length }));
`;

async function sqliteModulesLoadedBy(specifiers: readonly string[], cwd: string, flags: readonly string[] = []): Promise<number> {
  const { stdout } = await run(process.execPath, [...flags, "--input-type=module", "-e", SQLITE_PROBE, ...specifiers], { cwd });
  return (JSON.parse(stdout) as { loaded: number }).loaded;
}

test("importing the client or the participant loads no better-sqlite3 (the Kmap core's index does)", async () => {
  const source = (path: string) => join(repoRoot, path);
  expect(await sqliteModulesLoadedBy([source("src/client/index.ts"), source("src/participant/index.ts")], repoRoot, ["--import", "tsx"])).toBe(0);
  // The check can fail: the core's own entry loads SQLite.
  expect(await sqliteModulesLoadedBy([source("src/kmap/index.ts")], repoRoot, ["--import", "tsx"])).toBeGreaterThan(0);
});

const SCRATCH_MAIN = `
import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService, RecordKind } from "laneway/client";
import { Participant } from "laneway/participant";

const baseUrl = process.env.LANEWAY_ADDRESS;
const atlas = createLanewayTransport({ baseUrl, token: process.env.ATLAS_LANE_TOKEN });
const beacon = createLanewayTransport({ baseUrl, token: process.env.BEACON_LANE_TOKEN });
const published = await createClient(LaneService, atlas.transport).publish({
  lane: "measurements",
  id: "packed-one",
  kind: RecordKind.WORK,
  schema: "summary-v1",
  payload: new TextEncoder().encode('{"values":[1,2]}'),
});
const participant = new Participant({ client: createClient(LaneService, beacon.transport), lane: "measurements", group: "summarizers", waitMs: 1_000 });
const handled = [];
participant.handle("summary-v1", "atlas", async (work) => {
  handled.push({ id: work.id, sequence: String(work.sequence), payload: new TextDecoder().decode(work.payload) });
  void participant.stop();
});
await participant.run();
console.log(JSON.stringify({ published: String(published.record.sequence), handled, acked: participant.stats.acked }));
atlas.close();
beacon.close();
`;

let laneway: InProcessLaneway;
const scratch: string[] = [];

beforeAll(async () => {
  laneway = await startLanewayInProcess();
});

afterAll(async () => {
  await laneway?.stop();
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

test("a scratch project installs the packed package offline and calls Laneway through laneway/participant and laneway/client", { timeout: 180_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "laneway-package-"));
  scratch.push(dir);
  const { stdout: packed } = await run("npm", ["pack", "--pack-destination", dir, "--json", "--silent"], { cwd: repoRoot, maxBuffer: 16 * 1024 * 1024 });
  const [{ filename }] = JSON.parse(packed) as [{ filename: string }];
  const tarball = join(dir, filename);

  const app = join(dir, "app");
  await mkdir(app);
  const modules = await realpath(join(repoRoot, "node_modules"));
  const { dependencies } = JSON.parse(await readFile(join(repoRoot, "package.json"), "utf8")) as { dependencies: Record<string, string> };
  await writeFile(
    join(app, "package.json"),
    JSON.stringify({
      name: "laneway-scratch",
      private: true,
      type: "module",
      dependencies: {
        laneway: `file:${tarball}`,
        ...Object.fromEntries(Object.keys(dependencies).map((name) => [name, `file:${join(modules, name)}`])),
      },
    }),
  );
  // --ignore-scripts: the linked dependencies are built already, and a
  // lifecycle script would reach for tools the scratch project lacks.
  await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], { cwd: app });
  await writeFile(join(app, "main.mjs"), SCRATCH_MAIN);

  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    LANEWAY_ADDRESS: laneway.url,
    ATLAS_LANE_TOKEN: laneway.tokens.atlas,
    BEACON_LANE_TOKEN: laneway.tokens.beacon,
  };
  const { stdout } = await run(process.execPath, ["main.mjs"], { cwd: app, env });
  const result = JSON.parse(stdout) as { published: string; handled: { id: string; sequence: string; payload: string }[]; acked: number };
  expect(result.handled).toEqual([{ id: "packed-one", sequence: result.published, payload: '{"values":[1,2]}' }]);
  expect(result.acked).toBe(1);

  // What the installed package resolves to is the built JavaScript, and it loads no SQLite.
  expect(await sqliteModulesLoadedBy(["laneway/client", "laneway/participant"], app)).toBe(0);
});
