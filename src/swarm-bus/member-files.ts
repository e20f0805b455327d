/**
 * A member's side of join and refresh: reading its invite, refusing a
 * downgrade, and saving `hive.creds` beside `hive.env`.
 *
 * Joining with an invite marked `AGENTIHOOKS_BUS_SCOPED=1` refuses an
 * unscoped credential and writes nothing. That guards a scoped member
 * against a downgrade; the hub's 403 is the enforcement, since anyone
 * holding the invite file can edit its marker. The refusal comes after
 * the hub rotated the member's Redis password, as the specification says:
 * the Redis URL of the invite or of the old hive.env stops authenticating.
 */
import { isAbsolute, join, resolve } from "node:path";
import { formatEnvFile, parseEnvFile, Secret } from "../config/index.js";
import { BUS_TEXTS, SwarmError } from "./errors.js";
import { HIVE_CREDS_FILE, HIVE_ENV, HIVE_ENV_FILE } from "./member-env.js";
import { errnoCode, readOptionalFile, writePrivateFile } from "../files/index.js";
import { isMemberId } from "./swarm-names.js";

/** An invite as a member reads it. */
export interface MemberInvite {
  /** Absolute path of the invite file. */
  readonly path: string;
  readonly memberId: string;
  /** The invite secret: the bearer token of join and refresh. */
  readonly secret: Secret;
  /** The hub's Laneway address, when the invite names it. */
  readonly hubAddress: string | undefined;
  /** Whether the invite is marked AGENTIHOOKS_BUS_SCOPED=1. */
  readonly scoped: boolean;
}

/** Reads an invite file; errors name the problem, never a value. */
export async function readInvite(path: string, cwd: string = process.cwd()): Promise<MemberInvite> {
  const absolute = isAbsolute(path) ? path : resolve(cwd, path);
  const env = await readEnvText(absolute, "the invite");
  const memberId = env[HIVE_ENV.member];
  const secret = env[HIVE_ENV.secret];
  if (memberId === undefined || !isMemberId(memberId)) throw new SwarmError("swarm_invalid", `the invite has no valid ${HIVE_ENV.member} line`);
  if (secret === undefined || secret === "") throw new SwarmError("swarm_invalid", `the invite has no ${HIVE_ENV.secret} line`);
  return {
    path: absolute,
    memberId,
    secret: new Secret(secret),
    hubAddress: env[HIVE_ENV.hubAddress],
    scoped: env[HIVE_ENV.busScoped] === "1",
  };
}

/**
 * Refuses an unscoped credential offered for a scoped invite with the
 * specification's text (`swarm_unscoped`).
 */
export function acceptCredential(invite: Pick<MemberInvite, "scoped">, credential: { readonly scoped: boolean }): void {
  if (invite.scoped && !credential.scoped) throw new SwarmError("swarm_unscoped", BUS_TEXTS.unscopedOffered);
}

/** Where a member's files went. */
export interface SavedHiveFiles {
  readonly hiveEnvPath: string;
  readonly credsPath: string;
}

/**
 * Saves `hive.creds` (mode 0600) in `dir`, then `hive.env` (mode 0600) with
 * `AGENTIHOOKS_BUS_CREDENTIALS` pointing at it and the invite's path for
 * the next refresh. Each file is replaced atomically.
 */
export async function saveHiveFiles(
  dir: string,
  files: { readonly creds: string; readonly hiveEnv: readonly string[]; readonly invitePath: string },
  cwd: string = process.cwd(),
): Promise<SavedHiveFiles> {
  const folder = isAbsolute(dir) ? dir : resolve(cwd, dir);
  const credsPath = join(folder, HIVE_CREDS_FILE);
  const hiveEnvPath = join(folder, HIVE_ENV_FILE);
  const entries: Record<string, string> = {};
  for (const line of files.hiveEnv) {
    const eq = line.indexOf("=");
    if (eq > 0) entries[line.slice(0, eq)] = line.slice(eq + 1);
  }
  entries[HIVE_ENV.busCredentials] = credsPath;
  entries[HIVE_ENV.invite] = files.invitePath;
  let text: string;
  try {
    text = formatEnvFile(entries);
  } catch {
    throw new SwarmError(
      "swarm_invalid",
      "hive.env cannot name these paths: use folders whose names hold only letters, digits and _ . , : + / @ % -",
    );
  }
  try {
    await writePrivateFile(credsPath, files.creds);
    await writePrivateFile(hiveEnvPath, text);
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `the member's files cannot be written (${errnoCode(error)})`, { cause: error });
  }
  return { hiveEnvPath, credsPath };
}

/**
 * Writes an invite file (mode 0600): the hub's invite lines and the hub's
 * address. Returns its absolute path.
 */
export async function writeInviteFile(path: string, lines: readonly string[], cwd: string = process.cwd()): Promise<string> {
  const absolute = isAbsolute(path) ? path : resolve(cwd, path);
  const text = `${lines.join("\n")}\n`;
  try {
    parseEnvFile(text);
  } catch {
    throw new SwarmError("swarm_invalid", "the invite cannot be written as a KEY=value file: check the hub and bus addresses");
  }
  try {
    await writePrivateFile(absolute, text);
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `the invite cannot be written (${errnoCode(error)})`, { cause: error });
  }
  return absolute;
}

/** Reads `hive.env` of `dir` (for refresh): its entries and the invite it names. */
export async function readHiveEnv(dir: string, cwd: string = process.cwd()): Promise<{ entries: Readonly<Record<string, string>>; invitePath: string }> {
  const folder = isAbsolute(dir) ? dir : resolve(cwd, dir);
  const entries = await readEnvText(join(folder, HIVE_ENV_FILE), "hive.env");
  const invitePath = entries[HIVE_ENV.invite];
  if (invitePath === undefined) throw new SwarmError("swarm_invalid", `hive.env has no ${HIVE_ENV.invite} line: join again with the invite`);
  return { entries, invitePath };
}

async function readEnvText(path: string, what: string): Promise<Readonly<Record<string, string>>> {
  let text: string | undefined;
  try {
    text = await readOptionalFile(path);
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `${what} cannot be read (${errnoCode(error)})`, { cause: error });
  }
  if (text === undefined) throw new SwarmError("swarm_unavailable", `${what} cannot be read (ENOENT)`);
  try {
    return parseEnvFile(text);
  } catch (error) {
    throw new SwarmError("swarm_invalid", `${what} is not a KEY=value file (${(error as Error).message})`);
  }
}
