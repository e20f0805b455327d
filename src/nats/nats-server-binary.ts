/**
 * Finds the installed nats-server binary and learns what it supports.
 *
 * Why probe instead of comparing versions: the one capability Laneway needs
 * to know about, `jetstream { sync_interval: always }` (fsync every write),
 * is simply an unknown field on older servers (2.9.10 rejects it with
 * `unknown field "sync_interval"`). `nats-server -t -c <file>` parses a
 * config, reports the error and exits without starting anything or creating
 * the store directory (verified on 2.9.10), so testing a tiny config that
 * sets it answers the question for any build, including patched or
 * distribution versions whose version string says little.
 */
import { execFile } from "node:child_process";
import { constants as fsConstants } from "node:fs";
import { access, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";

import { writePrivateFile } from "../files/index.js";
import { NatsServerNotInstalledError } from "./embedded-server-errors.js";
import { renderNatsConfig } from "./nats-config.js";

const execFileAsync = promisify(execFile);

/** Environment variable that overrides where the binary is. */
export const NATS_SERVER_BIN_ENV = "LANEWAY_NATS_SERVER_BIN";

/** Where Debian's package installs it; /usr/sbin is often not on a non-root PATH. */
const wellKnownPaths = ["/usr/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/bin/nats-server"];

/** What the installed binary is and can do. */
export interface NatsServerCapabilities {
  /** Absolute path (or the path given) of the binary. */
  readonly binary: string;
  /** Version from `--version` (e.g. `2.9.10`), if it could be read. */
  readonly version: string | undefined;
  /** Whether `jetstream { sync_interval: always }` is accepted. */
  readonly supportsSyncInterval: boolean;
}

/**
 * Resolves the binary: the explicit path, else `$LANEWAY_NATS_SERVER_BIN`,
 * else `nats-server` on PATH, else the well-known install paths. An explicit
 * or environment path is used as given (no silent fallback to another
 * binary). Throws {@link NatsServerNotInstalledError} when nothing
 * executable is found.
 */
export async function resolveNatsServerBinary(explicit?: string): Promise<string> {
  const requested = explicit ?? nonEmpty(process.env[NATS_SERVER_BIN_ENV]);
  if (requested !== undefined) {
    if (!requested.includes("/")) {
      const found = await searchPath(requested);
      if (found !== undefined) return found;
      throw new NatsServerNotInstalledError(requested);
    }
    if (await isExecutable(requested)) return requested;
    throw new NatsServerNotInstalledError(requested);
  }
  const found = (await searchPath("nats-server")) ?? (await firstExecutable(wellKnownPaths));
  if (found === undefined) throw new NatsServerNotInstalledError("nats-server");
  return found;
}

const capabilityCache = new Map<string, Promise<NatsServerCapabilities>>();

/**
 * Reads the version and probes `sync_interval` support of `binary`. Cached
 * per path for the life of the process (a binary does not change under a
 * running service; tests that swap binaries use different paths).
 */
export function inspectNatsServerBinary(binary: string): Promise<NatsServerCapabilities> {
  let cached = capabilityCache.get(binary);
  if (cached === undefined) {
    cached = probe(binary);
    capabilityCache.set(binary, cached);
    cached.catch(() => capabilityCache.delete(binary));
  }
  return cached;
}

/**
 * Runs `nats-server -t -c <configPath>`. Resolves `{ ok: true }` when the
 * server accepts the file, otherwise `{ ok: false, output }` with what it
 * printed (for diagnostics only).
 */
export async function testNatsConfig(
  binary: string,
  configPath: string,
): Promise<{ ok: true } | { ok: false; output: string[] }> {
  try {
    await execFileAsync(binary, ["-t", "-c", configPath], { timeout: 15_000 });
    return { ok: true };
  } catch (err) {
    if (isSpawnFailure(err)) throw new NatsServerNotInstalledError(binary, { cause: err });
    const e = err as { stdout?: string; stderr?: string };
    const output = `${e.stdout ?? ""}\n${e.stderr ?? ""}`.split("\n").filter((l) => l.trim() !== "");
    return { ok: false, output };
  }
}

async function probe(binary: string): Promise<NatsServerCapabilities> {
  let version: string | undefined;
  try {
    const { stdout } = await execFileAsync(binary, ["--version"], { timeout: 15_000 });
    version = /v?(\d+\.\d+\.\d+[^\s]*)/.exec(stdout)?.[1];
  } catch (err) {
    if (isSpawnFailure(err)) throw new NatsServerNotInstalledError(binary, { cause: err });
  }
  const dir = await mkdtemp(join(tmpdir(), "laneway-nats-probe-"));
  try {
    const configPath = join(dir, "probe.conf");
    const config = renderNatsConfig({
      jetstream: { store_dir: join(dir, "store"), sync_interval: "always" },
    });
    await writePrivateFile(configPath, config);
    const result = await testNatsConfig(binary, configPath);
    return { binary, version, supportsSyncInterval: result.ok };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function isSpawnFailure(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOENT" || code === "EACCES" || code === "ENOTDIR";
}

async function searchPath(name: string): Promise<string | undefined> {
  const dirs = (process.env["PATH"] ?? "").split(delimiter).filter((d) => d !== "");
  return firstExecutable(dirs.map((d) => join(d, name)));
}

async function firstExecutable(paths: readonly string[]): Promise<string | undefined> {
  for (const p of paths) if (await isExecutable(p)) return p;
  return undefined;
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, fsConstants.X_OK);
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === "" ? undefined : value;
}
