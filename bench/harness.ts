/**
 * What every benchmark shares: child processes for the systems under test
 * and for the load, medians over interleaved rounds, and a ratio table.
 *
 * Benchmarks never assert a speed; they print figures and ratios against a
 * baseline measured in the same run on the same machine, which is what
 * stays comparable across noisy, shared machines.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { EmbeddedNatsServer } from "../src/nats/index.js";
import { freePort } from "../test/helpers/free-port.js";

export const repoRoot = resolve(import.meta.dirname, "..");

export interface RunningProcess {
  readonly url: string;
  /** A second URL on the same line, for processes serving two ports. */
  readonly secondUrl: string | undefined;
  readonly child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts `node [...nodeArgs] --import tsx <script> ...args` and waits for its
 * "listening on <url>" line. `nodeArgs` are Node's own flags (for example
 * `--cpu-prof`).
 */
export async function startListening(script: string, args: readonly string[], env: Record<string, string>, nodeArgs: readonly string[] = []): Promise<RunningProcess> {
  const child = spawn(process.execPath, [...nodeArgs, "--import", "tsx", join(repoRoot, script), ...args], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", LANEWAY_LOG_LEVEL: "error", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [url, secondUrl] = await new Promise<[string, string | undefined]>((resolveUrl, reject) => {
    let text = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (chunk: string) => {
      text += chunk;
      const match = /listening on (http:\/\/\S+)(?: (http:\/\/\S+))?\n/.exec(text);
      if (match) resolveUrl([match[1]!, match[2]]);
    });
    child.once("exit", (code) => reject(new Error(`${script} exited with ${code} before listening`)));
  });
  return {
    url,
    secondUrl,
    child,
    stop: () =>
      new Promise<void>((done) => {
        if (child.exitCode !== null) return done();
        child.once("exit", () => done());
        child.kill("SIGTERM");
      }),
  };
}

/** Runs one script to completion and parses the JSON line it prints. */
export function runJson<T>(script: string, args: readonly string[], env: Record<string, string> = {}): Promise<T> {
  return new Promise((resolveResult, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(repoRoot, script), ...args], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
    child.once("exit", (code) => {
      if (code !== 0) return reject(new Error(`${script} exited with ${code}`));
      try {
        resolveResult(JSON.parse(out.trim().split("\n").at(-1)!) as T);
      } catch (error) {
        reject(error as Error);
      }
    });
  });
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Prints rows of a table with right-aligned numeric columns. */
export function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(line(headers));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const row of rows) console.log(line(row));
}

/** Seconds per measurement, from BENCH_SECONDS (default given). */
export function benchSeconds(fallback: number): number {
  const value = Number(process.env.BENCH_SECONDS);
  return Number.isFinite(value) && value > 0 ? value : fallback;
}

/** A free loopback TCP port (for a monitoring endpoint or a server the bench starts): the tests' own. */
export { freePort };

const ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;

/** A process's CPU time so far (user + system, from /proc), µs; 0 when it cannot be read. */
export async function processCpuUs(pid: number | undefined): Promise<number> {
  if (pid === undefined) return 0;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) / ticksPerSecond) * 1e6;
  } catch {
    return 0;
  }
}

/** A printable JSON payload of `bytes` bytes, the same in every system a bench compares. */
export function benchPayload(bytes: number): Uint8Array {
  const base = JSON.stringify({ sensor: "bench-sensor-0001", celsius: [21.5, 21.7, 21.6, 21.9], note: "" });
  return Buffer.from(base.replace('"note":""', `"note":"${"x".repeat(bytes - base.length)}"`), "utf8");
}

/** A lanes benchmark's systems: an embedded nats-server with monitoring, and `laneway serve` on it. */
export interface LanesBench {
  readonly dir: string;
  /** ATLAS_LANE_TOKEN and BEACON_LANE_TOKEN. */
  readonly tokens: { readonly ATLAS_LANE_TOKEN: string; readonly BEACON_LANE_TOKEN: string };
  readonly nats: EmbeddedNatsServer;
  /** The nats-server's monitoring base URL. */
  readonly monitor: string;
  readonly laneway: RunningProcess;
  /** Where the Laneway CPU profile goes (BENCH_CPU_PROF), if asked for. */
  readonly profileDir: string | undefined;
  /** Stops Laneway (unless `lanewayStopped`), the nats-server, and removes the directory. */
  stop(options?: { lanewayStopped?: boolean }): Promise<void>;
}

/**
 * Starts the systems of a lanes benchmark: a temporary directory, an
 * embedded nats-server with its monitoring port, and `laneway serve` on it
 * with `lanesConfig` and the projects `atlas` and `beacon` (under
 * `node --cpu-prof` when BENCH_CPU_PROF names a directory).
 */
export async function startLanesBench(name: string, lanesConfig: Record<string, unknown>): Promise<LanesBench> {
  const dir = await mkdtemp(join(tmpdir(), `laneway-bench-${name}-`));
  const tokens = { ATLAS_LANE_TOKEN: randomBytes(32).toString("hex"), BEACON_LANE_TOKEN: randomBytes(32).toString("hex") };
  const monitorPort = await freePort();
  const nats = await EmbeddedNatsServer.start({ storeDir: join(dir, "nats"), extraConfig: { http: `127.0.0.1:${monitorPort}` } });
  const lanesPath = join(dir, "lanes.json");
  await writeFile(
    lanesPath,
    JSON.stringify({
      principals: [
        { project: "atlas", token_env: "ATLAS_LANE_TOKEN" },
        { project: "beacon", token_env: "BEACON_LANE_TOKEN" },
      ],
      ...lanesConfig,
    }),
  );
  const profileDir = process.env.BENCH_CPU_PROF ? resolve(process.env.BENCH_CPU_PROF) : undefined;
  const laneway = await startListening(
    "src/cli/main.ts",
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--nats-url", nats.url, "--lanes-config", lanesPath],
    tokens,
    profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [],
  );
  return {
    dir,
    tokens,
    nats,
    monitor: `http://127.0.0.1:${monitorPort}`,
    laneway,
    profileDir,
    async stop(options = {}) {
      if (!options.lanewayStopped) await laneway.stop();
      await nats.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
