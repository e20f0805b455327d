/**
 * The NATS service users the hub signs (`laneway hive nats-trust`): the
 * users antoncore lists in `users.yaml` (swarm-controller,
 * swarm-github-webhook, swarm-ledger), each signed in the hive account by
 * the signer record's signing key with exactly the grants listed, and the
 * users listed under `retired:`, whose keys join the hive account's
 * revocation list and whose records are deleted.
 *
 * The rules, one function each, from the hub state and a request to the
 * next state:
 *
 * | a listed user | outcome |
 * | --- | --- |
 * | no record | `signed`: a new credential, recorded (its key, when it was issued, a digest of its grants) |
 * | recorded, same grants, the operator holds the recorded credential | `unchanged`: nothing is signed or written |
 * | recorded, grants changed | `resigned` (`the grants changed`): a new credential; the recorded key is revoked |
 * | recorded, the operator holds another credential or none | `resigned` (`the credential held is not the one recorded`): a new credential; the recorded key is revoked |
 *
 * A key the operator holds that is not the recorded one (an older copy, a
 * credential signed before the hub kept a record) is revoked as well when
 * the user is signed again or retired. Retiring a user revokes every key
 * recorded for it and the key held, deletes its record and lists it as
 * retired (`revoked`); a user with nothing left to revoke is
 * `already-retired`. A rerun of the same request therefore changes
 * nothing. A user the request neither lists nor retires keeps its
 * credential (removing a user from the file only stops new signing).
 *
 * Service credentials carry no expiry (like the hub's own service users):
 * revocation is what ends them, so their revocations are never pruned.
 *
 * Refused before anything changes: a name given twice, or both listed and
 * retired; the shared hive user `swarm-hive`, or any user granted publish
 * on the spoke execution subject `swarm.*.execution.>` (hives connect only
 * with minted member credentials); a subject that is not a NATS subject; a
 * side with no allow list (NATS reads an empty allow list as everything);
 * a held key that is not a user public key.
 */
import { createHash } from "node:crypto";
import { encodeUser, fmtCreds } from "@nats-io/jwt";
import { fromPublic, type KeyPair } from "@nats-io/nkeys";
import { SwarmError } from "../swarm-bus/index.js";
import { covers, HIVE_USER, SPOKE_EXECUTION_SUBJECT } from "./member-grant.js";
import { isMemberId } from "../swarm-bus/internal.js";
import type { HubState, RetiredServiceUserRecord, Revocation, ServiceUserRecord } from "./hub-state.js";
import { NativeKeyPair } from "../nats/index.js";

/** The most service users one request names (listed and retired each). */
export const MAX_SERVICE_USERS = 32;
/** The most subjects one side of a grant lists. */
export const MAX_SERVICE_SUBJECTS = 64;
/** A revocation of a credential without expiry is kept for good. */
export const NEVER_EXPIRES = Number.MAX_SAFE_INTEGER;

/** A service user to sign, with its grants. */
export interface ServiceUserGrant {
  readonly name: string;
  readonly publishAllow: readonly string[];
  readonly publishDeny: readonly string[];
  readonly subscribeAllow: readonly string[];
  readonly subscribeDeny: readonly string[];
  /** The user key of the credential the operator holds for it (`U…`), if any. */
  readonly heldPublicKey?: string | undefined;
}

/** A service user to retire. */
export interface RetiredServiceUser {
  readonly name: string;
  readonly heldPublicKey?: string | undefined;
}

export type ServiceUserAction = "signed" | "resigned" | "unchanged" | "revoked" | "already-retired";

export interface ServiceUserOutcome {
  readonly name: string;
  readonly action: ServiceUserAction;
  /** The new `.creds` (a secret), when one was signed (never in a dry run). */
  readonly creds?: string;
  /** The key of the user's current credential (empty when retired, or not yet signed in a dry run). */
  readonly publicKey: string;
  readonly revokedKeys: number;
  /** Why a credential is (re)signed. */
  readonly why?: string;
}

export interface TrustRequest {
  readonly users: readonly ServiceUserGrant[];
  readonly retired: readonly RetiredServiceUser[];
  readonly dryRun: boolean;
}

export interface TrustOutcome {
  readonly users: readonly ServiceUserOutcome[];
  readonly retired: readonly ServiceUserOutcome[];
  /** Users recorded before that the request neither lists nor retires. */
  readonly unlisted: readonly string[];
  readonly dryRun: boolean;
}

/** What the hub needs to sign. */
export interface SigningContext {
  readonly signingKey: KeyPair;
  readonly hiveAccount: string;
  /** Unix milliseconds. */
  readonly now: number;
}

/** Checks a request; throws `swarm_invalid` naming what is wrong (never a key or a grant beyond the subject at fault). */
export function checkTrustRequest(request: TrustRequest): void {
  if (request.users.length > MAX_SERVICE_USERS || request.retired.length > MAX_SERVICE_USERS) {
    throw invalid(`a request names at most ${MAX_SERVICE_USERS} service users and ${MAX_SERVICE_USERS} retired ones`);
  }
  const seen = new Set<string>();
  for (const entry of [...request.users, ...request.retired]) {
    if (!isMemberId(entry.name)) throw invalid("a service user name is a lowercase letter, then lowercase letters, digits, '_' or '-', at most 64 characters");
    if (seen.has(entry.name)) throw invalid(`service user ${entry.name} is named twice (a user is listed or retired, once)`);
    seen.add(entry.name);
    if (entry.heldPublicKey !== undefined && entry.heldPublicKey !== "" && !isUserPublicKey(entry.heldPublicKey)) {
      throw invalid(`the held key of service user ${entry.name} is not a NATS user public key (U…)`);
    }
  }
  for (const user of request.users) {
    if (user.name === HIVE_USER) throw invalid(`the shared ${HIVE_USER} user is not signed: hives connect only with minted member credentials`);
    for (const [side, list, required] of [
      ["publish allow", user.publishAllow, true],
      ["publish deny", user.publishDeny, false],
      ["subscribe allow", user.subscribeAllow, true],
      ["subscribe deny", user.subscribeDeny, false],
    ] as const) {
      if (required && list.length === 0) throw invalid(`service user ${user.name} has no ${side} list: NATS would read it as every subject`);
      if (list.length > MAX_SERVICE_SUBJECTS) throw invalid(`service user ${user.name} lists more than ${MAX_SERVICE_SUBJECTS} ${side} subjects`);
      for (const subject of list) {
        if (!isPermissionSubject(subject)) throw invalid(`service user ${user.name} has a ${side} entry that is not a NATS subject`);
      }
    }
    const spoke = user.publishAllow.find((subject) => covers(subject, SPOKE_EXECUTION_SUBJECT));
    if (spoke !== undefined) throw invalid(`service user ${user.name} may publish on the spoke execution subject ${SPOKE_EXECUTION_SUBJECT} (publish allow ${spoke}): hives publish it with their member credentials only`);
  }
}

/** The digest of a grant: the same subjects in any order and repetition give the same digest. */
export function grantDigest(user: Pick<ServiceUserGrant, "publishAllow" | "publishDeny" | "subscribeAllow" | "subscribeDeny">): string {
  const norm = (list: readonly string[]) => [...new Set(list)].sort();
  const canonical = JSON.stringify([norm(user.publishAllow), norm(user.publishDeny), norm(user.subscribeAllow), norm(user.subscribeDeny)]);
  return createHash("sha256").update(canonical, "utf8").digest("hex");
}

/** What the request does for one listed user, from the state (no side effect). */
export function planUser(state: HubState, user: ServiceUserGrant): { action: "signed" | "resigned" | "unchanged"; why?: string } {
  const record = state.serviceUsers?.[user.name];
  if (record === undefined) return { action: "signed", why: "the hub has no record of this user" };
  if (record.grantDigest !== grantDigest(user)) return { action: "resigned", why: "the grants changed" };
  if ((user.heldPublicKey ?? "") !== record.publicKey) return { action: "resigned", why: "the credential held is not the one recorded" };
  return { action: "unchanged" };
}

/** The keys a retirement (or a replacement) revokes that are not revoked yet. */
export function keysToRevoke(state: HubState, recorded: ServiceUserRecord | undefined, held: string | undefined): string[] {
  const keys = new Set<string>();
  if (recorded !== undefined) keys.add(recorded.publicKey);
  if (held !== undefined && held !== "") keys.add(held);
  return [...keys].filter((key) => state.revocations[key] === undefined);
}

/**
 * Applies a request to the state: signs what needs signing, revokes what
 * needs revoking. Returns the next state (the same object when nothing
 * changed) and the outcomes. In a dry run nothing is signed and the state
 * is returned unchanged.
 */
export async function applyTrustRequest(state: HubState, request: TrustRequest, signing: SigningContext | undefined): Promise<{ state: HubState; outcome: TrustOutcome }> {
  checkTrustRequest(request);
  let serviceUsers: Record<string, ServiceUserRecord> = { ...(state.serviceUsers ?? {}) };
  let retiredUsers: Record<string, RetiredServiceUserRecord> = { ...(state.retiredServiceUsers ?? {}) };
  const revocations: Record<string, Revocation> = {};
  let changed = false;
  const nowMs = signing?.now ?? Date.now();
  const revoke = (keys: readonly string[], issuedAt: number) => {
    // A key is refused for JWTs issued at or before the revocation time.
    const revokedAt = Math.max(Math.floor(nowMs / 1000), Math.ceil(issuedAt / 1000));
    for (const key of keys) revocations[key] = { revokedAt, expiresAt: NEVER_EXPIRES };
  };

  const users: ServiceUserOutcome[] = [];
  for (const user of request.users) {
    const plan = planUser(state, user);
    const recorded = state.serviceUsers?.[user.name];
    if (plan.action === "unchanged") {
      users.push({ name: user.name, action: "unchanged", publicKey: recorded!.publicKey, revokedKeys: 0 });
      continue;
    }
    const replaced = keysToRevoke(state, recorded, user.heldPublicKey);
    if (request.dryRun || signing === undefined) {
      users.push({ name: user.name, action: plan.action, publicKey: "", revokedKeys: replaced.length, ...(plan.why ? { why: plan.why } : {}) });
      continue;
    }
    const key = NativeKeyPair.create("user");
    const jwt = await encodeUser(
      user.name,
      key,
      fromPublic(signing.hiveAccount),
      {
        pub: { allow: [...new Set(user.publishAllow)], deny: [...new Set(user.publishDeny)] },
        sub: { allow: [...new Set(user.subscribeAllow)], deny: [...new Set(user.subscribeDeny)] },
      },
      { signer: signing.signingKey },
    );
    const creds = new TextDecoder().decode(fmtCreds(jwt, key));
    revoke(replaced, recorded?.issuedAt ?? 0);
    serviceUsers[user.name] = { name: user.name, publicKey: key.getPublicKey(), issuedAt: signing.now, grantDigest: grantDigest(user) };
    // A retired name signed again is a user again.
    if (retiredUsers[user.name] !== undefined) {
      const { [user.name]: _gone, ...rest } = retiredUsers;
      retiredUsers = rest;
    }
    changed = true;
    users.push({ name: user.name, action: plan.action, creds, publicKey: key.getPublicKey(), revokedKeys: replaced.length, ...(plan.why ? { why: plan.why } : {}) });
  }

  const retired: ServiceUserOutcome[] = [];
  for (const entry of request.retired) {
    const recorded = state.serviceUsers?.[entry.name];
    const keys = keysToRevoke(state, recorded, entry.heldPublicKey);
    if (keys.length === 0 && recorded === undefined) {
      retired.push({ name: entry.name, action: "already-retired", publicKey: "", revokedKeys: 0 });
      continue;
    }
    retired.push({ name: entry.name, action: "revoked", publicKey: "", revokedKeys: keys.length });
    if (request.dryRun) continue;
    revoke(keys, recorded?.issuedAt ?? 0);
    const { [entry.name]: _gone, ...rest } = serviceUsers;
    serviceUsers = rest;
    const before = retiredUsers[entry.name]?.revokedKeys ?? 0;
    retiredUsers = { ...retiredUsers, [entry.name]: { name: entry.name, retiredAt: nowMs, revokedKeys: before + keys.length } };
    changed = true;
  }

  const named = new Set([...request.users, ...request.retired].map((u) => u.name));
  const unlisted = Object.keys(state.serviceUsers ?? {})
    .filter((name) => !named.has(name))
    .sort();
  const outcome: TrustOutcome = { users, retired, unlisted, dryRun: request.dryRun };
  if (request.dryRun || !changed) return { state, outcome };
  return {
    state: { ...state, serviceUsers, retiredServiceUsers: retiredUsers, revocations: { ...state.revocations, ...revocations } },
    outcome,
  };
}

/** Whether `key` is a NATS user public key (`U…`, 56 characters, valid checksum). */
export function isUserPublicKey(key: string): boolean {
  if (!/^U[A-Z2-7]{55}$/.test(key)) return false;
  try {
    fromPublic(key);
    return true;
  } catch {
    return false;
  }
}

/** A permission subject: non-empty tokens without whitespace; `>` only as the last token, `*` only as a whole token. */
function isPermissionSubject(subject: string): boolean {
  if (subject.length === 0 || subject.length > 256 || /[\s\u0000-\u001f\u007f]/.test(subject)) return false;
  const tokens = subject.split(".");
  return tokens.every((t, i) => t !== "" && (!t.includes(">") || (t === ">" && i === tokens.length - 1)) && (!t.includes("*") || t === "*"));
}

function invalid(message: string): SwarmError {
  return new SwarmError("swarm_invalid", message);
}
