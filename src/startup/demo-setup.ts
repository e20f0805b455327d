/**
 * First-start demo files for `npm start` (`laneway serve --demo`).
 *
 * The demo makes the cores work out of the box without weakening anything
 * the real configuration path checks: it writes each core's ordinary demo
 * file (the core's settings declare it: for lanes, `lanes.json`, the
 * specification's example lane on the embedded nats-server) and an ordinary
 * tokens.env holding freshly generated tokens, and then the normal loaders
 * validate them. Nothing is relaxed for demo mode.
 *
 * Files, under the data directory:
 * - each core's demo file. Holds no secrets; created once, then left alone
 *   (edit it freely; the core's loader validates it on every start).
 * - `tokens.env` — the tokens the cores' demo files name (for lanes,
 *   `ATLAS_LANE_TOKEN` and `BEACON_LANE_TOKEN`) and `LANEWAY_ADMIN_TOKEN`,
 *   each 32 random bytes as 64 hex characters, mode 0600, sourceable with
 *   `set -a; . .laneway/tokens.env`.
 *
 * Reuse policy for an existing tokens.env (the brief left this open):
 * - a symlink or non-regular file is refused (it could point anywhere);
 * - a file owned by another user is refused (its contents are not ours to
 *   trust, and we could not repair its mode);
 * - a file whose mode grants group/other access is repaired to 0600 and
 *   reported through `repairedTokensMode`, so the server can warn that the
 *   tokens may have been read and should be rotated (delete the file).
 *   Refusing to start would not undo an exposure that already happened,
 *   and a demo that stops working because of a `chmod` is worse than one
 *   that fixes it and says so;
 * - a variable the environment sets itself is not written, and a different
 *   value for it in an existing file is removed: the file never shows a
 *   token the running server does not accept;
 * - a variable missing from the file (and not set by the environment, for
 *   example because an earlier start took it from there) is generated and
 *   added, keeping every other line; `completed` says which.
 *
 * Files are created atomically and exclusively (src/files: written to a
 * private temporary file, fsync'd, then hard-linked into place), so two
 * servers starting at once agree on one set of tokens and never see a
 * half-written file.
 */
import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { formatEnvFile, readEnvFile } from "../config/env-file.js";
import { ConfigError, EnvFileError } from "../config/errors.js";
import { ADMIN_TOKEN_ENV } from "../config/tokens.js";
import { createPrivateFile, writePrivateFile } from "../files/index.js";

/** The demo files under the data directory cannot be created or safely reused. */
export class DemoSetupError extends ConfigError {
  override readonly name = "DemoSetupError";
}

export const DEMO_TOKENS_FILE = "tokens.env";

/** What demo mode writes for one core (its settings declare it). */
export interface DemoFile {
  /** The core's name. */
  readonly core: string;
  /** The file's name under the data directory. */
  readonly file: string;
  readonly contents: string;
  /** The token variables the file names, generated into tokens.env. */
  readonly tokens?: readonly string[];
}

/** The variables tokens.env defines, in the order they are written: the cores' demo tokens, then the operator token. */
export function demoTokenVariables(files: readonly DemoFile[]): readonly string[] {
  return Object.freeze([...new Set([...files.flatMap((f) => f.tokens ?? []), ADMIN_TOKEN_ENV])]);
}

export interface DemoSetup {
  /** Absolute data directory. */
  readonly dataDir: string;
  /** Each core's demo file, by core name: a core uses it when its own settings name none. */
  readonly files: ReadonlyMap<string, string>;
  /** `<dataDir>/tokens.env`. */
  readonly tokensPath: string;
  /**
   * Every variable in tokens.env. Merge it *under* the process environment
   * (`{ ...demo.env, ...process.env }`) so explicitly exported variables win,
   * and pass the result to the loaders; process.env itself is not touched.
   */
  readonly env: Readonly<Record<string, string>>;
  /** Which files this call created (false = reused). */
  readonly created: { readonly files: readonly string[]; readonly tokens: boolean };
  /** tokens.env was accessible to group/other and has been reset to 0600; its tokens may have leaked. */
  readonly repairedTokensMode: boolean;
  /**
   * Demo variables the environment sets itself: tokens.env does not hold
   * them (a stale value there was removed), so the file never shows a token
   * the running server does not accept.
   */
  readonly fromEnvironment: readonly string[];
  /** Variables an existing tokens.env lacked and that were generated into it now. */
  readonly completed: readonly string[];
}

/**
 * Create the demo files on first start; reuse (and check) them afterwards.
 * Token variables that `environment` already sets are left out of
 * tokens.env, and removed from an existing one whose value differs.
 */
export async function ensureDemoSetup(dataDir: string, environment: Readonly<Record<string, string | undefined>> = {}, demoFiles: readonly DemoFile[] = []): Promise<DemoSetup> {
  const tokenVariables = demoTokenVariables(demoFiles);
  const fromEnvironment: readonly string[] = tokenVariables.filter((name) => (environment[name] ?? "") !== "");
  const dir = resolve(dataDir);
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new DemoSetupError(`demo: cannot create the data directory (${code(error)})`);
  }
  const tokensPath = join(dir, DEMO_TOKENS_FILE);

  const files = new Map<string, string>();
  const filesCreated: string[] = [];
  for (const demo of demoFiles) {
    const path = join(dir, demo.file);
    files.set(demo.core, path);
    if (!(await exists(path)) && (await createExclusive(path, demo.contents, 0o644))) filesCreated.push(demo.core);
  }

  let tokensCreated = false;
  if (!(await exists(tokensPath))) {
    const tokens: Record<string, string> = {};
    for (const name of tokenVariables) if (!fromEnvironment.includes(name)) tokens[name] = randomBytes(32).toString("hex");
    tokensCreated = await createExclusive(tokensPath, formatEnvFile(tokens), 0o600);
  }

  const repairedTokensMode = tokensCreated ? false : await checkTokensFile(tokensPath);
  let env: Readonly<Record<string, string>>;
  try {
    env = await readEnvFile(tokensPath);
  } catch (error) {
    if (error instanceof EnvFileError) throw new DemoSetupError(`demo: ${DEMO_TOKENS_FILE}: ${error.message}`);
    throw error;
  }
  const stale = fromEnvironment.filter((name) => Object.hasOwn(env, name) && env[name] !== environment[name]);
  const completed = tokenVariables.filter((name) => !fromEnvironment.includes(name) && (env[name] ?? "") === "");
  if (stale.length > 0 || completed.length > 0) {
    const kept: Record<string, string> = Object.fromEntries(Object.entries(env).filter(([name]) => !stale.includes(name)));
    for (const name of completed) kept[name] = randomBytes(32).toString("hex");
    await replaceFile(tokensPath, formatEnvFile(kept), 0o600);
    env = Object.freeze(kept);
  }
  return Object.freeze({
    dataDir: dir,
    files,
    tokensPath,
    env,
    created: Object.freeze({ files: Object.freeze(filesCreated), tokens: tokensCreated }),
    repairedTokensMode,
    fromEnvironment: Object.freeze([...fromEnvironment]),
    completed: Object.freeze([...completed]),
  });
}

/**
 * Write `content` to `path` only if nothing is there yet, atomically.
 * @returns true if this call created the file, false if it already existed
 */
async function createExclusive(path: string, content: string, mode: number): Promise<boolean> {
  try {
    return await createPrivateFile(path, content, mode);
  } catch (error) {
    throw new DemoSetupError(`demo: cannot create ${path} (${code(error)})`);
  }
}

/** Replace `path` atomically with `content`. */
async function replaceFile(path: string, content: string, mode: number): Promise<void> {
  try {
    await writePrivateFile(path, content, mode);
  } catch (error) {
    throw new DemoSetupError(`demo: cannot rewrite ${path} (${code(error)})`);
  }
}

/**
 * Check an existing tokens.env before trusting it (see the module comment).
 * @returns true if its mode had to be repaired
 */
async function checkTokensFile(path: string): Promise<boolean> {
  let stats;
  try {
    stats = await lstat(path);
  } catch (error) {
    throw new DemoSetupError(`demo: cannot inspect ${path} (${code(error)})`);
  }
  if (stats.isSymbolicLink() || !stats.isFile()) {
    throw new DemoSetupError(`demo: ${path} must be a regular file, not a symlink or other file type`);
  }
  const uid = process.getuid?.();
  if (uid !== undefined && stats.uid !== uid) {
    throw new DemoSetupError(`demo: ${path} is owned by another user; remove it or fix its owner`);
  }
  if ((stats.mode & 0o077) === 0) return false;
  try {
    await chmod(path, 0o600);
  } catch (error) {
    throw new DemoSetupError(`demo: cannot set mode 0600 on ${path} (${code(error)})`);
  }
  return true;
}

/** Whether anything (even a dangling symlink) occupies `path`. */
async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (error) {
    if (code(error) === "ENOENT") return false;
    throw new DemoSetupError(`demo: cannot inspect ${path} (${code(error)})`);
  }
}

function code(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? "error";
}
