import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { openLanesCore, PUBLISH_PAUSE_POINTS, type LanesCore } from "../../lanes/index.js";
import { implement, type CoreBinding } from "../core-binding.js";
import { laneServiceImpl } from "../services/lane-service.js";

/**
 * Durable lanes, for projects holding a token from the lanes
 * configuration. Opening checks (or creates) the namespace generation on
 * the broker; an incompatible namespace or an unreachable broker stops
 * startup with a CoreStartupError. Without a configuration no project token
 * exists, so every caller gets `unauthenticated`, and health reports the
 * service as off.
 */
export const lanesBinding: CoreBinding = {
  name: "lanes",
  errors: {
    domain: "lanes",
    fallbackReasons: {
      invalid: "lane_invalid",
      canceled: "lane_canceled",
      timeout: "lane_timeout",
      unavailable: "lane_unavailable",
      capacity: "lane_capacity",
    },
  },
  services: [{ service: LaneService, principal: "project" }],
  pausePoints: PUBLISH_PAUSE_POINTS,
  async open(ctx) {
    const config = ctx.startup.lanes;
    let core: LanesCore | undefined;
    if (config) {
      core = await openLanesCore({
        config,
        broker: ctx.broker,
        replicas: ctx.startup.server.replicas,
        logger: ctx.log,
        pausePoints: ctx.pausePoints,
      });
    }
    // Serving while every connection the lanes use is up: Laneway's own and
    // the readers' reconnect on their own after an outage.
    const refresh = () => ctx.health.set(LaneService.typeName, core === undefined ? "off" : ctx.broker.state === "connected" && core.connected ? "serving" : "not_serving");
    const offBroker = ctx.broker.onStateChange(refresh);
    const offCore = core?.onConnectionChange(refresh);
    const unsubscribe = () => {
      offBroker();
      offCore?.();
    };
    refresh();
    return {
      implementations: [implement(LaneService, laneServiceImpl(core, ctx.drain, ctx.log))],
      ...(config ? { projectTokens: config.tokens } : {}),
      async close() {
        unsubscribe();
        await core?.close();
      },
    };
  },
};
