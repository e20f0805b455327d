/**
 * Real nats-server processes for tests.
 *
 * Each server gets a fresh temporary store under os.tmpdir() and a free
 * loopback port, so a test can stop, kill, pause or restart its own broker
 * without touching any other process (never the hand-experiment server on
 * 4222). It reuses src/nats/embedded-server.ts, so tests exercise the same
 * start/readiness/stop code that `laneway serve` uses.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { EmbeddedNatsServer, type EmbeddedNatsServerOptions } from "../../src/nats/embedded-server.js";

export interface StartNatsServerOptions {
  /** Extra top-level config keys (a `jetstream` object is merged). */
  extraConfig?: EmbeddedNatsServerOptions["extraConfig"];
  /** Raw config snippet appended (e.g. operator/resolver blocks for JWT auth). */
  extraConfigText?: string;
  maxPayload?: number;
  serverName?: string;
  /** Binary override (default as in production: env, PATH, /usr/sbin). */
  binary?: string;
  /** Size at which the server rotates its log file (default as in production). */
  logFileBytes?: number;
  /** Rotated log files kept (default as in production). */
  rotatedLogFiles?: number;
}

/** A test's own nats-server. */
export interface NatsServerHandle {
  /** `nats://127.0.0.1:<port>`; stays valid across restart(). */
  readonly url: string;
  readonly port: number;
  /** Temporary directory holding config and JetStream store. */
  readonly storeDir: string;
  /** Pid of the current process (changes on restart). */
  readonly pid: number;
  /** The current embedded server (changes on restart). */
  readonly server: EmbeddedNatsServer;
  /** Whether the process is currently running (not exited). */
  readonly running: boolean;
  /** Graceful stop (SIGTERM, then SIGKILL after a deadline). */
  stop(): Promise<void>;
  /** Sends `signal`; for terminating signals waits until the process is gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /**
   * SIGSTOP: the process keeps its sockets but stops answering. Resolves
   * once the kernel reports it stopped (signal delivery is asynchronous:
   * without the wait a request sent right after can still be answered).
   */
  pause(): Promise<void>;
  /** SIGCONT; resolves once the process runs again. */
  resume(): Promise<void>;
  /** Stops it if running, then starts it again on the same port with the same store; waits until ready. */
  restart(): Promise<void>;
  /** Stops it and deletes the temporary store. Idempotent. */
  remove(): Promise<void>;
}

const handles = new Set<NatsServerHandle>();

/** Starts a nats-server with JetStream on a free loopback port and a fresh temporary store. */
export async function startNatsServer(options: StartNatsServerOptions = {}): Promise<NatsServerHandle> {
  const storeDir = await mkdtemp(join(tmpdir(), "laneway-nats-test-"));
  let server: EmbeddedNatsServer;
  try {
    server = await EmbeddedNatsServer.start({
      storeDir,
      host: "127.0.0.1",
      port: 0,
      ...options,
    });
  } catch (err) {
    await rm(storeDir, { recursive: true, force: true });
    throw err;
  }
  let removed = false;

  const handle: NatsServerHandle = {
    get url() {
      return server.url;
    },
    get port() {
      return server.port;
    },
    storeDir,
    get pid() {
      return server.pid;
    },
    get server() {
      return server;
    },
    get running() {
      return !server.exited;
    },
    async stop() {
      await server.stop();
    },
    async kill(signal: NodeJS.Signals = "SIGKILL") {
      server.kill(signal);
      if (terminating.has(signal)) {
        if (signal !== "SIGKILL") server.kill("SIGCONT");
        await server.whenExited();
      }
    },
    async pause() {
      server.kill("SIGSTOP");
      await waitForProcessState(server, true);
    },
    async resume() {
      server.kill("SIGCONT");
      await waitForProcessState(server, false);
    },
    async restart() {
      if (removed) throw new Error("nats-server test handle was removed");
      if (!server.exited) await server.stop();
      server = await EmbeddedNatsServer.start(server.restartOptions());
    },
    async remove() {
      if (removed) return;
      removed = true;
      handles.delete(handle);
      await server.stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
  handles.add(handle);
  return handle;
}

/** Removes every server started by this worker that is still around (for afterAll). */
export async function removeAllNatsServers(): Promise<void> {
  await Promise.all([...handles].map((h) => h.remove()));
}

const terminating = new Set<NodeJS.Signals>(["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"]);

/** Polls /proc/<pid>/stat until the process is (not) in the stopped state `T`. */
async function waitForProcessState(server: EmbeddedNatsServer, stopped: boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!server.exited) {
    let state: string | undefined;
    try {
      const stat = await readFile(`/proc/${server.pid}/stat`, "utf8");
      // Format: "pid (comm) S ..."; comm may contain spaces, so split after ")".
      state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    } catch {
      return; // No /proc (or process gone): nothing to wait for.
    }
    if ((state === "T" || state === "t") === stopped) return;
    if (Date.now() > deadline) throw new Error(`nats-server did not ${stopped ? "stop" : "continue"}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
