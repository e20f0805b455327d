/**
 * The hub's state and the rules that change it: one state, pure functions
 * from one state to the next, so each rule reads in one place.
 *
 * - A member is registered by an invite: its id, the SHA-256 digest of its
 *   invite secret (the secret itself is never stored), the NATS address
 *   its invite names, and whether a Redis ACL user was created for it.
 * - Each join or refresh records the user key of the credential it minted
 *   and whether its grant is scoped; every key the member held before joins
 *   the revocation list.
 * - Retiring a member revokes every key it holds, deletes its record (its
 *   invite stops authenticating) and lists it as retired.
 * - A revocation is kept until the credential it revokes has expired (an
 *   expired credential is refused anyway), so the hive account's
 *   revocation list does not grow without bound.
 */
import type { HiveAccountState } from "./account-claims.js";

/** A user key minted for a member, not revoked. */
export interface IssuedKey {
  readonly publicKey: string;
  /** Unix milliseconds. */
  readonly issuedAt: number;
  /** Unix milliseconds: the credential's `exp`. */
  readonly expiresAt: number;
}

export interface MemberRecord {
  readonly memberId: string;
  /** SHA-256 hex digest of the invite secret. */
  readonly secretDigest: string;
  readonly invitedAt: number;
  /** AGENTIHOOKS_BUS_URL of the member's invite. */
  readonly busUrl: string;
  /** Whether a Redis ACL user exists for the member. */
  readonly redisUser: boolean;
  /** Keys minted and not revoked (normally the one of the last credential). */
  readonly keys: readonly IssuedKey[];
  readonly lastMintedAt: number | undefined;
  /**
   * Whether the last credential minted for the member was scoped. The hub
   * never replaces a scoped credential with an unscoped one (a signer record
   * that lost its member_swarms field, or a member_swarms file that is gone,
   * must not silently unscope a member). Absent in states written before it.
   */
  readonly scoped?: boolean;
}

/** A revoked user key. */
export interface Revocation {
  /** Unix seconds: JWTs of the key issued at or before are refused. */
  readonly revokedAt: number;
  /** Unix milliseconds: when the revoked credential expires; the entry can go after. */
  readonly expiresAt: number;
}

export interface RetiredRecord {
  readonly memberId: string;
  readonly retiredAt: number;
  readonly revokedKeys: number;
}

/** What the hub keeps of a service user it signed (never the seed). */
export interface ServiceUserRecord {
  readonly name: string;
  readonly publicKey: string;
  /** Unix milliseconds. */
  readonly issuedAt: number;
  /** SHA-256 of the grants (sorted, distinct), hex. */
  readonly grantDigest: string;
}

/** A retired service user. */
export interface RetiredServiceUserRecord {
  readonly name: string;
  readonly retiredAt: number;
  readonly revokedKeys: number;
}

export interface HubState {
  readonly version: 1;
  readonly members: Readonly<Record<string, MemberRecord>>;
  readonly retired: Readonly<Record<string, RetiredRecord>>;
  readonly revocations: Readonly<Record<string, Revocation>>;
  /** Public keys of every signing key listed on the hive account. */
  readonly signingKeys: readonly string[];
  /**
   * Swarms the operator named by a hub command (scope or invite with
   * swarms, a migration, `hive name-swarms`), sorted. With the swarms of
   * member_swarms they are the swarms the operator named; a swarm only an
   * event named is never among them. Absent in states written before it.
   */
  readonly namedSwarms?: readonly string[];
  /** The NATS service users the hub signed (`hive nats-trust`), by name. Absent in states written before it. */
  readonly serviceUsers?: Readonly<Record<string, ServiceUserRecord>>;
  /** Service users retired by `hive nats-trust`, by name. */
  readonly retiredServiceUsers?: Readonly<Record<string, RetiredServiceUserRecord>>;
}

/** The most swarms the hub remembers as named by its commands. */
export const MAX_NAMED_SWARMS = 4096;

export function initialHubState(): HubState {
  return { version: 1, members: {}, retired: {}, revocations: {}, signingKeys: [] };
}

/** Registers a new member (the caller checked that the id is free). */
export function withInvitedMember(state: HubState, member: Omit<MemberRecord, "keys" | "lastMintedAt">): HubState {
  return { ...state, members: { ...state.members, [member.memberId]: { ...member, keys: [], lastMintedAt: undefined } } };
}

/** Records a newly minted key (and whether its grant is scoped); the member's previous keys join the revocation list. */
export function withMintedKey(state: HubState, memberId: string, key: IssuedKey, scoped?: boolean): HubState {
  const member = state.members[memberId];
  if (member === undefined) return state;
  return {
    ...state,
    members: { ...state.members, [memberId]: { ...member, keys: [key], lastMintedAt: key.issuedAt, ...(scoped === undefined ? {} : { scoped }) } },
    revocations: member.keys.length === 0 ? state.revocations : { ...state.revocations, ...revocationsOf(member.keys, key.issuedAt) },
  };
}

/** Retires a member: revokes its keys, deletes its record, lists it as retired. */
export function withRetiredMember(state: HubState, memberId: string, now: number): HubState {
  const member = state.members[memberId];
  if (member === undefined) return state;
  const { [memberId]: _gone, ...members } = state.members;
  return {
    ...state,
    members,
    retired: { ...state.retired, [memberId]: { memberId, retiredAt: now, revokedKeys: member.keys.length } },
    revocations: { ...state.revocations, ...revocationsOf(member.keys, now) },
  };
}

/** Lists a signing key on the hive account (no change when listed). */
export function withSigningKey(state: HubState, publicKey: string): HubState {
  return state.signingKeys.includes(publicKey) ? state : { ...state, signingKeys: [...state.signingKeys, publicKey] };
}

/** Adds swarms to those the operator named (no change when all are named already); refuses past {@link MAX_NAMED_SWARMS}. */
export function withNamedSwarms(state: HubState, swarms: readonly string[]): HubState {
  const named = new Set(state.namedSwarms ?? []);
  const before = named.size;
  for (const swarm of swarms) named.add(swarm);
  if (named.size === before) return state;
  if (named.size > MAX_NAMED_SWARMS) throw new RangeError(`the hub names at most ${MAX_NAMED_SWARMS} swarms`);
  return { ...state, namedSwarms: [...named].sort() };
}

/** Drops revocations of credentials that expired before `now`. */
export function withoutExpiredRevocations(state: HubState, now: number): HubState {
  const kept = Object.entries(state.revocations).filter(([, r]) => r.expiresAt > now);
  return kept.length === Object.keys(state.revocations).length ? state : { ...state, revocations: Object.fromEntries(kept) };
}

/** The member whose invite secret has this digest. */
export function memberByDigest(state: HubState, digest: string): MemberRecord | undefined {
  for (const member of Object.values(state.members)) if (member.secretDigest === digest) return member;
  return undefined;
}

/** What the hive account JWT must say for this state. */
export function hiveAccountStateOf(state: HubState): HiveAccountState {
  return {
    signingKeys: state.signingKeys,
    revocations: Object.fromEntries(Object.entries(state.revocations).map(([key, r]) => [key, r.revokedAt])),
  };
}

function revocationsOf(keys: readonly IssuedKey[], nowMs: number): Record<string, Revocation> {
  // A key is refused for JWTs issued at or before the revocation time, so
  // the time must not be earlier than the JWT's `iat` (whole seconds).
  const revokedAt = Math.max(Math.floor(nowMs / 1000), ...keys.map((k) => Math.ceil(k.issuedAt / 1000)));
  return Object.fromEntries(keys.map((k) => [k.publicKey, { revokedAt, expiresAt: k.expiresAt }]));
}
