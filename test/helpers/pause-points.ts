/**
 * Following a Laneway child process through a fault-injection pause point
 * (`LANEWAY_PAUSE_AT`): it prints `laneway-paused <point> <id>` and stops
 * itself with SIGSTOP, so the test can SIGKILL it exactly there.
 */
import { readFile } from "node:fs/promises";
/** The state letter of /proc/<pid>/stat (`T` when stopped), or undefined when the process is gone. */
export async function processState(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // The command name is in parentheses and may hold spaces: the state follows the last ")".
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
  } catch {
    return undefined;
  }
}

/** What the pause helpers need of a Laneway child process. */
interface PausableProcess {
  readonly pid: number;
  readonly stdout: readonly string[];
}

/** A `laneway-paused <point> <id>` line the process printed, if any. */
export function pausedAt(laneway: PausableProcess): { point: string; id: string } | undefined {
  for (const line of laneway.stdout) {
    const match = /^laneway-paused (\S+) (\S+)$/.exec(line);
    if (match) return { point: match[1]!, id: match[2]! };
  }
  return undefined;
}

/**
 * Waits for the pause line, then until /proc says the process is stopped.
 * Rejects at the deadline, or as soon as `signal` aborts (the test gave up
 * on a pause, for example because it killed the process).
 */
export async function waitUntilPaused(
  laneway: PausableProcess,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<{ point: string; id: string }> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    const paused = pausedAt(laneway);
    if (paused && (await processState(laneway.pid)) === "T") return paused;
    if (options.signal?.aborted) throw new Error("no longer waiting for the pause");
    if (Date.now() > deadline) {
      throw new Error(paused ? `process ${laneway.pid} printed the pause line but did not stop` : "timed out waiting for the pause line");
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
