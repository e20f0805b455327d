import { ServerConfigError } from "../config/errors.js";

/**
 * Named points in a core where a fault-injection test may stop the
 * process, so that it can be killed with SIGKILL exactly there (between two
 * writes that are not one transaction, for example). Each core declares its
 * own point names; the server enables them only through the test-only
 * setting `LANEWAY_PAUSE_AT` (`<point>[:<occurrence>]`, comma-separated).
 * At a chosen point the process writes `laneway-paused <point> <id>` to
 * stdout and stops itself with SIGSTOP. Without the setting they cost
 * nothing.
 */
export interface PausePoints {
  reached(point: string, id: string): void;
}

/** The setting's variable. */
export const PAUSE_AT_ENV = "LANEWAY_PAUSE_AT";

export const noPausePoints: PausePoints = { reached: () => {} };

/**
 * Parses `LANEWAY_PAUSE_AT` against the point names the cores declare;
 * undefined or empty gives no pause points. A name no core declares is a
 * configuration error (exit 2), so a typo cannot make a fault test pass
 * without ever pausing.
 */
export function pausePointsFromSetting(setting: string | undefined, known: readonly string[]): PausePoints {
  if (!setting) return noPausePoints;
  const wanted = new Map<string, number>();
  for (const part of setting.split(",")) {
    const [name = "", occurrence] = part.trim().split(":");
    if (!known.includes(name)) {
      throw new ServerConfigError(`${PAUSE_AT_ENV} names no pause point; use one of ${known.join(", ")}`, PAUSE_AT_ENV);
    }
    const n = occurrence === undefined ? 1 : Number(occurrence);
    if (!Number.isSafeInteger(n) || n < 1) throw new ServerConfigError(`${PAUSE_AT_ENV}: the occurrence must be a positive integer`, PAUSE_AT_ENV);
    wanted.set(name, n);
  }
  const seen = new Map<string, number>();
  return {
    reached(point, id) {
      const target = wanted.get(point);
      if (target === undefined) return;
      const count = (seen.get(point) ?? 0) + 1;
      seen.set(point, count);
      if (count !== target) return;
      // stdout to a pipe is synchronous on Linux: the line is out before the stop.
      process.stdout.write(`laneway-paused ${point} ${id}\n`);
      process.kill(process.pid, "SIGSTOP");
    },
  };
}
