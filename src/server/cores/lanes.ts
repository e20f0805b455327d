import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { LaneRegistry } from "../../lanes/index.js";
import { implement, type CoreBinding } from "../core-binding.js";
import { laneServiceImpl } from "../services/lane-service.js";

/**
 * Durable lanes, for projects holding a token from the lanes
 * configuration. Without a configuration no project token exists, so every
 * caller gets `unauthenticated`, and health reports the service as off.
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
  async open(ctx) {
    const config = ctx.startup.lanes;
    const registry = config ? new LaneRegistry(config) : undefined;
    const refresh = () =>
      ctx.health.set(LaneService.typeName, registry === undefined ? "off" : ctx.broker.state === "connected" ? "serving" : "not_serving");
    const unsubscribe = ctx.broker.onStateChange(refresh);
    refresh();
    return {
      implementations: [implement(LaneService, laneServiceImpl(registry))],
      ...(config ? { projectTokens: config.tokens } : {}),
      async close() {
        unsubscribe();
      },
    };
  },
};
