import { Code } from "@connectrpc/connect";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { resolve } from "node:path";
import { loadLanesConfig, openLanesCore, PUBLISH_PAUSE_POINTS, type LaneReason, type LanesConfig, type LanesCore } from "../../lanes/index.js";
import { registerCoreReader } from "../../observe/core-events.js";
import { secretAuthenticator } from "../auth.js";
import { implement, type CoreBinding, type ErrorDomainSpec } from "../core-binding.js";
import { laneServiceImpl } from "../services/lane-service.js";

/**
 * Durable lanes, for projects holding a token from the lanes
 * configuration. Opening checks (or creates) the namespace generation on
 * the broker; an incompatible namespace or an unreachable broker stops
 * startup with a CoreStartupError. Without a configuration no project token
 * exists, so every caller gets `unauthenticated`, and health reports the
 * service as off.
 */
/** The lanes' reasons (seed 000) and their codes. */
const reasons: Readonly<Record<LaneReason, Code>> = {
  lane_invalid: Code.InvalidArgument,
  lane_forbidden: Code.PermissionDenied,
  lane_conflict: Code.Aborted,
  lane_cursor: Code.Aborted,
  lane_stale: Code.Aborted,
  lane_capacity: Code.ResourceExhausted,
  lane_canceled: Code.Canceled,
  lane_unavailable: Code.Unavailable,
  lane_timeout: Code.DeadlineExceeded,
};

const errors: ErrorDomainSpec = {
  domain: "lanes",
  reasons,
  fallbackReasons: {
    invalid: "lane_invalid",
    canceled: "lane_canceled",
    timeout: "lane_timeout",
    unavailable: "lane_unavailable",
    capacity: "lane_capacity",
  },
};

/** The lanes' settings: the configuration file (or the demo's) and what it holds. */
export interface LanesSettings {
  /** Where the configuration was loaded from; undefined when lanes are off. */
  readonly path: string | undefined;
  readonly config: LanesConfig | undefined;
}

export const lanesBinding: CoreBinding = {
  name: "lanes",
  title: "lanes",
  errors,
  services: [{ service: LaneService, principal: "project" }],
  replicable: true,
  principals: { project: "a project token" },
  pausePoints: PUBLISH_PAUSE_POINTS,
  settings: {
    core: "lanes",
    title: "lanes",
    declarations: [{ flag: "lanes-config", env: "LANEWAY_LANES_CONFIG", type: "string", value: "FILE", help: "the lanes configuration (lanes.json); without it lanes are off" }],
    async resolve(values, ctx): Promise<LanesSettings> {
      const given = values.get("lanes-config");
      const path = given === undefined ? ctx.demo?.lanesConfigPath : resolve(ctx.cwd, given.value);
      // The project tokens are checked against the operator token of ctx.env.
      return { path, config: path === undefined ? undefined : await loadLanesConfig(path, ctx.env, { cwd: ctx.cwd }) };
    },
  },
  summary(settings) {
    const { config } = settings as LanesSettings;
    return config ? `namespace ${config.namespace}, ${config.lanes.length} lane(s), ${config.principals.length} project(s)` : "off (no --lanes-config)";
  },
  async open(ctx) {
    const { config } = ctx.settings as LanesSettings;
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
    const unobserve = core ? [registerCoreReader("groups", () => core!.observeGroups()), registerCoreReader("laneLastSequences", () => core!.lastSequences())] : [];
    return {
      implementations: [implement(LaneService, laneServiceImpl(core, ctx.drain, ctx.log, errors))],
      ...(config ? { authenticate: secretAuthenticator("project", config.tokens) } : {}),
      async close() {
        unsubscribe();
        for (const remove of unobserve) remove();
        await core?.close();
      },
    };
  },
};
