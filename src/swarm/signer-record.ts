/**
 * The signer record: the hive account's signing key, which signs every
 * member credential, and the optional `member_swarms` field, which decides
 * each credential's shape. The hub rereads it on every join and refresh,
 * so a changed list applies without a restart.
 *
 * `member_swarms` is one JSON object mapping member ids to lists of swarm
 * names:
 *
 * ```json
 * { "member_swarms": { "hive-a": ["rig-grade-swarm"], "hive-b": ["rig-grade-swarm", "demo"] } }
 * ```
 *
 * A record whose field is not an object of lists, or that names a swarm
 * that is not a valid subject token, is refused with the specification's
 * exact texts; nothing is minted from it.
 *
 * The record is read strictly: a top-level key it does not define is
 * refused, naming the key. A lenient reader would take a `member_swarms`
 * file that holds the map itself (`{"hive-a": ["rig"]}`, without the
 * `member_swarms` key) for a record with no field, and every credential
 * minted from it would silently be unscoped.
 */
import type { KeyPair } from "@nats-io/nkeys";
import { Secret } from "../config/index.js";
import { SwarmError } from "../swarm-bus/index.js";
import { NativeKeyPair } from "../nats/index.js";
import { swarmNameProblem } from "../swarm-bus/index.js";
import { isMemberId } from "../swarm-bus/internal.js";

/** The specification's texts for the hub, reproduced exactly. */
export const SWARM_TEXTS = Object.freeze({
  memberSwarmsShape: "member_swarms must map member ids to lists of swarm names",
  invalidSwarmName: (reason: string) => `member_swarms contains an invalid swarm name (${reason})`,
  noMemberSwarms: (memberId: string) => `the hub record lists no member swarms for hive member ${memberId}`,
});

/** Member id → the swarms it belongs to. */
export type MemberSwarms = ReadonlyMap<string, readonly string[]>;

/** A signer record as read. */
export interface SignerRecord {
  /** The hive account signing key's seed (`SA…`). */
  readonly signingKey: Secret;
  /** The member_swarms field; undefined when the record has none. */
  readonly memberSwarms: MemberSwarms | undefined;
}

/**
 * Checks a member_swarms value (already parsed from JSON) and returns it as
 * a map. Throws `swarm_invalid` with `member_swarms must map member ids to
 * lists of swarm names` or `member_swarms contains an invalid swarm name
 * (<reason>)`.
 */
export function parseMemberSwarms(value: unknown): MemberSwarms {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw shapeError();
  const result = new Map<string, readonly string[]>();
  for (const [memberId, swarms] of Object.entries(value as Record<string, unknown>)) {
    if (!isMemberId(memberId) || !Array.isArray(swarms) || !swarms.every((s): s is string => typeof s === "string")) throw shapeError();
    for (const swarm of swarms) {
      const problem = swarmNameProblem(swarm);
      if (problem !== undefined) throw new SwarmError("swarm_invalid", SWARM_TEXTS.invalidSwarmName(problem));
    }
    result.set(memberId, Object.freeze([...swarms]));
  }
  return result;
}

/** member_swarms as it is written back into a record: members sorted by id. */
export function memberSwarmsJson(memberSwarms: MemberSwarms): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const id of [...memberSwarms.keys()].sort()) out[id] = [...memberSwarms.get(id)!];
  return out;
}

/** Which document of a signer record is parsed: its keys and what the refusal of an unknown key says. */
export type RecordDocument = "hub" | "file";

/** The top-level keys each document may hold. */
export const RECORD_KEYS: Readonly<Record<RecordDocument, readonly string[]>> = Object.freeze({
  hub: Object.freeze(["signing_key", "member_swarms"]),
  file: Object.freeze(["member_swarms"]),
});

/**
 * Parses a record object: the optional `signing_key` and `member_swarms`.
 * `document` says which keys it may hold: a `hub:` record holds
 * `signing_key` and `member_swarms`; a `file:` folder's `member_swarms`
 * file holds `member_swarms` only. Throws `swarm_invalid`, for an unknown
 * top-level key with a message that names it.
 */
export function parseRecordObject(value: unknown, document: RecordDocument = "hub"): { signingKey: Secret | undefined; memberSwarms: MemberSwarms | undefined } {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new SwarmError("swarm_invalid", document === "file" ? unknownKeysText(document, []) : "the signer record must be a JSON object");
  }
  const record = value as Record<string, unknown>;
  const unknown = Object.keys(record).filter((key) => !RECORD_KEYS[document].includes(key));
  if (unknown.length > 0) throw new SwarmError("swarm_invalid", unknownKeysText(document, unknown));
  const seed = record["signing_key"];
  if (seed !== undefined && typeof seed !== "string") throw signingKeyError();
  return {
    signingKey: seed === undefined ? undefined : checkSigningKey(seed),
    memberSwarms: Object.hasOwn(record, "member_swarms") ? parseMemberSwarms(record["member_swarms"]) : undefined,
  };
}

/** Parses JSON text of a record; a syntax error is `swarm_invalid` without the text. */
export function parseRecordJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new SwarmError("swarm_invalid", "the signer record is not valid JSON");
  }
}

/** Checks that `seed` is an account signing key seed and wraps it. */
export function checkSigningKey(seed: string): Secret {
  try {
    const pair = NativeKeyPair.fromSeed(seed);
    if (!pair.getPublicKey().startsWith("A")) throw new Error("not an account key");
  } catch {
    throw signingKeyError();
  }
  return new Secret(seed.trim());
}

/** The key pair of a record's signing key. */
export function signingKeyPair(record: SignerRecord): KeyPair {
  return NativeKeyPair.fromSeed(record.signingKey.reveal());
}

/**
 * The refusal of unknown top-level keys. Keys are quoted (clipped, at most
 * five of them) so the operator finds them; a key is a member id or a typo,
 * never a secret the record holds (the signing key is a value).
 */
export function unknownKeysText(document: RecordDocument, keys: readonly string[]): string {
  const shown = keys.slice(0, 5).map((key) => `'${displayKey(key)}'`);
  if (keys.length > 5) shown.push(`and ${keys.length - 5} more`);
  const named = keys.length === 0 ? "" : ` (unknown top-level ${keys.length === 1 ? "key" : "keys"} ${shown.join(", ")})`;
  if (document === "file") {
    return `the member_swarms file of a file: signer record must hold one JSON object with the single key member_swarms, such as {"member_swarms": {"hive-a": ["rig"]}}${named}`;
  }
  return `the signer record holds only signing_key and member_swarms${named}`;
}

function displayKey(key: string): string {
  const clipped = [...key].length > 64 ? `${[...key].slice(0, 64).join("")}…` : key;
  return clipped.replace(/[\u0000-\u001f\u007f']/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function shapeError(): SwarmError {
  return new SwarmError("swarm_invalid", SWARM_TEXTS.memberSwarmsShape);
}

function signingKeyError(): SwarmError {
  return new SwarmError("swarm_invalid", "the signer record's signing key is not an account signing key seed (SA…)");
}
