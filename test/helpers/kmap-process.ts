/**
 * `laneway serve` for Kmap fault tests: a child process on an existing data
 * directory that may pause before it listens.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
import { CommandEventKind } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { ClientPool, collectLines, spawnLaneway, startLanewayProcess, type ChildLaneway, type TestTokens } from "./laneway.js";
import { pausedAt, processState } from "./pause-points.js";
import { waitFor } from "./wait-for.js";
/** `laneway serve` as a child process that may pause (SIGSTOP) before it listens. */
export interface KmapProcess {
  readonly pid: number;
  readonly tokens: TestTokens;
  readonly stdout: string[];
  readonly stderr: string[];
  /** The base URL; undefined when the process paused before listening. */
  readonly url: string | undefined;
  readonly clients: ClientPool;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Whether the process has exited (on its own or killed). */
  hasExited(): boolean;
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Like startLanewayProcess, on an existing data directory, without lanes,
 * but it also returns when the process paused before listening: on a
 * restart the runtime starts on the backlog right after the Kmap core
 * opens, so a pause point can be reached before the listener is up (a kill
 * during startup recovery is a scenario worth having).
 */
export async function startKmapProcess(options: { dataDir: string; tokens: TestTokens; pauseAt?: string | undefined }): Promise<KmapProcess> {
  const args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", options.dataDir, "--shutdown-timeout", "5s"];
  const env: Record<string, string> = { LANEWAY_ADMIN_TOKEN: options.tokens.admin };
  if (options.pauseAt) env.LANEWAY_PAUSE_AT = options.pauseAt;
  const child = spawnLaneway(args, env);
  const stdout: string[] = [];
  const stderr: string[] = [];
  collectLines(child.stdout!, stdout);
  collectLines(child.stderr!, stderr);
  let done = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      done = true;
      resolve({ code, signal });
    }),
  );
  const kill = (signal: NodeJS.Signals = "SIGTERM") => {
    if (!done) child.kill(signal);
    return exited;
  };
  let started: string;
  try {
    started = await waitFor(
      async () => {
        const line = stdout.find((l) => l.includes(" listening on "));
        if (line) return line.slice(line.indexOf("http://"));
        if (pausedAt({ pid: child.pid!, stdout }) && (await processState(child.pid!)) === "T") return "paused";
        return done ? "exited" : undefined;
      },
      { timeoutMs: 60_000, what: "laneway to listen or pause" },
    );
  } catch (error) {
    await kill("SIGKILL");
    throw error;
  }
  if (started === "exited") throw new Error(`laneway exited before listening: ${stderr.join("\n")}`);
  const listening = started === "paused" ? undefined : started;
  return {
    pid: child.pid!,
    tokens: options.tokens,
    stdout,
    stderr,
    url: listening,
    clients: new ClientPool(() => listening!),
    exited,
    hasExited: () => done,
    kill,
  };
}

/** The kinds of change-log events, by name. */
export const kindsOf = (events: readonly { kind: CommandEventKind }[] | undefined) => (events ?? []).map((e) => CommandEventKind[e.kind]);

/**
 * Expects the event kinds of a head deferred by a held write lock, possibly
 * more than once (a test releases the lock after it sees the first
 * deferral, and on a busy machine a retry may come before that), then
 * `rest`.
 */
export const deferredHead = (kinds: readonly string[], rest: readonly string[]) => {
  expect(kinds.slice(0, 3)).toEqual(["QUEUED", "APPLYING", "RETRY_SCHEDULED"]);
  let i = 3;
  while (kinds[i] === "APPLYING" && kinds[i + 1] === "RETRY_SCHEDULED") i += 2;
  expect(kinds.slice(i)).toEqual(rest);
};

/**
 * The processes and data directories of a Kmap crash test file: `laneway
 * serve` child processes (without lanes, with a pause point when asked) on
 * data directories the file owns. Call `cleanup()` after each test.
 */
export function kmapCrashRuns(prefix: string) {
  const running: ChildLaneway[] = [];
  const dataDirs: string[] = [];
  return {
    async newDataDir(): Promise<string> {
      const dir = await mkdtemp(join(tmpdir(), `laneway-kmap-${prefix}-`));
      dataDirs.push(dir);
      return dir;
    },
    async start(dataDir: string, tokens: TestTokens, pauseAt?: string): Promise<ChildLaneway> {
      const laneway = await startLanewayProcess({ dataDir, tokens, lanesConfig: false, env: pauseAt ? { LANEWAY_PAUSE_AT: pauseAt } : {} });
      running.push(laneway);
      return laneway;
    },
    /** SIGKILLs the process and checks it was the kill that ended it (it had not crashed on its own). */
    async killHard(laneway: ChildLaneway): Promise<void> {
      laneway.clients.closeAll();
      expect(await laneway.kill("SIGKILL"), laneway.stderr.join("\n")).toEqual({ code: null, signal: "SIGKILL" });
    },
    async cleanup(): Promise<void> {
      for (const laneway of running.splice(0)) await laneway.remove();
      for (const dir of dataDirs.splice(0)) await rm(dir, { recursive: true, force: true });
    },
  };
}

