import { canonicalCommand } from "./canonical-command.js";
import type { Clock } from "./clock.js";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type KwebManager } from "./kweb-manager.js";
import { failureFromWire } from "./thread-errors.js";
import type { LaneFromWorker, LaneToWorker } from "./worker-lane-protocol.js";

/**
 * The test seams of the Kmap core (a clock, a wrapper around the manager)
 * as the command lane in the Kweb worker thread sees them: the runtime
 * there runs unchanged, the production way, and only its time and its
 * applies come from the main thread, where the seams live.
 *
 * - WorkerClock: `now()` asks the main thread and waits on a shared cell
 *   for the answer (as pause points do), `sleep()` is a message answered
 *   when the main thread's clock wakes it.
 * - WorkerManagerProxy: each apply is a message; the main thread applies it
 *   through the wrapped manager (which reaches this worker's writer
 *   through the embedded manager) and answers with the outcome or the
 *   failure. It has no group apply: commands apply one at a time, each
 *   through the wrapper.
 *
 * The main thread's side is WorkerLane's. Without seams neither exists and
 * nothing crosses threads for time or applies.
 */
export class WorkerClock implements Clock {
  readonly #post: (message: LaneFromWorker) => void;
  readonly #flag: Int32Array;
  readonly #answer: Float64Array;
  readonly #sleeps = new Map<number, () => void>();
  #nextSleep = 1;

  constructor(post: (message: LaneFromWorker) => void, cell: SharedArrayBuffer) {
    this.#post = post;
    this.#flag = new Int32Array(cell, 0, 1);
    this.#answer = new Float64Array(cell, 8, 1);
  }

  now(): number {
    Atomics.store(this.#flag, 0, 0);
    this.#post({ type: "lane_clock_now" });
    Atomics.wait(this.#flag, 0, 0);
    return this.#answer[0]!;
  }

  sleep(ms: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve();
    const id = this.#nextSleep++;
    return new Promise<void>((resolve) => {
      const done = () => {
        this.#sleeps.delete(id);
        signal.removeEventListener("abort", cancel);
        resolve();
      };
      const cancel = () => {
        this.#post({ type: "lane_clock_cancel", id });
        done();
      };
      this.#sleeps.set(id, done);
      signal.addEventListener("abort", cancel, { once: true });
      this.#post({ type: "lane_clock_sleep", id, ms });
    });
  }

  /** `lane_clock_woke`. */
  woke(id: number): void {
    this.#sleeps.get(id)?.();
  }
}

interface PendingApply {
  readonly resolve: (outcome: ApplyOutcome) => void;
  readonly reject: (error: Error) => void;
}

export class WorkerManagerProxy implements KwebManager {
  readonly #post: (message: LaneFromWorker) => void;
  readonly #pending = new Map<number, PendingApply>();
  #nextApply = 1;

  constructor(post: (message: LaneFromWorker) => void) {
    this.#post = post;
  }

  ready(): Promise<void> {
    return Promise.resolve();
  }

  apply(request: ApplyRequest): Promise<ApplyOutcome> {
    const id = this.#nextApply++;
    return new Promise<ApplyOutcome>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#post({
        type: "lane_apply",
        id,
        idempotencyId: request.idempotencyId,
        canonicalCommand: canonicalCommand(request.command),
        expectedTransactionIds: { ...request.expectedTransactionIds },
      });
    });
  }

  close(): Promise<void> {
    for (const [, pending] of this.#pending) pending.reject(new Error("the command lane is closed"));
    this.#pending.clear();
    return Promise.resolve();
  }

  /** `lane_applied` and `lane_apply_failed`. */
  answered(message: Extract<LaneToWorker, { type: "lane_applied" | "lane_apply_failed" }>): void {
    const pending = this.#pending.get(message.id);
    this.#pending.delete(message.id);
    if (pending === undefined) return;
    if (message.type === "lane_applied") pending.resolve(message.outcome);
    else if (message.writerUnavailable) pending.reject(new WriterUnavailableError(message.error[0]?.message ?? "the Kweb writer is unavailable"));
    else pending.reject(failureFromWire(message.error, "the Kweb manager failed while applying a command"));
  }
}
