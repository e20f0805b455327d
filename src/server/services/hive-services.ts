import type { ServiceImpl } from "@connectrpc/connect";
import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { notBuilt } from "../not-built.js";

/**
 * The hive hub and member services. The swarm membership core (signer
 * record, credential minting, per-swarm streams, migration) is not in this
 * version, so every RPC answers `unimplemented` after authentication.
 */
const membership = "hive membership (the swarm membership core)";

export const hiveHubServiceImpl: ServiceImpl<typeof HiveHubService> = {
  scope() {
    throw notBuilt("swarm", `Scope of ${membership}`);
  },
  invite() {
    throw notBuilt("swarm", `Invite of ${membership}`);
  },
  listMembers() {
    throw notBuilt("swarm", `ListMembers of ${membership}`);
  },
  renderGrant() {
    throw notBuilt("swarm", `RenderGrant of ${membership}`);
  },
  migrateState() {
    throw notBuilt("swarm", `MigrateState of ${membership}`);
  },
  migrateQueue() {
    throw notBuilt("swarm", `MigrateQueue of ${membership}`);
  },
  migrateDead() {
    throw notBuilt("swarm", `MigrateDead of ${membership}`);
  },
};

export const hiveMemberServiceImpl: ServiceImpl<typeof HiveMemberService> = {
  join() {
    throw notBuilt("swarm", `Join of ${membership}`);
  },
  refresh() {
    throw notBuilt("swarm", `Refresh of ${membership}`);
  },
};
