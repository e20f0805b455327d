import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { CoreStartupError } from "../../errors/core-error.js";
import { openHiveHub, SwarmError, type HiveHub, type OpenedHive } from "../../swarm/index.js";
import { implement, type CoreBinding } from "../core-binding.js";
import { hiveHubServiceImpl, hiveMemberServiceImpl } from "../services/hive-services.js";

/**
 * Swarm membership: the hive hub for the operator, join and refresh for
 * members holding an invite secret. The hub opens when `laneway hive init`
 * has created the hive in the data directory: it reads the signer record
 * (`AGENTIHOOKS_NATS_SIGNER`; a malformed or unreadable one stops startup),
 * its state, and connects to NATS with its own service user in the hive
 * account and a system account user. Without a hive, every call answers
 * `swarm_unavailable` and health reports both services as off.
 */
export const swarmBinding: CoreBinding = {
  name: "swarm",
  errors: { domain: "swarm", fallbackReasons: { invalid: "swarm_invalid", unavailable: "swarm_unavailable" } },
  services: [
    { service: HiveHubService, principal: "operator" },
    { service: HiveMemberService, principal: "member" },
  ],
  async open(ctx) {
    const names = [HiveHubService.typeName, HiveMemberService.typeName];
    let opened: OpenedHive | undefined;
    try {
      opened = await openHiveHub({ dataDir: ctx.startup.server.dataDir, env: ctx.startup.env, servers: ctx.broker.servers, log: ctx.log });
    } catch (error) {
      if (error instanceof SwarmError) {
        const kind = error.reason === "swarm_unavailable" ? "unavailable" : "state_conflict";
        throw new CoreStartupError("swarm", kind, `the hive hub cannot start: ${error.message}`, { cause: error });
      }
      throw error;
    }
    if (opened === undefined) {
      for (const name of names) ctx.health.set(name, "off");
      const hub = (): HiveHub => {
        throw new SwarmError("swarm_unavailable", "the hive is not initialized on this server: run laneway hive init, then restart laneway serve");
      };
      return {
        implementations: [implement(HiveHubService, hiveHubServiceImpl(hub)), implement(HiveMemberService, hiveMemberServiceImpl(hub))],
        members: { resolveMember: async () => undefined },
        async close() {},
      };
    }
    const hive = opened;
    const refresh = () => {
      const serving = hive.hubBroker.state === "connected" && hive.systemBroker.state === "connected";
      for (const name of names) ctx.health.set(name, serving ? "serving" : "not_serving");
    };
    const unsubscribe = [hive.hubBroker.onStateChange(refresh), hive.systemBroker.onStateChange(refresh)];
    refresh();
    ctx.log.info("hive hub open", { signer: hive.signerKind });
    const hub = () => hive.hub;
    return {
      implementations: [implement(HiveHubService, hiveHubServiceImpl(hub)), implement(HiveMemberService, hiveMemberServiceImpl(hub))],
      members: { resolveMember: async (secret) => hive.hub.resolveMember(secret) },
      async close() {
        for (const stop of unsubscribe) stop();
        await hive.close();
      },
    };
  },
};
