import { createClient } from "@connectrpc/connect";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { createLanewayTransport } from "../../client/transport.js";
import { CoreStartupError } from "../../errors/core-error.js";
import { HUB_PAUSE_POINTS, hubMigrationMarks, openHiveHub, SwarmError, type HiveHub, type OpenedHive } from "../../swarm/index.js";
import { HiveLanes, hiveLanesSettingsFromEnv, type HiveLanesSettings, type LaneClient } from "../../client/hive-lanes/index.js";
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
 *
 * The hub answers account slot requests while it is open, and with
 * HIVE_LANES_* set it joins a lane as a participant (over the generated
 * client, like any project) once the server listens; it stops claiming as
 * soon as shutdown begins.
 */
export const swarmBinding: CoreBinding = {
  name: "swarm",
  errors: { domain: "swarm", fallbackReasons: { invalid: "swarm_invalid", unavailable: "swarm_unavailable" } },
  pausePoints: HUB_PAUSE_POINTS,
  services: [
    { service: HiveHubService, principal: "operator" },
    { service: HiveMemberService, principal: "member" },
  ],
  async open(ctx) {
    const names = [HiveHubService.typeName, HiveMemberService.typeName];
    let opened: OpenedHive | undefined;
    let lanesSettings: HiveLanesSettings | undefined;
    try {
      lanesSettings = hiveLanesSettingsFromEnv(ctx.startup.env);
      opened = await openHiveHub({
        dataDir: ctx.startup.server.dataDir,
        env: ctx.startup.env,
        servers: ctx.broker.servers,
        pausePoints: ctx.pausePoints,
        log: ctx.log,
        replicas: ctx.startup.server.replicas,
      });
    } catch (error) {
      if (error instanceof SwarmError) {
        const kind = error.reason === "swarm_unavailable" ? "unavailable" : "state_conflict";
        throw new CoreStartupError("swarm", kind, `the hive hub cannot start: ${error.message}`, { cause: error });
      }
      throw error;
    }
    if (opened === undefined) {
      if (lanesSettings !== undefined) ctx.log.warn("HIVE_LANES_* are set, but the hive is not initialized: the hive lane adapter is off");
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
    let lanes: { adapter: HiveLanes; close(): void } | undefined;
    // The lane may be served by this very server: claim once it listens.
    const startLanes = (settings: HiveLanesSettings) => {
      if (ctx.drain.aborted) return;
      const laneClient = laneClientOf(settings);
      const adapter = HiveLanes.start({
        settings,
        client: laneClient.client,
        hub: hive.hub,
        readMigrationMarks: hubMigrationMarks(hive.hubBroker),
        log: ctx.log.child({ component: "hive-lanes" }),
      });
      lanes = { adapter, close: laneClient.close };
      // In-flight claims must not hold up shutdown (the lane may be this server).
      ctx.drain.addEventListener("abort", () => void adapter.stop(), { once: true });
    };
    const hub = () => hive.hub;
    return {
      implementations: [implement(HiveHubService, hiveHubServiceImpl(hub)), implement(HiveMemberService, hiveMemberServiceImpl(hub))],
      members: { resolveMember: async (secret) => hive.hub.resolveMember(secret) },
      listening() {
        if (lanesSettings !== undefined) startLanes(lanesSettings);
      },
      async close() {
        for (const stop of unsubscribe) stop();
        if (lanes) {
          await lanes.adapter.stop();
          lanes.close();
        }
        await hive.close();
      },
    };
  },
};

/** The generated lane client the hive uses as a project: Connect binary with its bearer token. */
function laneClientOf(settings: HiveLanesSettings): { client: LaneClient; close(): void } {
  const { transport, close } = createLanewayTransport({ baseUrl: settings.address, protocol: "connect-binary", token: settings.token.reveal() });
  return { client: createClient(LaneService, transport), close };
}
