/**
 * Laneway under test: started in-process (fast, logs captured) or as a
 * child process (`node --import tsx src/cli/main.ts serve`, one PID, so a
 * test can SIGTERM, SIGKILL or restart it), with a temporary data
 * directory, a lanes configuration and freshly generated tokens.
 *
 * Clients are the generated ones on the transports of src/client, so tests
 * call the service exactly as users do.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createLanewayTransport, type WireProtocol } from "../../src/client/transport.js";
import { exampleLanesConfig } from "../../src/lanes/index.js";
import { coreSettings } from "../../src/server/cores/index.js";
import { loadStartupConfig } from "../../src/startup/index.js";
import { createLogger } from "../../src/log/logger.js";
import { LanewayServer, type ShutdownReport } from "../../src/server/laneway-server.js";
import { waitFor } from "./wait-for.js";

export const repoRoot = resolve(import.meta.dirname, "../..");

/** Fresh secrets for one Laneway instance. */
export interface TestTokens {
  readonly atlas: string;
  readonly beacon: string;
  readonly admin: string;
}

export function generateTokens(): TestTokens {
  return {
    atlas: randomBytes(32).toString("hex"),
    beacon: randomBytes(32).toString("hex"),
    admin: randomBytes(32).toString("hex"),
  };
}

/** The specification's example lanes configuration (namespace `commons`), with top-level fields replaced. */
export { exampleLanesConfig } from "../../src/lanes/index.js";

export interface LanewayTestOptions {
  /** An external NATS url (a test-owned server); default: Laneway's embedded server. */
  readonly natsUrl?: string;
  /** The lanes configuration; `false` turns lanes off. Default: the example lane. */
  readonly lanesConfig?: Record<string, unknown> | false;
  /** Whether the operator token is configured. Default true. */
  readonly admin?: boolean;
  /** Extra `serve` flags. */
  readonly args?: readonly string[];
  /** Extra environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Reuse a data directory (for restarts); default a fresh temporary one. */
  readonly dataDir?: string;
  /** Reuse tokens (for restarts). */
  readonly tokens?: TestTokens;
  /** Child processes only: the open-file limit the process runs under (prlimit). */
  readonly openFileLimit?: number;
  /** Child processes only: the largest file, in bytes, the process may write (prlimit --fsize; writes past it fail with EFBIG). */
  readonly fileSizeLimit?: number;
}

interface Prepared {
  readonly dataDir: string;
  readonly tokens: TestTokens;
  readonly args: string[];
  readonly env: Record<string, string>;
  readonly ownsDataDir: boolean;
}

async function prepare(options: LanewayTestOptions): Promise<Prepared> {
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "laneway-test-")));
  const tokens = options.tokens ?? generateTokens();
  const args = ["--listen", "127.0.0.1:0", "--data-dir", dataDir, "--shutdown-timeout", "5s", ...(options.args ?? [])];
  if (options.natsUrl) args.push("--nats-url", options.natsUrl);
  if (options.lanesConfig !== false) {
    const path = join(dataDir, "lanes.json");
    await writeFile(path, JSON.stringify(options.lanesConfig ?? exampleLanesConfig()));
    args.push("--lanes-config", path);
  }
  const env: Record<string, string> = {
    ATLAS_LANE_TOKEN: tokens.atlas,
    BEACON_LANE_TOKEN: tokens.beacon,
    ...(options.admin === false ? {} : { LANEWAY_ADMIN_TOKEN: tokens.admin }),
    ...options.env,
  };
  return { dataDir, tokens, args, env, ownsDataDir };
}

/** Opens generated clients and closes all their connections at once. */
export class ClientPool {
  readonly #closers: (() => void)[] = [];

  constructor(private readonly url: () => string) {}

  client<S extends DescService>(
    service: S,
    options: { token?: string | undefined; protocol?: WireProtocol; httpVersion?: "1.1" | "2"; interceptors?: readonly Interceptor[] } = {},
  ): Client<S> {
    const transport = createLanewayTransport({ baseUrl: this.url(), ...options });
    this.#closers.push(() => transport.close());
    return createClient(service, transport.transport);
  }

  closeAll(): void {
    for (const close of this.#closers.splice(0)) close();
  }
}

/** Laneway running in the test's own process. */
export interface InProcessLaneway {
  readonly url: string;
  readonly server: LanewayServer;
  readonly tokens: TestTokens;
  readonly dataDir: string;
  /** Every log line written so far (JSON text). */
  readonly logs: string[];
  readonly clients: ClientPool;
  /** Closes clients, shuts the server down and removes the data directory (unless it was given). */
  stop(): Promise<ShutdownReport>;
}

export async function startLanewayInProcess(options: LanewayTestOptions = {}): Promise<InProcessLaneway> {
  const prepared = await prepare(options);
  const logs: string[] = [];
  const startup = await loadStartupConfig(prepared.args, { ...prepared.env }, { cores: coreSettings });
  const server = await LanewayServer.start({
    startup,
    logger: createLogger({ level: "debug", write: (line) => logs.push(line) }),
  });
  const clients = new ClientPool(() => server.url);
  return {
    url: server.url,
    server,
    tokens: prepared.tokens,
    dataDir: prepared.dataDir,
    logs,
    clients,
    async stop() {
      clients.closeAll();
      const report = await server.close();
      if (prepared.ownsDataDir) await rm(prepared.dataDir, { recursive: true, force: true });
      return report;
    },
  };
}

/** Laneway running as `laneway serve` in a child process. */
export interface ChildLaneway {
  readonly url: string;
  readonly pid: number;
  readonly tokens: TestTokens;
  readonly dataDir: string;
  readonly stdout: string[];
  readonly stderr: string[];
  readonly clients: ClientPool;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Sends a signal; resolves once the process has exited for terminating signals. */
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Closes clients, SIGKILLs the process if still running and removes the data directory (unless given). */
  remove(): Promise<void>;
}

/** Runs `laneway <args>` (the CLI entry) as a child process. */
export function spawnLaneway(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
  options: { openFileLimit?: number; fileSizeLimit?: number } = {},
): ChildProcess {
  const node = [process.execPath, "--import", "tsx", join(repoRoot, "src/cli/main.ts"), ...args];
  // prlimit execs the command, so the pid stays Laneway's own.
  const limits = [
    ...(options.openFileLimit === undefined ? [] : [`--nofile=${options.openFileLimit}:${options.openFileLimit}`]),
    ...(options.fileSizeLimit === undefined ? [] : [`--fsize=${options.fileSizeLimit}:${options.fileSizeLimit}`]),
  ];
  const argv = limits.length === 0 ? node : ["/usr/bin/prlimit", ...limits, ...node];
  return spawn(argv[0]!, argv.slice(1), {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
}

export async function startLanewayProcess(options: LanewayTestOptions = {}): Promise<ChildLaneway> {
  const prepared = await prepare(options);
  const child = spawnLaneway(["serve", ...prepared.args], prepared.env, {
    ...(options.openFileLimit === undefined ? {} : { openFileLimit: options.openFileLimit }),
    ...(options.fileSizeLimit === undefined ? {} : { fileSizeLimit: options.fileSizeLimit }),
  });
  const stdout: string[] = [];
  const stderr: string[] = [];
  collectLines(child.stdout!, stdout);
  collectLines(child.stderr!, stderr);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) =>
    child.once("exit", (code, signal) => resolveExit({ code, signal })),
  );
  let done = false;
  void exited.then(() => (done = true));
  // Fail at once if the process exits before it listens.
  const exitedEarly = exited.then(() => {
    throw new Error(`laneway exited before listening: ${stderr.join("\n")}`);
  });
  const listening = waitFor(
    () => {
      const line = stdout.find((l) => l.includes(" listening on "));
      return line?.slice(line.indexOf("http://"));
    },
    { timeoutMs: 60_000, what: "laneway to listen" },
  );
  let url: string;
  try {
    url = await Promise.race([listening, exitedEarly]);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  } finally {
    exitedEarly.catch(() => {});
  }
  const clients = new ClientPool(() => url);
  return {
    url,
    pid: child.pid!,
    tokens: prepared.tokens,
    dataDir: prepared.dataDir,
    stdout,
    stderr,
    clients,
    exited,
    async kill(signal = "SIGTERM") {
      if (!done) child.kill(signal);
      return exited;
    },
    async remove() {
      clients.closeAll();
      if (!done) child.kill("SIGKILL");
      await exited;
      // The embedded nats-server outlives a SIGKILLed Laneway for a moment and
      // may still be writing its store: retry what it refills (ENOTEMPTY).
      if (prepared.ownsDataDir) await rm(prepared.dataDir, { recursive: true, force: true, maxRetries: 30, retryDelay: 100 });
    },
  };
}

/** Collects a stream's output line by line into `into`. */
export function collectLines(stream: NodeJS.ReadableStream, into: string[]): void {
  let partial = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    partial += chunk;
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    into.push(...lines);
  });
  stream.on("end", () => {
    if (partial) into.push(partial);
  });
}
