import { join } from "node:path";
import { KmapCommandService } from "../../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { openKmapCore, rootCauseFields } from "../../kmap/index.js";
import { KMAP_PAUSE_POINTS } from "../../kmap/internal.js";
import { safeErrorFields } from "../../log/logger.js";
import { registerCoreReader } from "../../observe/core-events.js";
import { implement, type CoreBinding } from "../core-binding.js";
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
export const kmapBinding: CoreBinding = {
  name: "kmap",
  errors: { domain: "kmap", fallbackReasons: { invalid: "invalid_input" } },
  services: [
    { service: KmapCommandService, principal: "operator" },
    { service: KmapReadService, principal: "operator" },
  ],
  pausePoints: KMAP_PAUSE_POINTS,
  async open(ctx) {
    const core = await openKmapCore({
      directory: join(ctx.startup.server.dataDir, "kmap"),
      logger: ctx.log,
      pausePoints: ctx.pausePoints,
      maxPending: ctx.startup.server.kmapMaxPending,
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
        implement(KmapCommandService, kmapCommandServiceImpl(core.queue, ctx.drain)),
        implement(KmapReadService, kmapReadServiceImpl(core.reader)),
      ],
      fatal,
      close: () => (unobserve(), core.close()),
    };
  },
};
