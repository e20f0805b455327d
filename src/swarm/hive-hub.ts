/**
 * The hive hub: invites members, shapes their credentials through the
 * signer record, mints a credential at every join and refresh, and
 * retires members.
 *
 * Minting (join and refresh alike), in this order:
 * 1. reread the signer record (a malformed one is refused with the
 *    specification's texts; an unreadable one is `swarm_unavailable`);
 * 2. decide the grant: no member_swarms field → unscoped; a list → scoped;
 *    field present, member absent → 403 `the hub record lists no member
 *    swarms for hive member <id>`. Nothing has happened yet: no credential
 *    minted, no key revoked, no password rotated;
 * 3. mint the new credential (a fresh user key);
 * 4. store it as the member's key, its previous keys in the revocation list,
 *    and push the hive account with that list to the server, which drops
 *    and refuses the previous credential;
 * 5. rotate the member's Redis password (when the hive has Redis).
 *
 * Every change is serialized: one hub process owns its state.
 *
 * Committed changes of the hive's mode — scoping, an invite, a retirement —
 * are announced to the listeners of `onModeChange` after they are stored
 * (the hive lane adapter publishes them; nothing waits for a listener, and
 * a listener cannot undo a change).
 */
import { createHash, randomBytes } from "node:crypto";
import { parseNatsServers } from "../config/index.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import type { HiveAccountPublisher } from "./account-claims.js";
import { DEFAULT_CREDENTIAL_LIFETIME_MS, mintMemberCredential } from "./credential-minter.js";
import { SwarmError } from "./errors.js";
import type { HiveTrust } from "./hive-trust.js";
import {
  hiveAccountStateOf,
  withInvitedMember,
  withMintedKey,
  withoutExpiredRevocations,
  withRetiredMember,
  withSigningKey,
  type HubState,
  type MemberRecord,
} from "./hub-state.js";
import type { HubMigrator } from "./hub-bus.js";
import type { HubStateFile } from "./hub-store.js";
import { hiveEnvLines, inviteEnvLines } from "./member-env.js";
import { decideGrant, renderMemberGrant, type GrantDecision, type NatsGrant } from "./member-grant.js";
import { RedisAccounts } from "./redis-accounts.js";
import { signingKeyPair, type MemberSwarms, type SignerRecord } from "./signer-record.js";
import { neverWrittenError, type SignerRecordStore } from "./signer-store.js";
import { isMemberId, swarmNameProblem } from "./swarm-names.js";

/** The longest invite secret the hub looks up; longer bearer tokens are unknown at once. */
export const MAX_INVITE_SECRET_BYTES = 4096;

export interface HiveHubOptions {
  readonly trust: HiveTrust;
  readonly signer: SignerRecordStore;
  readonly stateFile: HubStateFile;
  readonly state: HubState;
  readonly publisher: HiveAccountPublisher;
  readonly redis: RedisAccounts | undefined;
  /** AGENTIHOOKS_BUS_URL of invites that name none. */
  readonly defaultBusUrl: string;
  /** The swarms whose streams exist on the server ("every swarm in the store"). */
  readonly listSwarms: () => Promise<readonly string[]>;
  readonly log: Logger;
  readonly credentialLifetimeMs?: number;
  /** Unix milliseconds; tests may pin it. */
  readonly clock?: () => number;
}

/** One member as listed. */
export interface MemberListing {
  readonly memberId: string;
  /** Listed in member_swarms (possibly with no swarm). */
  readonly scoped: boolean;
  readonly swarms: readonly string[];
  /** The field exists and omits the member: the hub refuses to mint. */
  readonly refused: boolean;
  readonly lastMintedAt: number | undefined;
  readonly credentialExpiresAt: number | undefined;
}

export interface RetiredListing {
  readonly memberId: string;
  readonly retiredAt: number;
  readonly revokedKeys: number;
}

export interface MembersListing {
  readonly scopingEnabled: boolean;
  readonly members: readonly MemberListing[];
  readonly retired: readonly RetiredListing[];
}

export interface ScopeOutcome {
  readonly created: boolean;
  readonly swarms: readonly string[];
  readonly members: readonly MemberListing[];
}

export interface InviteOutcome {
  readonly memberId: string;
  /** The invite secret; shown once. */
  readonly secret: string;
  readonly scoped: boolean;
  readonly listed: boolean;
  readonly swarms: readonly string[];
  readonly inviteEnv: readonly string[];
}

export interface GrantView extends NatsGrant {
  readonly memberId: string;
}

export interface MemberCredentialOutcome {
  readonly memberId: string;
  /** The `.creds` contents. A secret. */
  readonly creds: string;
  readonly scoped: boolean;
  readonly swarms: readonly string[];
  readonly hiveEnv: readonly string[];
  readonly expiresAt: number;
  /** The member's Redis URL with its new password. A secret. */
  readonly redisUrl: string | undefined;
  readonly inboxPrefix: string;
  readonly busUrl: string;
}

export interface RetireOutcome {
  readonly retired: RetiredListing;
  readonly redisUserDeleted: boolean;
}

/** A committed change of the hive's mode, as announced to `onModeChange` listeners. */
export type HubModeChange =
  | {
      readonly kind: "scope";
      /** Unix milliseconds. */
      readonly committedAt: number;
      /** Whether this change created the member_swarms field. */
      readonly created: boolean;
      /** The swarms given to members that were not listed before. */
      readonly swarms: readonly string[];
      /** The members this change listed. */
      readonly listedMembers: readonly string[];
    }
  | { readonly kind: "invite"; readonly committedAt: number; readonly memberId: string; readonly scoped: boolean; readonly listed: boolean; readonly swarms: readonly string[] }
  | { readonly kind: "retire"; readonly committedAt: number; readonly memberId: string; readonly revokedKeys: number };

/** Called synchronously once a change is committed; must not block (queue the work). */
export type HubModeChangeListener = (change: HubModeChange) => void;

export class HiveHub {
  readonly #o: HiveHubOptions;
  readonly #clock: () => number;
  #state: HubState;
  #byDigest = new Map<string, string>();
  #queue: Promise<unknown> = Promise.resolve();
  /** Whether the server's hive account may lag the state (until a push succeeds). */
  #accountStale = true;
  readonly #modeListeners = new Set<HubModeChangeListener>();
  #migrator: HubMigrator | undefined;

  constructor(options: HiveHubOptions) {
    this.#o = options;
    this.#clock = options.clock ?? Date.now;
    this.#state = options.state;
    this.#index();
  }

  /** Sets what the migration RPCs use (openHiveHub: the hub's bus, hub-bus.ts). */
  useMigrator(migrator: HubMigrator): void {
    this.#migrator = migrator;
  }

  /** The hub's migrations (the hub's bus); `swarm_unavailable` before the bus is open. */
  get migrator(): HubMigrator {
    if (this.#migrator === undefined) throw new SwarmError("swarm_unavailable", "the hub's bus is not open");
    return this.#migrator;
  }

  /** Calls `listener` with every committed mode change (scope, invite, retirement) until the returned function is called. */
  onModeChange(listener: HubModeChangeListener): () => void {
    this.#modeListeners.add(listener);
    return () => {
      this.#modeListeners.delete(listener);
    };
  }

  /** The member whose invite secret this is; undefined for any other token. */
  resolveMember(secret: string): { memberId: string } | undefined {
    if (Buffer.byteLength(secret, "utf8") > MAX_INVITE_SECRET_BYTES) return undefined;
    const memberId = this.#byDigest.get(digestOf(secret));
    return memberId === undefined ? undefined : { memberId };
  }

  /** Pushes the hive account (signing keys, revocations) when the server may lag behind the state. */
  syncAccount(): Promise<void> {
    return this.#serialized(async () => {
      const record = await this.#o.signer.read().catch(() => undefined);
      let state = this.#state;
      if (record) state = withSigningKey(state, signingKeyPair(record).getPublicKey());
      state = withoutExpiredRevocations(state, this.#clock());
      if (state !== this.#state) await this.#commit(state);
      await this.#publish();
    });
  }

  /** Creates member_swarms and lists every member without a listing with `swarms` (every swarm in the store when empty). */
  scope(requested: readonly string[]): Promise<ScopeOutcome> {
    return this.#serialized(async () => {
      for (const swarm of requested) checkSwarm(swarm);
      if (!this.#o.signer.writable) throw neverWrittenError();
      const swarms = requested.length > 0 ? [...new Set(requested)].sort() : [...(await this.#o.listSwarms())].sort();
      let created = false;
      let listedMembers: string[] = [];
      const record = await this.#o.signer.updateMemberSwarms((current) => {
        created = current === undefined;
        listedMembers = [];
        const next = new Map(current ?? []);
        for (const memberId of Object.keys(this.#state.members).sort()) {
          if (next.has(memberId)) continue;
          next.set(memberId, swarms);
          listedMembers.push(memberId);
        }
        return next;
      });
      this.#o.log.info(created ? "member_swarms created" : "member_swarms extended", { members: Object.keys(this.#state.members).length, swarms: swarms.length });
      if (created || listedMembers.length > 0) this.#announce({ kind: "scope", committedAt: this.#clock(), created, swarms, listedMembers });
      return { created, swarms, members: this.#listing(record) };
    });
  }

  /** Registers a new member and returns its invite. */
  invite(memberId: string, options: { busUrl?: string; swarms?: readonly string[] } = {}): Promise<InviteOutcome> {
    return this.#serialized(async () => {
      if (!isMemberId(memberId)) throw new SwarmError("swarm_invalid", "a member id is a lowercase letter, then lowercase letters, digits, '_' or '-', at most 64 characters");
      for (const swarm of options.swarms ?? []) checkSwarm(swarm);
      const busUrl = checkBusUrl(options.busUrl || this.#o.defaultBusUrl);
      if (this.#state.members[memberId]) throw new SwarmError("swarm_conflict", `hive member ${memberId} exists: retire it before inviting it again`);
      let record = await this.#o.signer.read();
      const scoped = record.memberSwarms !== undefined;
      let listed = false;
      if (scoped && this.#o.signer.writable) {
        const already = record.memberSwarms!.has(memberId);
        const swarms = already ? [] : options.swarms && options.swarms.length > 0 ? [...new Set(options.swarms)].sort() : [...(await this.#o.listSwarms())].sort();
        record = await this.#o.signer.updateMemberSwarms((current) => {
          const next = new Map(current ?? []);
          if (!next.has(memberId)) next.set(memberId, swarms);
          return next;
        });
        listed = true;
      }
      let redisUrl: string | undefined;
      if (this.#o.redis) {
        const password = RedisAccounts.newPassword();
        await this.#o.redis.setPassword(memberId, password);
        redisUrl = this.#o.redis.memberUrl(memberId, password);
      }
      const secret = `hive_${randomBytes(32).toString("base64url")}`;
      await this.#commit(
        withInvitedMember(this.#state, { memberId, secretDigest: digestOf(secret), invitedAt: this.#clock(), busUrl, redisUser: this.#o.redis !== undefined }),
      );
      const swarms = record.memberSwarms?.get(memberId) ?? [];
      this.#o.log.info("hive member invited", { member: memberId, scoped, listed });
      this.#announce({ kind: "invite", committedAt: this.#clock(), memberId, scoped, listed, swarms: [...swarms].sort() });
      return { memberId, secret, scoped, listed, swarms: [...swarms].sort(), inviteEnv: inviteEnvLines({ memberId, secret, busUrl, scoped, redisUrl }) };
    });
  }

  /** Every member with its scope (the record is reread), and every retired member. */
  async listMembers(): Promise<MembersListing> {
    const record = await this.#o.signer.read();
    const retired = Object.values(this.#state.retired)
      .sort((a, b) => a.memberId.localeCompare(b.memberId))
      .map((r) => ({ memberId: r.memberId, retiredAt: r.retiredAt, revokedKeys: r.revokedKeys }));
    return { scopingEnabled: record.memberSwarms !== undefined, members: this.#listing(record), retired };
  }

  /** The grant a member's next credential would carry. */
  async renderGrant(memberId: string): Promise<GrantView> {
    this.#member(memberId);
    const record = await this.#o.signer.read();
    return { memberId, ...renderMemberGrant(memberId, decideGrant(record.memberSwarms, memberId)) };
  }

  /** Mints a member's credential (join and refresh). */
  mint(memberId: string, kind: "join" | "refresh"): Promise<MemberCredentialOutcome> {
    return this.#serialized(async () => {
      const member = this.#member(memberId);
      const record = await this.#o.signer.read();
      // Decided before any side effect: a 403 mints, revokes and rotates nothing.
      const decision: GrantDecision = decideGrant(record.memberSwarms, memberId);
      const grant = renderMemberGrant(memberId, decision);
      const signingKey = signingKeyPair(record);
      const now = this.#clock();
      const minted = await mintMemberCredential({
        memberId,
        grant,
        signingKey,
        hiveAccount: this.#o.trust.hiveAccount.getPublicKey(),
        now,
        lifetimeMs: this.#o.credentialLifetimeMs ?? DEFAULT_CREDENTIAL_LIFETIME_MS,
      });
      let next = withSigningKey(this.#state, signingKey.getPublicKey());
      next = withMintedKey(next, memberId, { publicKey: minted.userPublicKey, issuedAt: minted.issuedAt, expiresAt: minted.expiresAt });
      next = withoutExpiredRevocations(next, now);
      if (this.#o.redis && !member.redisUser) {
        next = { ...next, members: { ...next.members, [memberId]: { ...next.members[memberId]!, redisUser: true } } };
      }
      const accountChanged = next.signingKeys !== this.#state.signingKeys || next.revocations !== this.#state.revocations;
      await this.#commit(next);
      if (accountChanged || this.#accountStale) await this.#publish();
      let redisUrl: string | undefined;
      if (this.#o.redis) {
        const password = RedisAccounts.newPassword();
        await this.#o.redis.setPassword(memberId, password);
        redisUrl = this.#o.redis.memberUrl(memberId, password);
      }
      this.#o.log.info(kind === "join" ? "hive member joined" : "hive member refreshed", {
        member: memberId,
        scoped: grant.scoped,
        swarms: grant.swarms.length,
        revokedPrevious: member.keys.length,
      });
      return {
        memberId,
        creds: minted.creds,
        scoped: grant.scoped,
        swarms: grant.swarms,
        hiveEnv: hiveEnvLines({ busUrl: member.busUrl, scoped: grant.scoped, redisUrl }),
        expiresAt: minted.expiresAt,
        redisUrl,
        inboxPrefix: grant.inboxPrefix,
        busUrl: member.busUrl,
      };
    });
  }

  /**
   * Retires a member: the server revokes its keys first (nothing is
   * deleted until it confirmed), then its Redis user and its record go, and
   * it is listed as retired.
   */
  retire(memberId: string): Promise<RetireOutcome> {
    return this.#serialized(async () => {
      const member = this.#member(memberId);
      const now = this.#clock();
      const next = withoutExpiredRevocations(withRetiredMember(this.#state, memberId, now), now);
      await this.#o.publisher.publish(hiveAccountStateOf(next));
      const redisUserDeleted = this.#o.redis !== undefined && member.redisUser ? await this.#o.redis.deleteUser(memberId) : false;
      await this.#commit(next);
      this.#accountStale = false;
      if (this.#o.signer.writable) {
        await this.#o.signer
          .updateMemberSwarms((current) => {
            if (current === undefined || !current.has(memberId)) return current;
            const trimmed = new Map(current);
            trimmed.delete(memberId);
            return trimmed;
          })
          .catch((error: unknown) => this.#o.log.warn("the retired member could not be removed from member_swarms", { member: memberId, ...safeErrorFields(error) }));
      }
      this.#o.log.info("hive member retired", { member: memberId, revokedKeys: member.keys.length, redisUserDeleted });
      this.#announce({ kind: "retire", committedAt: now, memberId, revokedKeys: member.keys.length });
      return { retired: next.retired[memberId]!, redisUserDeleted };
    });
  }

  /** A snapshot of the state (tests and listings). */
  get state(): HubState {
    return this.#state;
  }

  #member(memberId: string): MemberRecord {
    const member = this.#state.members[memberId];
    if (member === undefined) throw new SwarmError("swarm_not_found", `no hive member ${memberId}`);
    return member;
  }

  #listing(record: SignerRecord): MemberListing[] {
    const field: MemberSwarms | undefined = record.memberSwarms;
    return Object.values(this.#state.members)
      .sort((a, b) => a.memberId.localeCompare(b.memberId))
      .map((m) => {
        const swarms = field?.get(m.memberId);
        const current = m.keys[0];
        return {
          memberId: m.memberId,
          scoped: swarms !== undefined,
          swarms: swarms === undefined ? [] : [...new Set(swarms)].sort(),
          refused: field !== undefined && swarms === undefined,
          lastMintedAt: m.lastMintedAt,
          credentialExpiresAt: current?.expiresAt,
        };
      });
  }

  #announce(change: HubModeChange): void {
    for (const listener of this.#modeListeners) {
      try {
        listener(change);
      } catch (error) {
        this.#o.log.warn("a hub mode change listener failed; the change stands", { change: change.kind, ...safeErrorFields(error) });
      }
    }
  }

  async #commit(state: HubState): Promise<void> {
    await this.#o.stateFile.save(state);
    this.#state = state;
    this.#index();
  }

  async #publish(): Promise<void> {
    this.#accountStale = true;
    await this.#o.publisher.publish(hiveAccountStateOf(this.#state));
    this.#accountStale = false;
  }

  #index(): void {
    this.#byDigest = new Map(Object.values(this.#state.members).map((m) => [m.secretDigest, m.memberId]));
  }

  #serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(work, work);
    this.#queue = run.catch(() => undefined);
    return run;
  }
}

function digestOf(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

function checkSwarm(swarm: string): void {
  const problem = swarmNameProblem(swarm);
  if (problem !== undefined) throw new SwarmError("swarm_invalid", `invalid swarm name (${problem})`);
}

function checkBusUrl(url: string): string {
  const parsed = parseNatsServers(url);
  if (!parsed.ok) throw new SwarmError("swarm_invalid", `the bus URL ${parsed.reason}`);
  return url;
}
