import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { implement, type CoreBinding } from "../core-binding.js";
import { hiveHubServiceImpl, hiveMemberServiceImpl } from "../services/hive-services.js";

/**
 * Swarm membership: the hive hub for the operator, join and refresh for
 * members holding an invite secret. Not in this version: every RPC answers
 * `unimplemented`, and health reports both services as off.
 */
export const swarmBinding: CoreBinding = {
  name: "swarm",
  errors: { domain: "swarm", fallbackReasons: { invalid: "swarm_invalid", unavailable: "swarm_unavailable" } },
  services: [
    { service: HiveHubService, principal: "operator" },
    { service: HiveMemberService, principal: "member" },
  ],
  async open(ctx) {
    ctx.health.set(HiveHubService.typeName, "off");
    ctx.health.set(HiveMemberService.typeName, "off");
    return {
      implementations: [implement(HiveHubService, hiveHubServiceImpl), implement(HiveMemberService, hiveMemberServiceImpl)],
      async close() {},
    };
  },
};
