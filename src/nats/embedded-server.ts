/**
 * Laneway's embedded default broker: a nats-server child process with
 * JetStream, its store under a directory Laneway owns, on a loopback port.
 *
 * Layout under `storeDir`:
 *   nats-server.conf   the generated config (rewritten on every start)
 *   ports/             nats-server's ports file (emptied on every start)
 *   nats-server.pid    its pid, so a restart can stop an orphaned predecessor
 *   nats-server.log    the server's own log, rotated by size; at most a few
 *                      rotated copies are kept (see server-log-file.ts)
 *   jetstream/         the JetStream store
 *
 * Readiness, and why: the server writes `nats-server_<pid>.ports` (JSON with
 * its client URL) only once it listens, which also tells us the port it
 * picked for `port: -1` without parsing logs. We then open a TCP connection
 * and read the server's INFO line: it must arrive and say `"jetstream":true`
 * (JetStream is enabled and its store recovered before the client listener
 * opens). Reading INFO needs no credentials, so this works for any auth
 * config appended through `extraConfig`/`extraConfigText`.
 *
 * Durability: `jetstream { sync_interval: always }` is set whenever the
 * installed server accepts it (see nats-server-binary.ts). 2.9.10 does not:
 * it acknowledges writes before fsync, flushing about every two minutes.
 * {@link EmbeddedNatsServer.syncAlways} says which applies, for health and
 * operations output.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { connect as connectTcp } from "node:net";
import { join, resolve } from "node:path";

import { writePrivateFile } from "../files/index.js";
import { stopStalePredecessor, watchParentLifetime } from "./process-lifetime.js";
import {
  EmbeddedServerConfigError,
  EmbeddedServerExitedError,
  EmbeddedServerStartTimeoutError,
  NatsServerNotInstalledError,
} from "./embedded-server-errors.js";
import type { DisconnectReason } from "./broker-errors.js";
import { LogTail } from "./log-tail.js";
import { renderNatsConfig, type NatsConfig } from "./nats-config.js";
import { inspectNatsServerBinary, resolveNatsServerBinary, testNatsConfig } from "./nats-server-binary.js";
import {
  clientCloseReason,
  DEFAULT_LOG_FILE_BYTES,
  DEFAULT_ROTATED_LOG_FILES,
  keepRotatedLogsBounded,
  pruneRotatedLogs,
  SERVER_LOG_FILE,
  serverLogLines,
} from "./server-log-file.js";

/**
 * Default `max_payload` (8 MiB). NATS' own default is 1 MiB; lanes need room
 * above their base64 envelope and 512 KiB ledger. 8 MiB is also the largest
 * value nats-server accepts without a startup warning.
 */
export const DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024;

export interface EmbeddedNatsServerOptions {
  /** Directory Laneway owns for this server (config, ports file, JetStream store). Created if missing. */
  storeDir: string;
  /** Listen address. Default `127.0.0.1`. */
  host?: string;
  /** Client port; 0 (default) lets the server pick a free one. */
  port?: number;
  /** `max_payload` in bytes. Default {@link DEFAULT_MAX_PAYLOAD}. */
  maxPayload?: number;
  /** Binary path; default `$LANEWAY_NATS_SERVER_BIN`, then PATH, then /usr/sbin/nats-server. */
  binary?: string;
  /** `server_name`; default lets the server generate one. */
  serverName?: string;
  /**
   * Extra top-level config keys (nats-server option names). A `jetstream`
   * object is merged into Laneway's jetstream block; other keys replace.
   */
  extraConfig?: NatsConfig;
  /** A raw config snippet appended to the file (e.g. operator/resolver blocks). */
  extraConfigText?: string;
  /** Startup deadline in ms. Default 30 000. */
  startTimeoutMs?: number;
  /** How many log lines to keep for diagnostics. Default 200. */
  logTailLines?: number;
  /** Size at which the server rotates `nats-server.log`. Default {@link DEFAULT_LOG_FILE_BYTES} (10 MiB). */
  logFileBytes?: number;
  /** Rotated log files kept beside the current one. Default {@link DEFAULT_ROTATED_LOG_FILES} (4). */
  rotatedLogFiles?: number;
}

/** How the process ended. */
export interface ServerExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A running (or exited) embedded nats-server. Create with {@link EmbeddedNatsServer.start}. */
export class EmbeddedNatsServer {
  readonly #child: ChildProcess;
  readonly #logs: LogTail;
  readonly #exit: Promise<ServerExit>;
  readonly #options: EmbeddedNatsServerOptions;
  #exited: ServerExit | undefined;

  /** Client URL, e.g. `nats://127.0.0.1:41234`. */
  readonly url: string;
  readonly host: string;
  /** The actual client port (also when 0 was asked for). */
  readonly port: number;
  /** Absolute store directory (the one given; JetStream data is in its `jetstream/`). */
  readonly storeDir: string;
  /** The generated config file. */
  readonly configPath: string;
  /** The server's own log file (`<storeDir>/nats-server.log`; rotated copies beside it). */
  readonly logFile: string;
  /** The binary that was started. */
  readonly binary: string;
  /** Server version from `--version`, when readable. */
  readonly serverVersion: string | undefined;
  /** Whether `jetstream { sync_interval: always }` was applied (false on 2.9.10: it does not support it). */
  readonly syncAlways: boolean;
  /** `max_payload` configured. */
  readonly maxPayload: number;

  private constructor(init: {
    child: ChildProcess;
    logs: LogTail;
    exit: Promise<ServerExit>;
    options: EmbeddedNatsServerOptions;
    host: string;
    port: number;
    storeDir: string;
    configPath: string;
    logFile: string;
    binary: string;
    serverVersion: string | undefined;
    syncAlways: boolean;
    maxPayload: number;
  }) {
    this.#child = init.child;
    this.#logs = init.logs;
    this.#exit = init.exit;
    this.#options = init.options;
    this.host = init.host;
    this.port = init.port;
    this.url = `nats://${formatHost(init.host)}:${init.port}`;
    this.storeDir = init.storeDir;
    this.configPath = init.configPath;
    this.logFile = init.logFile;
    this.binary = init.binary;
    this.serverVersion = init.serverVersion;
    this.syncAlways = init.syncAlways;
    this.maxPayload = init.maxPayload;
    void this.#exit.then((e) => {
      this.#exited = e;
    });
  }

  /**
   * Writes the config, starts nats-server and resolves once it is ready.
   * Throws {@link NatsServerNotInstalledError}, {@link EmbeddedServerConfigError},
   * {@link EmbeddedServerExitedError} or {@link EmbeddedServerStartTimeoutError}.
   */
  static async start(options: EmbeddedNatsServerOptions): Promise<EmbeddedNatsServer> {
    const binary = await resolveNatsServerBinary(options.binary);
    const caps = await inspectNatsServerBinary(binary);
    const host = options.host ?? "127.0.0.1";
    const maxPayload = options.maxPayload ?? DEFAULT_MAX_PAYLOAD;
    const storeDir = resolve(options.storeDir);
    const portsDir = join(storeDir, "ports");
    const configPath = join(storeDir, "nats-server.conf");
    const pidFile = join(storeDir, "nats-server.pid");
    const logFile = join(storeDir, SERVER_LOG_FILE);
    const rotatedKept = Math.max(0, options.rotatedLogFiles ?? DEFAULT_ROTATED_LOG_FILES);
    const startTimeoutMs = options.startTimeoutMs ?? 30_000;

    await mkdir(storeDir, { recursive: true });
    await stopStalePredecessor(pidFile, configPath);
    await pruneRotatedLogs(storeDir, rotatedKept);
    // A ports file left by a killed predecessor must not be mistaken for ours.
    await rm(portsDir, { recursive: true, force: true });
    await mkdir(portsDir, { recursive: true });

    const { jetstream: extraJetStream, ...extraTop } = options.extraConfig ?? {};
    const config: NatsConfig = {
      server_name: options.serverName,
      host,
      port: options.port === undefined || options.port === 0 ? -1 : options.port,
      max_payload: maxPayload,
      ports_file_dir: portsDir,
      pid_file: pidFile,
      log_file: logFile,
      logfile_size_limit: Math.max(1, options.logFileBytes ?? DEFAULT_LOG_FILE_BYTES),
      jetstream: {
        store_dir: storeDir,
        ...(caps.supportsSyncInterval ? { sync_interval: "always" } : {}),
        ...(isRecord(extraJetStream) ? extraJetStream : {}),
      },
      ...extraTop,
    };
    await writePrivateFile(configPath, renderNatsConfig(config, options.extraConfigText));

    const test = await testNatsConfig(binary, configPath);
    if (!test.ok) throw new EmbeddedServerConfigError(configPath, test.output);

    const logs = new LogTail(options.logTailLines);
    // Its own process group: signals aimed at Laneway's group (Ctrl-C) must
    // not stop the broker before Laneway drains; see process-lifetime.ts.
    const child = spawn(binary, ["-c", configPath], { stdio: ["ignore", "pipe", "pipe"], detached: true });
    const watchdog = child.pid === undefined ? undefined : watchParentLifetime(child.pid);
    const rotation = keepRotatedLogsBounded(storeDir, rotatedKept);
    child.stdout?.on("data", (chunk: Buffer) => logs.write(chunk));
    child.stderr?.on("data", (chunk: Buffer) => logs.write(chunk));
    let spawnError: Error | undefined;
    const exit = new Promise<ServerExit>((resolveExit) => {
      child.once("exit", (code, signal) => resolveExit({ code, signal }));
      child.on("error", (err) => {
        // Only a failed spawn reaches here without an exit event.
        spawnError = err;
        if (child.pid === undefined) resolveExit({ code: null, signal: null });
      });
    });
    liveChildren.add(child);
    void exit.then(() => {
      liveChildren.delete(child);
      watchdog?.kill("SIGKILL");
      rotation.close();
    });
    // Once the server's logger is set up it writes to the file, not to
    // stderr: a failed start's diagnostics are read back from there.
    const withFileLines = async () => {
      if (child.pid !== undefined) for (const line of await serverLogLines(storeDir, child.pid, options.logTailLines ?? 200)) logs.write(`${line}\n`);
      return logs.lines();
    };

    let port: number;
    try {
      port = await waitUntilReady({ child, exit, portsDir, host, deadline: Date.now() + startTimeoutMs });
    } catch (err) {
      if (err instanceof ExitedBeforeReady) {
        if (spawnError !== undefined && child.pid === undefined) {
          throw new NatsServerNotInstalledError(binary, { cause: spawnError });
        }
        throw new EmbeddedServerExitedError(err.exit.code, err.exit.signal, await withFileLines());
      }
      if (err instanceof NotReadyInTime) {
        child.kill("SIGKILL");
        await exit;
        throw new EmbeddedServerStartTimeoutError(startTimeoutMs, await withFileLines());
      }
      child.kill("SIGKILL");
      throw err;
    }

    return new EmbeddedNatsServer({
      child,
      logs,
      exit,
      options,
      host,
      port,
      storeDir,
      configPath,
      logFile,
      binary,
      serverVersion: caps.version,
      syncAlways: caps.supportsSyncInterval,
      maxPayload,
    });
  }

  /** The child's process id. */
  get pid(): number {
    const pid = this.#child.pid;
    if (pid === undefined) throw new Error("nats-server process has no pid");
    return pid;
  }

  /** True once the process has exited (for whatever reason). */
  get exited(): boolean {
    return this.#exited !== undefined;
  }

  /** Resolves when the process exits: watch it to notice an unexpected death. */
  whenExited(): Promise<ServerExit> {
    return this.#exit;
  }

  /**
   * What the process wrote to stdout and stderr (a panic's trace, a config
   * error), for operators' diagnostics only (may contain addresses and
   * paths). Its log proper is in {@link EmbeddedNatsServer.logFile}.
   */
  logTail(): string[] {
    return this.#logs.lines();
  }

  /**
   * Why this server closed client connection `clientId` (its `cid`), when
   * its log file says so: e.g. `slow_consumer`, for which the server sends
   * the client no `-ERR`.
   */
  clientCloseReason(clientId: number): Promise<DisconnectReason | undefined> {
    const pid = this.#child.pid;
    return pid === undefined ? Promise.resolve(undefined) : clientCloseReason(this.storeDir, pid, clientId);
  }

  /**
   * Options that start the same server again: same store, same config
   * inputs, and the port it actually got (so clients' URL stays valid).
   */
  restartOptions(): EmbeddedNatsServerOptions {
    return { ...this.#options, storeDir: this.storeDir, port: this.port, binary: this.binary };
  }

  /** Sends a signal (e.g. SIGKILL, SIGSTOP, SIGCONT). No-op once exited. */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.exited) return;
    this.#child.kill(signal);
  }

  /**
   * Graceful stop: SIGTERM (plus SIGCONT in case it is paused), wait up to
   * `timeoutMs` (default 10 s), then SIGKILL. Resolves with how it ended;
   * `forced` says whether SIGKILL was needed. Note: nats-server 2.9.10
   * shuts down cleanly on SIGTERM but exits with code 1 (SIGINT gives 0), so
   * the exit code is not a failure signal here.
   */
  async stop(options: { timeoutMs?: number } = {}): Promise<ServerExit & { forced: boolean }> {
    if (this.#exited !== undefined) return { ...this.#exited, forced: false };
    this.#child.kill("SIGTERM");
    this.#child.kill("SIGCONT");
    const timeoutMs = options.timeoutMs ?? 10_000;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((r) => {
      timer = setTimeout(() => r("timeout"), timeoutMs);
    });
    const first = await Promise.race([this.#exit, timedOut]);
    clearTimeout(timer);
    if (first !== "timeout") return { ...first, forced: false };
    this.#child.kill("SIGKILL");
    return { ...(await this.#exit), forced: true };
  }
}

/**
 * Children still running. When the Node process exits (normally or via
 * process.exit) they get SIGTERM so an embedded broker does not outlive
 * Laneway holding its store. (SIGKILL of Laneway itself cannot be caught.)
 */
const liveChildren = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of liveChildren) {
    try {
      child.kill("SIGTERM");
      child.kill("SIGCONT");
    } catch {
      // Already gone.
    }
  }
});

class ExitedBeforeReady extends Error {
  constructor(readonly exit: ServerExit) {
    super("exited before ready");
  }
}

class NotReadyInTime extends Error {}

/** Polls for the ports file, then for an INFO line with JetStream enabled. Returns the port. */
async function waitUntilReady(args: {
  child: ChildProcess;
  exit: Promise<ServerExit>;
  portsDir: string;
  host: string;
  deadline: number;
}): Promise<number> {
  let exited: ServerExit | undefined;
  void args.exit.then((e) => {
    exited = e;
  });
  let port: number | undefined;
  let delayMs = 10;
  for (;;) {
    if (exited !== undefined) throw new ExitedBeforeReady(exited);
    if (Date.now() > args.deadline) throw new NotReadyInTime();
    const pid = args.child.pid;
    if (port === undefined && pid !== undefined) port = await readPortsFile(args.portsDir, pid);
    if (port !== undefined) {
      const info = await readServerInfo(args.host, port, Math.max(100, Math.min(2_000, args.deadline - Date.now())));
      if (info?.["jetstream"] === true) return port;
    }
    await sleep(delayMs);
    delayMs = Math.min(delayMs * 2, 200);
  }
}

/** The client port from `*_<pid>.ports`, or undefined while it does not exist yet. */
async function readPortsFile(dir: string, pid: number): Promise<number | undefined> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return undefined;
  }
  const name = names.find((n) => n.endsWith(`_${pid}.ports`));
  if (name === undefined) return undefined;
  try {
    const parsed = JSON.parse(await readFile(join(dir, name), "utf8")) as { nats?: unknown };
    const first = Array.isArray(parsed.nats) ? parsed.nats[0] : undefined;
    if (typeof first !== "string") return undefined;
    const port = Number(new URL(first).port);
    return Number.isInteger(port) && port > 0 ? port : undefined;
  } catch {
    // Possibly read while being written: try again on the next poll.
    return undefined;
  }
}

/** Connects, reads the server's first line, and returns its INFO JSON (or undefined). */
function readServerInfo(host: string, port: number, timeoutMs: number): Promise<Record<string, unknown> | undefined> {
  return new Promise((resolveInfo) => {
    let buffered = "";
    let settled = false;
    const socket = connectTcp({ host, port });
    const finish = (info: Record<string, unknown> | undefined): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolveInfo(info);
    };
    socket.setTimeout(timeoutMs, () => finish(undefined));
    socket.on("error", () => finish(undefined));
    socket.on("close", () => finish(undefined));
    socket.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      const end = buffered.indexOf("\r\n");
      if (end < 0) {
        if (buffered.length > 65_536) finish(undefined);
        return;
      }
      const line = buffered.slice(0, end);
      if (!line.startsWith("INFO ")) return finish(undefined);
      try {
        const info: unknown = JSON.parse(line.slice(5));
        finish(isRecord(info) ? info : undefined);
      } catch {
        finish(undefined);
      }
    });
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function formatHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}
