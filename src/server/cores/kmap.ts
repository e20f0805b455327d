import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { KmapCommandService } from "../../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { parseCount } from "../../config/index.js";
import { openKmapCore, rootCauseFields, type KmapReason } from "../../kmap/index.js";
import { commandOutcomes, KMAP_PAUSE_POINTS, type LaneStatus } from "../../kmap/internal.js";
import { safeErrorFields } from "../../log/logger.js";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { coreReader, registerCoreReader } from "../../observe/core-events.js";
import { implement, messageField, type CoreBinding, type CoreCallMetrics, type ErrorDomainSpec } from "../core-binding.js";
import { kmapCommandServiceImpl } from "../services/kmap-command-service.js";
import { kmapReadServiceImpl } from "../services/kmap-read-service.js";

/**
 * The Kmap command lane and the Kmap's reads, for the operator. Its files
 * live in `<data dir>/kmap`. The command runtime is the future the server
 * supervises: if SQLite or the Kweb manager fails, the core stops serving
 * and the process must exit so that a restart recovers. The log line then
 * names the root cause's code (`SQLITE_FULL`, `SQLITE_IOERR_WRITE`, a
 * worker's exit), never a path.
 */
/** The Kmap command lane's reasons (seed 004) and their codes. */
const reasons: Readonly<Record<KmapReason, Code>> = {
  invalid_input: Code.InvalidArgument,
  conflict: Code.Aborted,
  not_found: Code.NotFound,
  backlog_full: Code.ResourceExhausted,
  position_pruned: Code.Aborted,
  unavailable: Code.Unavailable,
  internal: Code.Internal,
};

const errors: ErrorDomainSpec = { domain: "kmap", reasons, fallbackReasons: { invalid: "invalid_input" } };

export const KMAP_DEFAULTS = Object.freeze({ maxPending: 10_000 });

/** The reader of the command lane's backlog, registered while the core is open, read by the backlog gauges. */
const BACKLOG_READER = "kmap.backlog";
const MAX_PENDING_RANGE = { min: 1, max: 10_000_000 };

export interface KmapSettings {
  /** The most unfinished commands; past it SubmitCommand answers resource_exhausted (`backlog_full`). */
  readonly maxPending: number;
}

/** Kmap submission-to-outcome buckets (seconds). */
const APPLY_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/**
 * The Kmap's metrics (docs/operations.md lists them): submissions and their
 * refusals from SubmitCommand, commits and failures from the command
 * runtime's hooks, the backlog from the lane's writer counters.
 */
function kmapMetrics(registry: Registry): CoreCallMetrics {
  const registers = [registry];
  const submitted = new Counter({ name: "laneway_kmap_commands_submitted_total", help: "Kmap commands accepted by SubmitCommand; existing=true for an identical earlier submission returned.", labelNames: ["existing"], registers });
  const refusals = new Counter({ name: "laneway_kmap_submit_refusals_total", help: "SubmitCommand calls refused, by reason (backlog_full, conflict, ...).", labelNames: ["reason"], registers });
  const committed = new Counter({ name: "laneway_kmap_commands_committed_total", help: "Kmap commands committed by the command runtime.", registers });
  const failed = new Counter({ name: "laneway_kmap_commands_failed_total", help: "Kmap commands that failed for good, by rejection code.", labelNames: ["code"], registers });
  const apply = new Histogram({
    name: "laneway_kmap_apply_latency_seconds",
    help: "Time from a Kmap command's submission to its outcome (committed or failed).",
    labelNames: ["outcome"],
    buckets: APPLY_BUCKETS,
    registers,
  });
  new Gauge({
    name: "laneway_kmap_backlog",
    help: "Unfinished (Queued or Applying) Kmap commands.",
    registers,
    collect() {
      const kmap = coreReader<LaneStatus>(BACKLOG_READER)?.();
      if (kmap !== undefined) this.set(kmap.pending);
    },
  });
  new Gauge({
    name: "laneway_kmap_backlog_max",
    help: "The most unfinished Kmap commands the lane accepts (--kmap-max-pending).",
    registers,
    collect() {
      const kmap = coreReader<LaneStatus>(BACKLOG_READER)?.();
      if (kmap !== undefined) this.set(kmap.maxPending);
    },
  });
  committed.inc(0);
  const uninstall = commandOutcomes.install((outcome) => {
    if (outcome.kind === "committed") {
      committed.inc(outcome.latenciesMs.length);
      for (const ms of outcome.latenciesMs) apply.observe({ outcome: "committed" }, Math.max(0, ms) / 1000);
    } else {
      failed.inc({ code: outcome.code });
      apply.observe({ outcome: "failed" }, Math.max(0, outcome.latencyMs) / 1000);
    }
  });
  return {
    succeeded(_service, method, { response }) {
      if (method === "SubmitCommand") submitted.inc({ existing: messageField<boolean>(response, "existing") ? "true" : "false" });
    },
    refused(_service, method, reason) {
      if (method === "SubmitCommand") refusals.inc({ reason });
    },
    close: uninstall,
  };
}

export const kmapBinding: CoreBinding = {
  name: "kmap",
  title: "the Kmap command lane",
  errors,
  services: [
    { service: KmapCommandService, principal: "operator" },
    { service: KmapReadService, principal: "operator" },
  ],
  pausePoints: KMAP_PAUSE_POINTS,
  metrics: kmapMetrics,
  settings: {
    core: "kmap",
    title: "kmap",
    declarations: [
      {
        flag: "kmap-max-pending",
        env: "LANEWAY_KMAP_MAX_PENDING",
        type: "string",
        value: "N",
        help: `unfinished Kmap commands at most; past it SubmitCommand answers resource_exhausted (default ${KMAP_DEFAULTS.maxPending})`,
      },
    ],
    resolve: (values): KmapSettings => ({ maxPending: parseCount(values.get("kmap-max-pending"), KMAP_DEFAULTS.maxPending, MAX_PENDING_RANGE) }),
  },
  async open(ctx) {
    const settings = ctx.settings as KmapSettings;
    const core = await openKmapCore({
      directory: join(ctx.startup.server.dataDir, "kmap"),
      logger: ctx.log,
      pausePoints: ctx.pausePoints,
      maxPending: settings.maxPending,
    });
    const unobserve = registerCoreReader(BACKLOG_READER, () => core.queue.status());
    const names = [KmapCommandService.typeName, KmapReadService.typeName];
    for (const name of names) ctx.health.set(name, "serving");
    const fatal = core.runtime.run().then(
      () => new Promise<Error>(() => {}),
      (error: unknown) => {
        for (const name of names) ctx.health.set(name, "not_serving");
        ctx.log.error("the Kmap command runtime failed; Laneway must be restarted to recover", { ...safeErrorFields(error), ...rootCauseFields(error) });
        return error instanceof Error ? error : new Error("the Kmap command runtime failed");
      },
    );
    return {
      implementations: [
        implement(KmapCommandService, kmapCommandServiceImpl(core.queue, ctx.drain, errors)),
        implement(KmapReadService, kmapReadServiceImpl(core.reader)),
      ],
      fatal,
      close: () => (unobserve(), core.close()),
    };
  },
};
