import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  HiveHubService,
  MemberScopeSchema,
  RetiredMemberSchema,
} from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService, MemberCredentialSchema } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import type { HiveHub, MemberCredentialOutcome, MemberListing, RetiredListing } from "../../swarm/index.js";
import { principalOf } from "../auth.js";
import { notBuilt } from "../not-built.js";

/**
 * The hive hub and member services: decode, call the hub, encode. The
 * rules (the signer record, grants, minting, revocation, Redis rotation)
 * are the swarm core's. `hub()` throws `swarm_unavailable` when the hive
 * is not initialized. Migration is not in this version and answers
 * `unimplemented`.
 */
const migration = "hive migration (the scoped bus and migration of the swarm core)";

export function hiveHubServiceImpl(hub: () => HiveHub): ServiceImpl<typeof HiveHubService> {
  return {
    async scope(req) {
      const outcome = await hub().scope(req.swarms);
      return { members: outcome.members.map(memberScope), created: outcome.created, swarms: [...outcome.swarms] };
    },
    async invite(req) {
      const outcome = await hub().invite(req.memberId, { busUrl: req.busUrl, swarms: req.swarms });
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
      const grant = await hub().renderGrant(req.memberId);
      return {
        scoped: grant.scoped,
        publishAllow: [...grant.publishAllow],
        subscribeAllow: [...grant.subscribeAllow],
        publishDeny: [...grant.publishDeny],
        swarms: [...grant.swarms],
        inboxPrefix: grant.inboxPrefix,
      };
    },
    async retireMember(req) {
      const outcome = await hub().retire(req.memberId);
      return { retired: retiredMember(outcome.retired), redisUserDeleted: outcome.redisUserDeleted };
    },
    migrateState() {
      throw notBuilt("swarm", `MigrateState of ${migration}`);
    },
    migrateQueue() {
      throw notBuilt("swarm", `MigrateQueue of ${migration}`);
    },
    migrateDead() {
      throw notBuilt("swarm", `MigrateDead of ${migration}`);
    },
  };
}

export function hiveMemberServiceImpl(hub: () => HiveHub): ServiceImpl<typeof HiveMemberService> {
  return {
    async join(_req, ctx) {
      const { memberId } = principalOf(ctx, "member");
      return { credential: memberCredential(await hub().mint(memberId, "join")) };
    },
    async refresh(_req, ctx) {
      const { memberId } = principalOf(ctx, "member");
      return { credential: memberCredential(await hub().mint(memberId, "refresh")) };
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
