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
 *    swarms for hive member <id>`; no field for a member whose last
 *    credential was scoped → 403 as well (the hub never downgrades a scoped
 *    member: a record that lost its field, or a `file:` folder whose
 *    member_swarms file is gone, must not unscope it silently). Nothing has
 *    happened yet: no credential minted, no key revoked, no password
 *    rotated;
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
import { SwarmError } from "../swarm-bus/index.js";
import type { HiveTrust } from "./hive-trust.js";
import {
  hiveAccountStateOf,
  withInvitedMember,
  withMintedKey,
  withNamedSwarms,
  withoutExpiredRevocations,
  withRetiredMember,
  withSigningKey,
  type HubState,
  type MemberRecord,
} from "./hub-state.js";
import type { HubMigrator, HubProvisioner } from "./hub-bus.js";
import type { HubStore } from "./hub-store.js";
import { swarmNameProblem } from "../swarm-bus/index.js";
import { hiveEnvLines, inviteEnvLines, isMemberId } from "../swarm-bus/internal.js";
import { decideGrant, renderMemberGrant, type GrantDecision, type NatsGrant } from "./member-grant.js";
import { signingKeyPair, type MemberSwarms, type SignerRecord } from "./signer-record.js";
import { neverWrittenError } from "./signer-store.js";
import { applyTrustRequest, checkTrustRequest, type TrustOutcome, type TrustRequest } from "./service-users.js";

/**
 * Laneway's own texts for refusals the specification does not quote.
 */
export const SWARM_OWN_TEXTS = Object.freeze({
  /** Swarms given to an invite before the member_swarms field exists (the CLI's --swarm). */
  swarmsBeforeScope:
    "swarms were given, but the signer record has no member_swarms field yet, so the invite would be unscoped and the swarms ignored: run laneway hive scope first",
  /** Swarms given to an invite with a file: record, which Laneway never lists members in. */
  swarmsForFileRecord:
    "swarms were given, but the signer record is a file: record, which Laneway never writes: list the member with its swarms in the record's member_swarms file, then invite it without swarms",
  /** A member whose last credential was scoped is never minted an unscoped one. */
  noDowngrade: (memberId: string) =>
    `hive member ${memberId} holds a scoped credential, and the signer record has no member_swarms field now: the hub does not replace it with an unscoped one; restore the member_swarms field (listing ${memberId}), or retire the member and invite it again`,
});

/** A scoped member would be handed an unscoped credential: 403, decided before any side effect. */
export function noDowngradeError(memberId: string): SwarmError {
  return new SwarmError("swarm_forbidden", SWARM_OWN_TEXTS.noDowngrade(memberId));
}

/** The longest invite secret the hub looks up; longer bearer tokens are unknown at once. */
export const MAX_INVITE_SECRET_BYTES = 4096;

export interface HiveHubOptions {
  readonly trust: HiveTrust;
  /** The state, the signer record and the members' Redis users. */
  readonly store: HubStore;
  readonly publisher: HiveAccountPublisher;
  /** AGENTIHOOKS_BUS_URL of invites that name none. */
  readonly defaultBusUrl: string;
  /**
   * The swarms whose streams exist on the server: `inStore`, those with a
   * stream the hub did not create for an event alone, and `eventOnly`,
   * those whose every stream the hub created because an event named them.
   */
  readonly listSwarms: () => Promise<StoreSwarms>;
  readonly log: Logger;
  readonly credentialLifetimeMs?: number;
  /** Unix milliseconds; tests may pin it. */
  readonly clock?: () => number;
}

/** The swarms found from the streams on the server (see {@link HiveHubOptions.listSwarms}). */
export interface StoreSwarms {
  readonly inStore: readonly string[];
  readonly eventOnly: readonly string[];
}

/** One swarm the operator named. */
export interface NamedSwarmListing {
  readonly swarm: string;
  /** Listed for some member in the signer record's member_swarms. */
  readonly inRecord: boolean;
  /** Named by a hub command (scope or invite with swarms, a migration, name-swarms). */
  readonly byCommand: boolean;
  /** One of its streams exists on the server. */
  readonly inStore: boolean;
}

/** A swarm only events named: its streams exist (or are being created), and it grants nothing. */
export interface UnnamedSwarmListing {
  readonly swarm: string;
  /** Events handled for it since the hub started. */
  readonly events: number;
}

export interface SwarmsListing {
  /** What `hive scope` and `hive invite` without swarms grant: every named swarm and every swarm in the store. */
  readonly defaultSwarms: readonly string[];
  readonly named: readonly NamedSwarmListing[];
  readonly unnamed: readonly UnnamedSwarmListing[];
}

/** One member as listed. */
export interface MemberListing {
  readonly memberId: string;
  /** Listed in member_swarms (possibly with no swarm). */
  readonly scoped: boolean;
  readonly swarms: readonly string[];
  /**
   * The hub refuses to mint: the field exists and omits the member, or the
   * field is gone and the member's last credential was scoped.
   */
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

/**
 * The hub's operations take one params object each (trustServiceUsers its
 * TrustRequest, the migrator's its own and the call's signal).
 */
export interface SwarmsParams {
  /** Swarm names; for `scope`, empty selects every swarm the operator named and every swarm in the store. */
  readonly swarms: readonly string[];
}

export interface MemberParams {
  readonly memberId: string;
}

export interface InviteParams extends MemberParams {
  /** The bus URL the member connects to (default: the hub's). */
  readonly busUrl?: string;
  /** The member's swarms (default: every swarm the operator named). */
  readonly swarms?: readonly string[];
  /** Refuse `swarms` where they would be ignored (before member_swarms exists, or with a `file:` record). */
  readonly requireMemberSwarms?: boolean;
}

export interface MintParams extends MemberParams {
  readonly kind: "join" | "refresh";
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
  #byDigest = new Map<string, string>();
  #queue: Promise<unknown> = Promise.resolve();
  /** Whether the server's hive account may lag the state (until a push succeeds). */
  #accountStale = true;
  readonly #modeListeners = new Set<HubModeChangeListener>();
  #migrator: HubMigrator | undefined;
  #provisioner: HubProvisioner | undefined;

  constructor(options: HiveHubOptions) {
    this.#o = options;
    this.#clock = options.clock ?? Date.now;
    this.#index();
  }

  /** Sets what the migration RPCs use (openHiveHub: the hub's bus, hub-bus.ts). */
  useMigrator(migrator: HubMigrator): void {
    this.#migrator = migrator;
  }

  /** Sets what creates the streams of the swarms the hub's calls grant (openHiveHub: the hub's bus). */
  useProvisioner(provisioner: HubProvisioner): void {
    this.#provisioner = provisioner;
  }

  /**
   * The hub's migrations (the hub's bus); `swarm_unavailable` before the
   * bus is open. A migration names its swarm: from then on it is one of the
   * swarms the operator named.
   */
  get migrator(): HubMigrator {
    const migrator = this.#migrator;
    if (migrator === undefined) throw new SwarmError("swarm_unavailable", "the hub's bus is not open");
    return {
      migrateState: async (params, signal) => {
        await this.#nameForMigration(params.swarm);
        return migrator.migrateState(params, signal);
      },
      migrateQueue: async (params, signal) => {
        await this.#nameForMigration(params.swarm);
        return migrator.migrateQueue(params, signal);
      },
      migrateDead: async (params, signal) => {
        await this.#nameForMigration(params.swarm);
        return migrator.migrateDead(params, signal);
      },
    };
  }

  /**
   * The swarms the operator named: those named by hub commands and every
   * swarm the signer record's member_swarms lists (sorted). The hub's bus
   * provisions them; events never add to them.
   */
  async namedSwarms(): Promise<string[]> {
    const record = await this.#o.store.readRecord();
    return [...new Set([...(this.#state.namedSwarms ?? []), ...recordSwarms(record)])].sort();
  }

  /** The named swarms with where each is named, and the swarms only events named. */
  async listSwarms(): Promise<SwarmsListing> {
    const record = await this.#o.store.readRecord();
    const store = await this.#o.listSwarms();
    const byCommand = new Set(this.#state.namedSwarms ?? []);
    const inRecord = new Set(recordSwarms(record));
    const inStore = new Set(store.inStore);
    const named = [...new Set([...byCommand, ...inRecord])].sort();
    const defaults = new Set([...named, ...inStore]);
    const events = this.#provisioner?.eventSwarms() ?? { unnamed: [], handled: {} };
    const unnamed = [...new Set([...store.eventOnly, ...events.unnamed])].filter((swarm) => !defaults.has(swarm)).sort();
    return {
      defaultSwarms: [...defaults].sort(),
      named: [...new Set([...named, ...inStore])].sort().map((swarm) => ({ swarm, inRecord: inRecord.has(swarm), byCommand: byCommand.has(swarm), inStore: inStore.has(swarm) })),
      unnamed: unnamed.map((swarm) => ({ swarm, events: events.handled[swarm] ?? 0 })),
    };
  }

  /** Names swarms (a hub command): creates their streams first, then records them. Returns the listing. */
  nameSwarms({ swarms }: SwarmsParams): Promise<SwarmsListing> {
    return this.#serialized(async () => {
      for (const swarm of swarms) checkSwarm(swarm);
      const distinct = [...new Set(swarms)].sort();
      await this.#provisionNamed(distinct);
      await this.#commitNamed(distinct);
      this.#o.log.info("swarms named", { swarms: distinct.length });
    }).then(() => this.listSwarms());
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
      const record = await this.#o.store.readRecord().catch(() => undefined);
      let state = this.#state;
      if (record) state = withSigningKey(state, signingKeyPair(record).getPublicKey());
      state = withoutExpiredRevocations(state, this.#clock());
      if (state !== this.#state) await this.#commit(state);
      await this.#publish();
    });
  }

  /**
   * Creates member_swarms and lists every member without a listing with
   * `swarms` (when empty: every swarm the operator named and every swarm in
   * the store, never a swarm only an event named). The swarms' streams are
   * created before the record changes.
   */
  scope({ swarms: requested }: SwarmsParams): Promise<ScopeOutcome> {
    return this.#serialized(async () => {
      for (const swarm of requested) checkSwarm(swarm);
      if (!this.#o.store.signerWritable) throw neverWrittenError();
      const swarms = requested.length > 0 ? [...new Set(requested)].sort() : await this.#defaultSwarms();
      await this.#provisionNamed(swarms);
      if (requested.length > 0) await this.#commitNamed(swarms);
      let created = false;
      let listedMembers: string[] = [];
      const record = await this.#o.store.updateMemberSwarms((current) => {
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

  /**
   * Registers a new member and returns its invite. `requireMemberSwarms`:
   * swarms given before the member_swarms field exists, or with a `file:`
   * record (which Laneway never writes), are refused (`swarm_conflict`)
   * instead of ignored.
   */
  invite(options: InviteParams): Promise<InviteOutcome> {
    const { memberId } = options;
    return this.#serialized(async () => {
      if (!isMemberId(memberId)) throw new SwarmError("swarm_invalid", "a member id is a lowercase letter, then lowercase letters, digits, '_' or '-', at most 64 characters");
      for (const swarm of options.swarms ?? []) checkSwarm(swarm);
      const busUrl = checkBusUrl(options.busUrl || this.#o.defaultBusUrl);
      if (this.#state.members[memberId]) throw new SwarmError("swarm_conflict", `hive member ${memberId} exists: retire it before inviting it again`);
      let record = await this.#o.store.readRecord();
      const scoped = record.memberSwarms !== undefined;
      const given = [...new Set(options.swarms ?? [])].sort();
      if (given.length > 0 && options.requireMemberSwarms === true) {
        if (!scoped) throw new SwarmError("swarm_conflict", SWARM_OWN_TEXTS.swarmsBeforeScope);
        if (!this.#o.store.signerWritable) throw new SwarmError("swarm_conflict", SWARM_OWN_TEXTS.swarmsForFileRecord);
      }
      let listed = false;
      if (scoped && this.#o.store.signerWritable) {
        const already = record.memberSwarms!.has(memberId);
        const swarms = already ? [] : given.length > 0 ? given : await this.#defaultSwarms();
        // The streams it grants exist before the invite answers.
        await this.#provisionNamed(swarms);
        if (given.length > 0 && !already) await this.#commitNamed(given);
        record = await this.#o.store.updateMemberSwarms((current) => {
          const next = new Map(current ?? []);
          if (!next.has(memberId)) next.set(memberId, swarms);
          return next;
        });
        listed = true;
      }
      const redisUrl = await this.#o.store.rotateRedisPassword(memberId);
      const secret = `hive_${randomBytes(32).toString("base64url")}`;
      await this.#commit(
        withInvitedMember(this.#state, { memberId, secretDigest: digestOf(secret), invitedAt: this.#clock(), busUrl, redisUser: this.#o.store.hasRedis }),
      );
      const swarms = record.memberSwarms?.get(memberId) ?? [];
      // A file: record lists the member by hand; what it lists already is provisioned now.
      if (scoped && !listed) await this.#provisionNamed(swarms);
      this.#o.log.info("hive member invited", { member: memberId, scoped, listed });
      this.#announce({ kind: "invite", committedAt: this.#clock(), memberId, scoped, listed, swarms: [...swarms].sort() });
      return { memberId, secret, scoped, listed, swarms: [...swarms].sort(), inviteEnv: inviteEnvLines({ memberId, secret, busUrl, scoped, redisUrl }) };
    });
  }

  /**
   * Signs the listed NATS service users and retires the others
   * (service-users.ts: the rules). New revocations reach the NATS server
   * before anything is recorded; a dry run changes nothing.
   */
  trustServiceUsers(request: TrustRequest): Promise<TrustOutcome> {
    return this.#serialized(async () => {
      checkTrustRequest(request);
      const record = request.dryRun ? undefined : await this.#o.store.readRecord();
      const signingKey = record === undefined ? undefined : signingKeyPair(record);
      const now = this.#clock();
      const applied = await applyTrustRequest(
        this.#state,
        request,
        signingKey === undefined ? undefined : { signingKey, hiveAccount: this.#o.trust.hiveAccount.getPublicKey(), now },
      );
      if (applied.state !== this.#state) {
        let next = withSigningKey(applied.state, signingKey!.getPublicKey());
        next = withoutExpiredRevocations(next, now);
        const accountChanged = next.signingKeys !== this.#state.signingKeys || next.revocations !== this.#state.revocations;
        // The server refuses revoked credentials before the hub records their users as retired or replaced.
        if (accountChanged || this.#accountStale) {
          this.#accountStale = true;
          await this.#o.publisher.publish(hiveAccountStateOf(next));
          this.#accountStale = false;
        }
        await this.#commit(next);
      }
      const { outcome } = applied;
      for (const user of [...outcome.users, ...outcome.retired]) {
        if (user.action !== "unchanged" && user.action !== "already-retired") {
          this.#o.log.info(request.dryRun ? "service user would change (dry run)" : "service user changed", { user: user.name, action: user.action, revokedKeys: user.revokedKeys });
        }
      }
      return outcome;
    });
  }

  /** Every member with its scope (the record is reread), and every retired member. */
  async listMembers(): Promise<MembersListing> {
    const record = await this.#o.store.readRecord();
    const retired = Object.values(this.#state.retired)
      .sort((a, b) => a.memberId.localeCompare(b.memberId))
      .map((r) => ({ memberId: r.memberId, retiredAt: r.retiredAt, revokedKeys: r.revokedKeys }));
    return { scopingEnabled: record.memberSwarms !== undefined, members: this.#listing(record), retired };
  }

  /** The grant a member's next credential would carry. */
  async renderGrant({ memberId }: MemberParams): Promise<GrantView> {
    const member = this.#member(memberId);
    const record = await this.#o.store.readRecord();
    return { memberId, ...renderMemberGrant(memberId, decideMemberGrant(record, member)) };
  }

  /** Mints a member's credential (join and refresh). */
  mint({ memberId, kind }: MintParams): Promise<MemberCredentialOutcome> {
    return this.#serialized(async () => {
      const member = this.#member(memberId);
      const record = await this.#o.store.readRecord();
      // Decided before any side effect: a 403 mints, revokes and rotates nothing.
      const decision: GrantDecision = decideMemberGrant(record, member);
      const grant = renderMemberGrant(memberId, decision);
      // The streams the credential grants exist before it is handed out (a
      // hand edit of a file: record reaches provisioning here, not at the next sync).
      await this.#provisionNamed(grant.swarms);
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
      next = withMintedKey(next, memberId, { publicKey: minted.userPublicKey, issuedAt: minted.issuedAt, expiresAt: minted.expiresAt }, grant.scoped);
      next = withoutExpiredRevocations(next, now);
      if (this.#o.store.hasRedis && !member.redisUser) {
        next = { ...next, members: { ...next.members, [memberId]: { ...next.members[memberId]!, redisUser: true } } };
      }
      const accountChanged = next.signingKeys !== this.#state.signingKeys || next.revocations !== this.#state.revocations;
      await this.#commit(next);
      if (accountChanged || this.#accountStale) await this.#publish();
      const redisUrl = await this.#o.store.rotateRedisPassword(memberId);
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
  retire({ memberId }: MemberParams): Promise<RetireOutcome> {
    return this.#serialized(async () => {
      const member = this.#member(memberId);
      const now = this.#clock();
      const next = withoutExpiredRevocations(withRetiredMember(this.#state, memberId, now), now);
      await this.#o.publisher.publish(hiveAccountStateOf(next));
      const redisUserDeleted = member.redisUser ? await this.#o.store.deleteRedisUser(memberId) : false;
      await this.#commit(next);
      this.#accountStale = false;
      if (this.#o.store.signerWritable) {
        await this.#o.store
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

  /** The committed state (the store's). */
  get #state(): HubState {
    return this.#o.store.state;
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
          refused: field === undefined ? m.scoped === true : swarms === undefined,
          lastMintedAt: m.lastMintedAt,
          credentialExpiresAt: current?.expiresAt,
        };
      });
  }

  /** Every swarm the operator named and every swarm in the store: what scope and invite grant when given none. */
  async #defaultSwarms(): Promise<string[]> {
    const [named, store] = await Promise.all([this.namedSwarms(), this.#o.listSwarms()]);
    return [...new Set([...named, ...store.inStore])].sort();
  }

  async #provisionNamed(swarms: readonly string[]): Promise<void> {
    if (swarms.length === 0 || this.#provisioner === undefined) return;
    try {
      await this.#provisioner.provisionNamed(swarms);
    } catch (error) {
      if (error instanceof SwarmError) throw error;
      throw new SwarmError("swarm_unavailable", "the streams of the swarms this call grants cannot be created: the NATS server cannot be reached", { cause: error });
    }
  }

  async #commitNamed(swarms: readonly string[]): Promise<void> {
    let next: HubState;
    try {
      next = withNamedSwarms(this.#state, swarms);
    } catch (error) {
      throw new SwarmError("swarm_invalid", (error as Error).message);
    }
    if (next !== this.#state) await this.#commit(next);
  }

  /** A migration names its swarm (validated first: the migration's own refusal comes from the bus). */
  async #nameForMigration(swarm: string): Promise<void> {
    if (swarmNameProblem(swarm) !== undefined) return;
    await this.#serialized(() => this.#commitNamed([swarm]));
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
    await this.#o.store.commit(state);
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

/**
 * The grant decision for a member: the record decides (decideGrant), except
 * that a member whose last credential was scoped is never handed an
 * unscoped one.
 */
function decideMemberGrant(record: SignerRecord, member: MemberRecord): GrantDecision {
  const decision = decideGrant(record.memberSwarms, member.memberId);
  if (decision.kind === "unscoped" && member.scoped === true) throw noDowngradeError(member.memberId);
  return decision;
}

/** Every swarm member_swarms lists for some member. */
function recordSwarms(record: SignerRecord): string[] {
  return [...new Set([...(record.memberSwarms?.values() ?? [])].flat())];
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
