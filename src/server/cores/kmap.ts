import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { KmapCommandService } from "../../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { parseCount } from "../../config/index.js";
import { openKmapCore, rootCauseFields, type KmapReason } from "../../kmap/index.js";
import { KMAP_PAUSE_POINTS } from "../../kmap/internal.js";
import { safeErrorFields } from "../../log/logger.js";
import { registerCoreReader } from "../../observe/core-events.js";
import { implement, type CoreBinding, type ErrorDomainSpec } from "../core-binding.js";
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
const MAX_PENDING_RANGE = { min: 1, max: 10_000_000 };

export interface KmapSettings {
  /** The most unfinished commands; past it SubmitCommand answers resource_exhausted (`backlog_full`). */
  readonly maxPending: number;
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
    const unobserve = registerCoreReader("kmap", () => core.queue.status());
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
