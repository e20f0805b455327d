import { KmapError } from "./errors.js";

/**
 * Named points in the runtime where a fault-injection test may stop the
 * process, so it can be killed with SIGKILL exactly there:
 *
 * - `after-applying`: the record is durably Applying, Kweb not yet called;
 * - `after-kweb-commit`: Kweb committed the transaction, the lane has not
 *   recorded it yet;
 * - `between-records`: a record is terminal, the next not yet taken.
 *
 * `laneway serve` enables them only through `LANEWAY_KMAP_PAUSE_AT`
 * (`<point>[:<occurrence>]`, comma-separated); at a point it writes
 * `laneway-kmap-paused <point> <idempotency id>` to stdout and stops itself
 * with SIGSTOP. Without the variable they cost nothing.
 */
export type PausePoint = "after-applying" | "after-kweb-commit" | "between-records";

export const pausePointNames: readonly PausePoint[] = ["after-applying", "after-kweb-commit", "between-records"];

export interface PausePoints {
  reached(point: PausePoint, idempotencyId: string): void;
}

export const noPausePoints: PausePoints = { reached: () => {} };

/** Parses `LANEWAY_KMAP_PAUSE_AT`; undefined or empty gives no pause points. */
export function pausePointsFromSetting(setting: string | undefined): PausePoints {
  if (!setting) return noPausePoints;
  const wanted = new Map<PausePoint, number>();
  for (const part of setting.split(",")) {
    const [name, occurrence] = part.trim().split(":");
    if (!pausePointNames.includes(name as PausePoint)) {
      throw new KmapError("invalid_input", `LANEWAY_KMAP_PAUSE_AT names no pause point; use one of ${pausePointNames.join(", ")}`);
    }
    const n = occurrence === undefined ? 1 : Number(occurrence);
    if (!Number.isSafeInteger(n) || n < 1) throw new KmapError("invalid_input", "LANEWAY_KMAP_PAUSE_AT: the occurrence must be a positive integer");
    wanted.set(name as PausePoint, n);
  }
  const seen = new Map<PausePoint, number>();
  return {
    reached(point, idempotencyId) {
      const target = wanted.get(point);
      if (target === undefined) return;
      const count = (seen.get(point) ?? 0) + 1;
      seen.set(point, count);
      if (count !== target) return;
      // stdout to a pipe is synchronous on Linux: the line is out before the stop.
      process.stdout.write(`laneway-kmap-paused ${point} ${idempotencyId}\n`);
      process.kill(process.pid, "SIGSTOP");
    },
  };
}
