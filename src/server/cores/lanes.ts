import { Code } from "@connectrpc/connect";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { resolve } from "node:path";
import { EXAMPLE_LANES_CONFIG, loadLanesConfig, openLanesCore, PUBLISH_PAUSE_POINTS, type GroupObservation, type LaneReason, type LanesConfig, type LanesCore } from "../../lanes/index.js";
import { Counter, Gauge, type Registry } from "prom-client";
import { coreReader, registerCoreReader } from "../../observe/core-events.js";
import { secretAuthenticator } from "../auth.js";
import { implement, messageField as field, type CoreBinding, type CoreCallMetrics, type CoreMetricsContext, type ErrorDomainSpec } from "../core-binding.js";
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

/** The demo's lanes configuration (`<data dir>/lanes.json`): the specification's example in namespace `demo`, on the embedded nats-server. */
export const DEMO_LANES_CONFIG = Object.freeze({ ...EXAMPLE_LANES_CONFIG, namespace: "demo" });

/** The lanes' settings: the configuration file (or the demo's) and what it holds. */
export interface LanesSettings {
  /** Where the configuration was loaded from; undefined when lanes are off. */
  readonly path: string | undefined;
  readonly config: LanesConfig | undefined;
}

const recordKinds: Record<number, string> = { 1: "event", 2: "work" };

/** The readers the open core registers for the metrics: the groups this process holds, and each lane's last sequence (one broker read per lane). */
const GROUPS_READER = "lanes.groups";
const LAST_SEQUENCES_READER = "lanes.lastSequences";
const receiptMethods = new Set(["Ack", "Nack", "Renew", "AckBatch", "NackBatch", "RenewBatch"]);

/**
 * The lanes' metrics (docs/operations.md lists them): publications,
 * leases, receipts and recoveries counted from the calls that succeeded
 * (so lane and group labels come from the configuration, never from a
 * caller's unknown name), refusals by reason, and each work group's figures
 * from what this process holds in memory. The lanes' last sequences are
 * read from the broker (one stream-info request per lane, never per group)
 * at most once per refresh interval however often Prometheus scrapes.
 */
function lanesMetrics(registry: Registry, { refreshMs, now }: CoreMetricsContext): CoreCallMetrics {
  const registers = [registry];
  const published = new Counter({ name: "laneway_lane_records_published_total", help: "Records stored by Publish and PublishBatch (duplicates not counted), by lane and kind.", labelNames: ["lane", "kind"], registers });
  const publishRefusals = new Counter({ name: "laneway_lane_publish_refusals_total", help: "Publications refused, by reason (lane_capacity when a lane is full).", labelNames: ["reason"], registers });
  const leased = new Counter({ name: "laneway_group_deliveries_leased_total", help: "Deliveries leased by Claim and ClaimBatch, by lane and group.", labelNames: ["lane", "group"], registers });
  const receipts = new Counter({ name: "laneway_group_receipts_total", help: "Receipts accepted, by lane, group and operation (ack, nack, renew).", labelNames: ["lane", "group", "operation"], registers });
  const receiptRefusals = new Counter({
    name: "laneway_group_receipt_refusals_total",
    help: "Receipt operations and claims refused, by operation (claim, ack, nack, renew) and reason (stale, lane_capacity, ...).",
    labelNames: ["operation", "reason"],
    registers,
  });
  const recoveries = new Counter({ name: "laneway_group_recoveries_total", help: "Recoveries recorded by RecoverGroup, by lane and group.", labelNames: ["lane", "group"], registers });

  /** The highest sequence this process's publications reached per lane (read between broker refreshes). */
  const publishedThrough = new Map<string, number>();
  let lastSequences: { at: number; values: ReadonlyMap<string, number>; pending?: Promise<ReadonlyMap<string, number>> } | undefined;
  /** Each lane's last sequence: the broker's, read at most once per refresh interval, or a later publication of this process. */
  const laneLast = async (): Promise<Map<string, number>> => {
    const reader = coreReader<Promise<ReadonlyMap<string, number>>>(LAST_SEQUENCES_READER);
    const at = now();
    let cached = lastSequences;
    if (reader !== undefined && (cached === undefined || at - cached.at >= refreshMs)) {
      // Concurrent scrapes share one read.
      const pending = cached?.pending ?? reader();
      lastSequences = { at: cached?.at ?? 0, values: cached?.values ?? new Map(), pending };
      try {
        cached = lastSequences = { at: now(), values: await pending };
      } catch {
        cached = lastSequences = { at: now(), values: cached?.values ?? new Map() };
      }
    }
    const last = new Map(cached?.values ?? []);
    for (const [lane, sequence] of publishedThrough) if (sequence > (last.get(lane) ?? 0)) last.set(lane, sequence);
    return last;
  };
  const groupFigures = async () => {
    const groups = coreReader<readonly GroupObservation[]>(GROUPS_READER)?.() ?? [];
    if (groups.length === 0) return [];
    const last = await laneLast();
    const at = now();
    return groups.map((g) => ({
      lane: g.lane,
      group: g.group,
      leases: g.leases,
      retriesWaiting: g.retriesWaiting,
      backlog: Math.max(0, (last.get(g.lane) ?? g.cursor) - g.cursor) + g.unfinished,
      oldestAgeSeconds: g.unfinished === 0 || g.oldestUnfinishedStoredAt === undefined ? 0 : Math.max(0, at - g.oldestUnfinishedStoredAt) / 1000,
    }));
  };
  type GroupFigures = Awaited<ReturnType<typeof groupFigures>>[number];
  const groupGauge = (name: string, help: string, value: (g: GroupFigures) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["lane", "group"],
      registers,
      async collect() {
        this.reset();
        for (const g of await groupFigures()) this.set({ lane: g.lane, group: g.group }, value(g));
      },
    });
  groupGauge("laneway_group_leases", "Live leases of a work group, as this process last saw its ledger.", (g) => g.leases);
  groupGauge("laneway_group_retries_waiting", "Deliveries of a work group waiting for a retry (nacked or lease expired).", (g) => g.retriesWaiting);
  groupGauge("laneway_group_backlog", "A work group's backlog: records after its cursor plus its unfinished deliveries (an upper bound of its work: events after the cursor count too).", (g) => g.backlog);
  groupGauge(
    "laneway_group_oldest_unfinished_age_seconds",
    "Age of the oldest unfinished delivery whose record this process read (0 when none is unfinished).",
    (g) => g.oldestAgeSeconds,
  );
  new Gauge({
    name: "laneway_lane_last_sequence",
    help: "A lane's last stream sequence (read from the broker at most once per refresh interval, or this process's last publication if later).",
    labelNames: ["lane"],
    registers,
    async collect() {
      this.reset();
      for (const [lane, last] of await laneLast()) this.set({ lane }, last);
    },
  });

  const publishedOne = (lane: string, r: unknown) => {
    if (r === undefined || field<boolean>(r, "duplicate")) return;
    const record = field<unknown>(r, "record");
    published.inc({ lane, kind: recordKinds[field<number>(record, "kind") ?? 0] ?? "unknown" });
    const sequence = Number(field<bigint>(record, "sequence") ?? 0);
    if (sequence > (publishedThrough.get(lane) ?? 0)) publishedThrough.set(lane, sequence);
  };
  const receiptResults = (lane: string, group: string, operation: string, results: unknown[] | undefined, okField: string) => {
    for (const result of results ?? []) {
      const outcome = field<{ case?: string; value?: unknown }>(result, "outcome");
      if (outcome?.case === okField) receipts.inc({ lane, group, operation });
      else if (outcome?.case === "error") receiptRefusals.inc({ operation, reason: field<string>(outcome.value, "reason") ?? "" });
    }
  };
  return {
    succeeded(_service, method, { request, response }) {
      const lane = field<string>(request, "lane") ?? "";
      const group = field<string>(request, "group") ?? "";
      switch (method) {
        case "Publish":
          return publishedOne(lane, response);
        case "PublishBatch":
          for (const result of field<unknown[]>(response, "results") ?? []) {
            const outcome = field<{ case?: string; value?: unknown }>(result, "outcome");
            if (outcome?.case === "published") publishedOne(lane, outcome.value);
            else if (outcome?.case === "error") publishRefusals.inc({ reason: field<string>(outcome.value, "reason") ?? "" });
          }
          return;
        case "Claim":
          if (field<unknown>(response, "work") !== undefined) leased.inc({ lane, group });
          return;
        case "ClaimBatch": {
          const n = field<unknown[]>(response, "work")?.length ?? 0;
          if (n > 0) leased.inc({ lane, group }, n);
          // The acks it carried count as AckBatch's do.
          return receiptResults(lane, group, "ack", field<unknown[]>(response, "ackResults"), "acked");
        }
        case "Ack":
        case "Nack":
        case "Renew":
          receipts.inc({ lane, group, operation: method.toLowerCase() });
          return;
        case "AckBatch":
          return receiptResults(lane, group, "ack", field<unknown[]>(response, "results"), "acked");
        case "NackBatch":
          return receiptResults(lane, group, "nack", field<unknown[]>(response, "results"), "nacked");
        case "RenewBatch":
          return receiptResults(lane, group, "renew", field<unknown[]>(response, "results"), "renewed");
        case "RecoverGroup":
          recoveries.inc({ lane, group });
          return;
      }
    },
    refused(_service, method, reason) {
      if (method === "Publish" || method === "PublishBatch") publishRefusals.inc({ reason });
      else if (method === "Claim" || method === "ClaimBatch") receiptRefusals.inc({ operation: "claim", reason });
      else if (receiptMethods.has(method)) receiptRefusals.inc({ operation: method.replace("Batch", "").toLowerCase(), reason });
    },
  };
}

export const lanesBinding: CoreBinding = {
  name: "lanes",
  title: "lanes",
  errors,
  services: [{ service: LaneService, principal: "project" }],
  replicable: true,
  principals: { project: "a project token" },
  pausePoints: PUBLISH_PAUSE_POINTS,
  metrics: lanesMetrics,
  settings: {
    core: "lanes",
    title: "lanes",
    declarations: [{ flag: "lanes-config", env: "LANEWAY_LANES_CONFIG", type: "string", value: "FILE", help: "the lanes configuration (lanes.json); without it lanes are off" }],
    demo: {
      file: "lanes.json",
      contents: `${JSON.stringify(DEMO_LANES_CONFIG, null, 2)}\n`,
      tokens: DEMO_LANES_CONFIG.principals.map((p) => p.token_env),
    },
    async resolve(values, ctx): Promise<LanesSettings> {
      const given = values.get("lanes-config");
      const path = given === undefined ? ctx.demo?.files.get("lanes") : resolve(ctx.cwd, given.value);
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
    const unobserve = core ? [registerCoreReader(GROUPS_READER, () => core!.observeGroups()), registerCoreReader(LAST_SEQUENCES_READER, () => core!.lastSequences())] : [];
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
