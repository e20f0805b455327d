import type { QueuedItem, WrittenItem } from "./command-queue.js";
import type { EventRow } from "./command-rows.js";
import type { LaneCounters } from "./command-store.js";
import type { WireFailure } from "./thread-errors.js";

/**
 * The messages between the main thread (WorkerLane) and the command lane
 * hosted in the Kweb worker thread (LaneHost). They share the worker's
 * message port with the Kweb manager's own messages (kweb/kweb-worker-protocol.ts);
 * every lane message's type starts with `lane_`. Everything is plain data:
 * change-log entries travel as SQLite rows and become records on the main
 * thread, errors as WireFailure.
 */

/** What the main thread asks of the lane in the worker. */
export type LaneToWorker =
  | {
      readonly type: "lane_open";
      /** The lane's SQLite file. */
      readonly commandsPath: string;
      /** How long the lane's writer waits for a lock held elsewhere. */
      readonly busyTimeoutMs: number;
      /** Change-log entries to keep. */
      readonly eventRetention: number;
      /** With pause points on: the flag the worker waits on while the main thread pauses (Int32Array over it). */
      readonly pauseFlag: SharedArrayBuffer | undefined;
      /**
       * With a test clock (the `clock` seam): the runtime's time comes from
       * the main thread's clock. 16 bytes: an Int32 flag at byte 0 (set once
       * an answer is written) and the answer, a Float64 of epoch
       * milliseconds, at byte 8. Without it the worker uses the system clock.
       */
      readonly clockCell: SharedArrayBuffer | undefined;
      /**
       * With the `applyFaults` seam: the runtime's manager asks the main
       * thread's faults (`lane_fault`) and waits here for the answer. 8
       * bytes: an Int32 flag at byte 0 (set once an answer is written) and
       * the answer, an Int32 at byte 4 (NO_FAULT or FAULT, worker-seams.ts).
       */
      readonly faultCell: SharedArrayBuffer | undefined;
    }
  /** The main thread's clock woke the sleep `id` (or it was canceled). */
  | { readonly type: "lane_clock_woke"; readonly id: number }
  | { readonly type: "lane_submit"; readonly id: number; readonly items: readonly QueuedItem[]; readonly maxPending: number }
  | { readonly type: "lane_run" }
  | { readonly type: "lane_stop" }
  | { readonly type: "lane_close" };

/** What the lane in the worker tells the main thread. */
export type LaneFromWorker =
  | { readonly type: "lane_opened"; readonly recovered: readonly EventRow[]; readonly counters: LaneCounters }
  | { readonly type: "lane_open_failed"; readonly error: WireFailure }
  /** Durable changes, in position order, with the counters as of their commit. */
  | { readonly type: "lane_changes"; readonly rows: readonly EventRow[]; readonly counters: LaneCounters }
  | { readonly type: "lane_submitted"; readonly id: number; readonly results: readonly WrittenItem[] }
  | { readonly type: "lane_submit_failed"; readonly id: number; readonly error: WireFailure }
  /** The runtime ended with a failure (its future rejected). */
  | { readonly type: "lane_failed"; readonly error: WireFailure }
  /** The runtime stopped as asked (or was never started). */
  | { readonly type: "lane_stopped" }
  | { readonly type: "lane_closed" }
  /** The runtime reached a pause point; it waits on the pause flag until the main thread has handled it. */
  | { readonly type: "lane_pause"; readonly point: string; readonly id: string }
  /** The seams: what time it is on the main thread's clock (answered in the clock cell, while the worker waits on it). */
  | { readonly type: "lane_clock_now" }
  /** Sleep `ms` on the main thread's clock; answered by `lane_clock_woke`. */
  | { readonly type: "lane_clock_sleep"; readonly id: number; readonly ms: number }
  /** The runtime stopped waiting for the sleep `id`. */
  | { readonly type: "lane_clock_cancel"; readonly id: number }
  /** Whether the test's faults inject one at `point` for this command (answered in the fault cell, while the worker waits on it). */
  | { readonly type: "lane_fault"; readonly point: "before" | "after"; readonly idempotencyId: string }
  /** A log line of the runtime, for the main thread's logger. */
  | { readonly type: "lane_log"; readonly level: "info" | "warn"; readonly message: string; readonly fields: Readonly<Record<string, string | number | boolean | undefined>> };

export function isLaneMessage(message: { readonly type: string }): boolean {
  return message.type.startsWith("lane_");
}
