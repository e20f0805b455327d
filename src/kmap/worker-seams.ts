import type { Clock } from "./clock.js";
import type { InThreadKwebManager } from "./kweb/in-thread-kweb-manager.js";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type GroupApply, type KwebManager } from "./kweb-manager.js";
import type { LaneFromWorker } from "./worker-lane-protocol.js";

/**
 * The test seams of the Kmap core (a clock, faults at the apply boundary)
 * as the command lane in the Kweb worker thread sees them: the runtime
 * there runs unchanged, the production way — its own in-thread manager,
 * group apply and all — and only its time and the faults' answers come
 * from the main thread, where the seams live.
 *
 * - WorkerClock: `now()` asks the main thread and waits on a shared cell
 *   for the answer (as pause points do), `sleep()` is a message answered
 *   when the main thread's clock wakes it.
 * - FaultingKwebManager: the worker's InThreadKwebManager, asking the main
 *   thread's ApplyFaults (WorkerFaults, a shared cell again) before each
 *   command is applied and after each is committed.
 *
 * The main thread's side is WorkerLane's. Without seams neither exists and
 * nothing crosses threads for time or faults.
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

/**
 * The `applyFaults` seam: the faults a test injects at the boundary
 * between the command lane and the Kweb writer, by idempotency id. The
 * runtime in the worker asks the main thread synchronously (it waits on a
 * shared cell, as for the time), so the answers can depend on what the test
 * has seen so far.
 *
 * - `before`: asked each time a command is about to be applied;
 *   `"writer_unavailable"` makes that attempt a writer outage (nothing of
 *   it is written). For a command that would join a group behind another,
 *   the outage ends the group before it; it is asked again when it leads
 *   the next attempt.
 * - `after`: asked once a command's Kweb transaction has committed, before
 *   the group's fsync; `"fail"` makes the manager fail there, which ends
 *   the runtime (a KwebTaskError) with the command committed in Kweb and its
 *   lane record still Applying: the worst moment, seen from the lane.
 */
export interface ApplyFaults {
  readonly before?: (idempotencyId: string) => "writer_unavailable" | undefined;
  readonly after?: (idempotencyId: string) => "fail" | undefined;
}

/** The answers in the fault cell: no fault, or the fault asked for. */
export const NO_FAULT = 1;
export const FAULT = 2;

/**
 * The `applyFaults` seam as the worker asks it: posts the question and
 * waits on the fault cell (Int32 flag at 0, Int32 answer at 4) for the main
 * thread's answer.
 */
export class WorkerFaults {
  readonly #post: (message: LaneFromWorker) => void;
  readonly #cell: Int32Array;

  constructor(post: (message: LaneFromWorker) => void, cell: SharedArrayBuffer) {
    this.#post = post;
    this.#cell = new Int32Array(cell, 0, 2);
  }

  ask(point: "before" | "after", idempotencyId: string): boolean {
    Atomics.store(this.#cell, 0, 0);
    this.#post({ type: "lane_fault", point, idempotencyId });
    Atomics.wait(this.#cell, 0, 0);
    return Atomics.load(this.#cell, 1) === FAULT;
  }
}

/**
 * The worker's own manager (InThreadKwebManager, with its group apply)
 * with the `applyFaults` seam in front of it: every apply, single or in a
 * group, runs the production code and meets the faults the test asked for
 * at the two points ApplyFaults names.
 */
export class FaultingKwebManager implements KwebManager {
  readonly groupApply: GroupApply;
  readonly #inner: InThreadKwebManager;
  readonly #faults: WorkerFaults;

  constructor(inner: InThreadKwebManager, faults: WorkerFaults) {
    this.#inner = inner;
    this.#faults = faults;
    this.groupApply = { apply: (requests, options) => this.#applyGroup(requests, options) };
  }

  ready(): Promise<void> {
    return this.#inner.ready();
  }

  /**
   * One command, as a group of one: the runtime here always applies
   * through `groupApply`, and this keeps a single place where the faults
   * are asked.
   */
  apply(request: ApplyRequest): Promise<ApplyOutcome> {
    try {
      return Promise.resolve(this.#applyGroup([request], { until: 0, atLeast: 1 })[0]!);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  close(): Promise<void> {
    return this.#inner.close();
  }

  #applyGroup(requests: Iterable<ApplyRequest>, options: Parameters<GroupApply["apply"]>[1]): ApplyOutcome[] {
    const iterator = requests[Symbol.iterator]();
    const head = iterator.next();
    if (head.done === true) return [];
    // An outage at the head: nothing is applied, as when the write lock is held.
    if (this.#faults.ask("before", head.value.idempotencyId)) throw injectedOutage();
    const faults = this.#faults;
    const applied: string[] = [];
    function* members(): Generator<ApplyRequest> {
      applied.push(head.value.idempotencyId);
      yield head.value;
      for (let next = iterator.next(); next.done !== true; next = iterator.next()) {
        // An outage behind the head ends the group before that command.
        if (faults.ask("before", next.value.idempotencyId)) return;
        applied.push(next.value.idempotencyId);
        yield next.value;
      }
    }
    return this.#inner.groupApply.apply(members(), {
      ...options,
      afterCommit: (index, outcome) => {
        options.afterCommit?.(index, outcome);
        if (faults.ask("after", applied[index]!)) throw injectedFailure();
      },
    });
  }
}

function injectedOutage(): WriterUnavailableError {
  return new WriterUnavailableError("the Kweb writer is unavailable");
}

function injectedFailure(): Error {
  return new Error("the Kweb manager failed after committing a command");
}
