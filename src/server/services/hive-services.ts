import { create } from "@bufbuild/protobuf";
import { durationMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  HiveHubService,
  ListSwarmsResponseSchema,
  MemberScopeSchema,
  MigrationOutcome,
  MigrationProgressSchema,
  RetiredMemberSchema,
  ServiceUserAction,
  ServiceUserOutcomeSchema,
  type MigrateDeadRequest,
  type MigrateQueueRequest,
  type MigrateResponse,
  type MigrateStateRequest,
  type MigrationProgress,
  type QueuePolicy as QueuePolicyMessage,
} from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService, MemberCredentialSchema } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import type {
  HiveHub,
  MigrationParams,
  MemberCredentialOutcome,
  MemberListing,
  MigrationProgress as CoreProgress,
  MigrationResult,
  QueuePolicy,
  RetiredListing,
  ServiceUserOutcome,
  SwarmsListing,
} from "../../swarm/index.js";
import { principalOf } from "../auth.js";
import { callSignal } from "./call-signal.js";

/**
 * The hive hub and member services: decode, call the hub, encode. The
 * rules (the signer record, grants, minting, revocation, Redis rotation)
 * are the swarm core's. `hub()` throws `swarm_unavailable` when the hive
 * is not initialized. Migrations run on the hub's bus (src/swarm/hub-bus.ts);
 * its refusals are the bus library's typed errors.
 */

/** The shortest gap between two progress messages of Migrate. */
const PROGRESS_INTERVAL_MS = 250;

export function hiveHubServiceImpl(hub: () => HiveHub): ServiceImpl<typeof HiveHubService> {
  return {
    async scope(req) {
      const outcome = await hub().scope({ swarms: req.swarms });
      return { members: outcome.members.map(memberScope), created: outcome.created, swarms: [...outcome.swarms] };
    },
    async invite(req) {
      const outcome = await hub().invite({ memberId: req.memberId, busUrl: req.busUrl, swarms: req.swarms, requireMemberSwarms: req.requireMemberSwarms });
      return {
        memberId: outcome.memberId,
        inviteSecret: outcome.secret,
        scoped: outcome.scoped,
        inviteEnv: [...outcome.inviteEnv],
        swarms: [...outcome.swarms],
        listed: outcome.listed,
      };
    },
    async listMembers() {
      const listing = await hub().listMembers();
      return { scopingEnabled: listing.scopingEnabled, members: listing.members.map(memberScope), retired: listing.retired.map(retiredMember) };
    },
    async renderGrant(req) {
      const grant = await hub().renderGrant({ memberId: req.memberId });
      return {
        scoped: grant.scoped,
        publishAllow: [...grant.publishAllow],
        subscribeAllow: [...grant.subscribeAllow],
        publishDeny: [...grant.publishDeny],
        swarms: [...grant.swarms],
        inboxPrefix: grant.inboxPrefix,
      };
    },
    async listSwarms() {
      return swarmsListing(await hub().listSwarms());
    },
    async nameSwarms(req) {
      return { swarms: swarmsListing(await hub().nameSwarms({ swarms: req.swarms })) };
    },
    async trustServiceUsers(req) {
      const outcome = await hub().trustServiceUsers({
        users: req.users.map((u) => ({
          name: u.name,
          publishAllow: u.publishAllow,
          publishDeny: u.publishDeny,
          subscribeAllow: u.subscribeAllow,
          subscribeDeny: u.subscribeDeny,
          heldPublicKey: u.heldPublicKey === "" ? undefined : u.heldPublicKey,
        })),
        retired: req.retired.map((r) => ({ name: r.name, heldPublicKey: r.heldPublicKey === "" ? undefined : r.heldPublicKey })),
        dryRun: req.dryRun,
      });
      return {
        users: outcome.users.map(serviceUserOutcome),
        retired: outcome.retired.map(serviceUserOutcome),
        unlisted: [...outcome.unlisted],
        dryRun: outcome.dryRun,
      };
    },
    async retireMember(req) {
      const outcome = await hub().retire({ memberId: req.memberId });
      return { retired: retiredMember(outcome.retired), redisUserDeleted: outcome.redisUserDeleted };
    },
    async migrateState(req, ctx) {
      return { progress: finalProgress(await runMigration(hub(), { case: "state", value: req }, {}, callSignal(ctx))) };
    },
    async migrateQueue(req, ctx) {
      return { progress: finalProgress(await runMigration(hub(), { case: "queue", value: req }, {}, callSignal(ctx))) };
    },
    async migrateDead(req, ctx) {
      return { progress: finalProgress(await runMigration(hub(), { case: "dead", value: req }, {}, callSignal(ctx))) };
    },
    async *migrate(req, ctx) {
      const migration = req.migration;
      if (migration.case === undefined) return;
      // Progress callbacks push into a queue the stream drains; the last message follows the result.
      const updates: MigrateResponse[] = [];
      let wake: (() => void) | undefined;
      let lastSent = 0;
      let sentFirst = false;
      const push = (message: MigrateResponse) => {
        updates.push(message);
        wake?.();
      };
      const onProgress = (p: CoreProgress) => {
        const now = Date.now();
        if (sentFirst && now - lastSent < PROGRESS_INTERVAL_MS) return;
        sentFirst = true;
        lastSent = now;
        push(progressMessage(p));
      };
      let outcome: { result: MigrationResult } | { error: unknown } | undefined;
      void runMigration(hub(), migration, { onProgress }, callSignal(ctx)).then(
        (result) => {
          outcome = { result };
          wake?.();
        },
        (error: unknown) => {
          outcome = { error };
          wake?.();
        },
      );
      for (;;) {
        while (updates.length > 0) yield updates.shift()!;
        if (outcome !== undefined) break;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
      while (updates.length > 0) yield updates.shift()!;
      if ("error" in outcome) throw outcome.error;
      yield { $typeName: "laneway.swarm.v1.MigrateResponse", progress: finalProgress(outcome.result) };
    },
  };
}

type Migration =
  | { case: "state"; value: MigrateStateRequest }
  | { case: "queue"; value: MigrateQueueRequest }
  | { case: "dead"; value: MigrateDeadRequest };

function runMigration(hub: HiveHub, migration: Migration, progress: Pick<MigrationParams, "onProgress">, signal: AbortSignal): Promise<MigrationResult> {
  const migrator = hub.migrator;
  const { swarm } = migration.value;
  switch (migration.case) {
    case "state":
      return migrator.migrateState({ swarm, bucket: migration.value.bucket, keys: migration.value.keys, ...progress }, signal);
    case "queue":
      return migrator.migrateQueue({ swarm, name: migration.value.name, policy: queuePolicy(migration.value.policy), ...progress }, signal);
    case "dead":
      return migrator.migrateDead({ swarm, ...progress }, signal);
  }
}

/** The contract's policy: 0 and unset select the defaults. */
function queuePolicy(policy: QueuePolicyMessage | undefined): QueuePolicy {
  return {
    ...(policy !== undefined && policy.maxDeliver > 0 ? { maxDeliver: policy.maxDeliver } : {}),
    ...(policy?.ackWait !== undefined ? { ackWaitMs: durationMs(policy.ackWait) } : {}),
  };
}

const outcomes: Readonly<Record<MigrationResult["outcome"], MigrationOutcome>> = {
  moved: MigrationOutcome.MOVED,
  "already-complete": MigrationOutcome.ALREADY_COMPLETE,
  "nothing-to-move": MigrationOutcome.NOTHING_TO_MOVE,
  owned: MigrationOutcome.OWNED,
};

const serviceUserActions: Readonly<Record<ServiceUserOutcome["action"], ServiceUserAction>> = {
  signed: ServiceUserAction.SIGNED,
  resigned: ServiceUserAction.RESIGNED,
  unchanged: ServiceUserAction.UNCHANGED,
  revoked: ServiceUserAction.REVOKED,
  "already-retired": ServiceUserAction.ALREADY_RETIRED,
};

function serviceUserOutcome(o: ServiceUserOutcome) {
  return create(ServiceUserOutcomeSchema, {
    name: o.name,
    action: serviceUserActions[o.action],
    creds: o.creds ?? "",
    publicKey: o.publicKey,
    revokedKeys: o.revokedKeys,
    why: o.why ?? "",
  });
}

function swarmsListing(listing: SwarmsListing) {
  return create(ListSwarmsResponseSchema, {
    defaultSwarms: [...listing.defaultSwarms],
    named: listing.named.map((n) => ({ swarm: n.swarm, inRecord: n.inRecord, byCommand: n.byCommand, inStore: n.inStore })),
    unnamed: listing.unnamed.map((u) => ({ swarm: u.swarm, events: BigInt(u.events) })),
  });
}

function finalProgress(result: MigrationResult): MigrationProgress {
  return create(MigrationProgressSchema, {
    copied: BigInt(result.copied),
    skipped: BigInt(result.skipped),
    total: BigInt(result.total),
    complete: true,
    outcome: outcomes[result.outcome],
    targetStream: result.target,
    sourceStream: result.source ?? "",
  });
}

function progressMessage(p: CoreProgress): MigrateResponse {
  return {
    $typeName: "laneway.swarm.v1.MigrateResponse",
    progress: create(MigrationProgressSchema, { copied: BigInt(p.copied), skipped: BigInt(p.skipped), total: BigInt(p.total) }),
  };
}

export function hiveMemberServiceImpl(hub: () => HiveHub): ServiceImpl<typeof HiveMemberService> {
  return {
    async join(_req, ctx) {
      const { id: memberId } = principalOf(ctx, "member");
      return { credential: memberCredential(await hub().mint({ memberId, kind: "join" })) };
    },
    async refresh(_req, ctx) {
      const { id: memberId } = principalOf(ctx, "member");
      return { credential: memberCredential(await hub().mint({ memberId, kind: "refresh" })) };
    },
  };
}

function memberScope(m: MemberListing) {
  return create(MemberScopeSchema, {
    memberId: m.memberId,
    scoped: m.scoped,
    swarms: [...m.swarms],
    refused: m.refused,
    ...(m.lastMintedAt === undefined ? {} : { lastMintedAt: timestampFromMs(m.lastMintedAt) }),
    ...(m.credentialExpiresAt === undefined ? {} : { credentialExpiresAt: timestampFromMs(m.credentialExpiresAt) }),
  });
}

function retiredMember(r: RetiredListing) {
  return create(RetiredMemberSchema, { memberId: r.memberId, retiredAt: timestampFromMs(r.retiredAt), revokedKeys: r.revokedKeys });
}

function memberCredential(c: MemberCredentialOutcome) {
  return create(MemberCredentialSchema, {
    memberId: c.memberId,
    creds: c.creds,
    scoped: c.scoped,
    swarms: [...c.swarms],
    hiveEnv: [...c.hiveEnv],
    expiresAt: timestampFromMs(c.expiresAt),
    redisUrl: c.redisUrl ?? "",
    inboxPrefix: c.inboxPrefix,
    busUrl: c.busUrl,
  });
}
