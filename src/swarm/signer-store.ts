/**
 * Where the signer record lives. `AGENTIHOOKS_NATS_SIGNER` names it:
 *
 * - `file:<folder>` — a folder the operator manages: `signing_key` holds
 *   the account signing key seed, and an optional `member_swarms` file holds
 *   one JSON object whose single key is `member_swarms`
 *   (`{"member_swarms": {"hive-a": ["rig"]}}`); the map alone, or any other
 *   key, is refused naming the key (never read as "no field"). Laneway
 *   reads it on every join and refresh and never writes it: `hive scope`
 *   refuses it and `hive invite` does not list members in it.
 * - `hub:<name>` (the default, `hub:nats-signer`) — a record Laneway keeps
 *   in its data directory (`hive/records/<name>.json`, mode 0600), as the
 *   specification's hub keeps its record under `agentihooks/hub/` in
 *   OpenBao: `hive init` creates it with the signing key, `hive scope`
 *   creates its member_swarms field and `hive invite` lists new members.
 *
 * OpenBao itself is not reachable from this version; other stores
 * implement {@link SignerRecordStore}.
 */
import { isAbsolute, join, resolve } from "node:path";
import { SwarmError } from "../swarm-bus/index.js";
import { errnoCode, readOptionalFile, writePrivateFile } from "../files/index.js";
import { memberSwarmsJson, parseRecordJson, parseRecordObject, type MemberSwarms, type SignerRecord } from "./signer-record.js";

/** The variable that names the signer record (the specification's name). */
export const SIGNER_ENV = "AGENTIHOOKS_NATS_SIGNER";

/** The signer record of a hive initialized by `laneway hive init`. */
export const DEFAULT_SIGNER = "hub:nats-signer";

/** A store of the signer record. */
export interface SignerRecordStore {
  /** `file:` or `hub:`, for messages and listings (never a path). */
  readonly kind: "file" | "hub";
  /** Whether Laneway may write the member_swarms field. */
  readonly writable: boolean;
  /** Reads and checks the record (throws `swarm_invalid` or `swarm_unavailable`). */
  read(): Promise<SignerRecord>;
  /**
   * Replaces the member_swarms field with what `change` returns from the
   * current one (read fresh). Throws `swarm_conflict` for a store Laneway
   * never writes. Callers serialize writes.
   */
  updateMemberSwarms(change: (current: MemberSwarms | undefined) => MemberSwarms | undefined): Promise<SignerRecord>;
}

/** Opens the store a `AGENTIHOOKS_NATS_SIGNER` value names (default {@link DEFAULT_SIGNER}). */
export function openSignerStore(setting: string | undefined, hiveDir: string, cwd: string = process.cwd()): SignerRecordStore {
  const value = setting === undefined || setting === "" ? DEFAULT_SIGNER : setting;
  if (value.startsWith("file:")) {
    const folder = value.slice("file:".length);
    if (folder === "") throw new SwarmError("swarm_invalid", `${SIGNER_ENV} file: needs a folder (file:<folder>)`);
    return new FileSignerStore(isAbsolute(folder) ? folder : resolve(cwd, folder));
  }
  if (value.startsWith("hub:")) {
    const name = value.slice("hub:".length);
    if (!/^[a-z][a-z0-9_-]{0,63}$/.test(name)) {
      throw new SwarmError("swarm_invalid", `${SIGNER_ENV} hub:<name> needs a name of lowercase letters, digits, '_' or '-'`);
    }
    return new HubSignerStore(hubRecordPath(hiveDir, name));
  }
  if (value.startsWith("openbao:")) {
    throw new SwarmError("swarm_invalid", `${SIGNER_ENV}: OpenBao records are not reachable from this version of Laneway; use hub:<name> or file:<folder>`);
  }
  throw new SwarmError("swarm_invalid", `${SIGNER_ENV} must be file:<folder> or hub:<name>`);
}

/** The file of a `hub:<name>` record. */
export function hubRecordPath(hiveDir: string, name: string): string {
  return join(hiveDir, "records", `${name}.json`);
}

/** Writes a new `hub:` record holding only the signing key (for `hive init`). */
export async function createHubRecord(path: string, signingKeySeed: string): Promise<void> {
  await writePrivateFile(path, `${JSON.stringify({ signing_key: signingKeySeed }, null, 2)}\n`);
}

/** `swarm_conflict`: a `file:` record is never written. */
export function neverWrittenError(): SwarmError {
  return new SwarmError("swarm_conflict", "the signer record is a file: record, which Laneway never writes: edit its member_swarms file, or use a hub: record");
}

function unreadable(error: unknown): SwarmError {
  return new SwarmError("swarm_unavailable", `the signer record cannot be read (${errnoCode(error)})`, { cause: error });
}

function unwritable(error: unknown): SwarmError {
  return new SwarmError("swarm_unavailable", `the signer record cannot be written (${errnoCode(error)})`, { cause: error });
}

async function readText(path: string, required: boolean): Promise<string | undefined> {
  let text: string | undefined;
  try {
    text = await readOptionalFile(path);
  } catch (error) {
    throw unreadable(error);
  }
  if (text === undefined && required) throw unreadable(Object.assign(new Error("missing"), { code: "ENOENT" }));
  return text;
}

/** `file:<folder>`: read on every call, never written. */
class FileSignerStore implements SignerRecordStore {
  readonly kind = "file" as const;
  readonly writable = false;

  constructor(private readonly folder: string) {}

  async read(): Promise<SignerRecord> {
    const seed = (await readText(join(this.folder, "signing_key"), true))!;
    const { signingKey } = parseRecordObject({ signing_key: seed }, "hub");
    const text = await readText(join(this.folder, "member_swarms"), false);
    // The file holds {"member_swarms": {...}} and nothing else: the map alone is refused, never read as "no field".
    const memberSwarms = text === undefined ? undefined : parseRecordObject(parseRecordJson(text), "file").memberSwarms;
    return { signingKey: signingKey!, memberSwarms };
  }

  async updateMemberSwarms(): Promise<SignerRecord> {
    throw neverWrittenError();
  }
}

/** `hub:<name>`: a JSON record in the data directory that Laneway reads and writes. */
class HubSignerStore implements SignerRecordStore {
  readonly kind = "hub" as const;
  readonly writable = true;

  constructor(private readonly path: string) {}

  async read(): Promise<SignerRecord> {
    return (await this.#readObject()).record;
  }

  async updateMemberSwarms(change: (current: MemberSwarms | undefined) => MemberSwarms | undefined): Promise<SignerRecord> {
    const { raw, record } = await this.#readObject();
    const next = change(record.memberSwarms);
    const { member_swarms: _old, ...rest } = raw;
    const written = next === undefined ? rest : { ...rest, member_swarms: memberSwarmsJson(next) };
    try {
      await writePrivateFile(this.path, `${JSON.stringify(written, null, 2)}\n`);
    } catch (error) {
      throw unwritable(error);
    }
    return { signingKey: record.signingKey, memberSwarms: next };
  }

  async #readObject(): Promise<{ raw: Record<string, unknown>; record: SignerRecord }> {
    const raw = parseRecordJson((await readText(this.path, true))!);
    const { signingKey, memberSwarms } = parseRecordObject(raw, "hub");
    if (signingKey === undefined) throw new SwarmError("swarm_invalid", "the signer record has no signing_key");
    return { raw: raw as Record<string, unknown>, record: { signingKey, memberSwarms } };
  }
}
