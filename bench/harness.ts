/**
 * What every benchmark shares: child processes for the systems under test
 * and for the load, medians over interleaved rounds, and a ratio table.
 *
 * Benchmarks never assert a speed; they print figures and ratios against a
 * baseline measured in the same run on the same machine, which is what
 * stays comparable across noisy, shared machines.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join, resolve } from "node:path";

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
