import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { silentLogger, type Logger } from "../log/logger.js";
import { ChangeFeed } from "./change-feed.js";
import type { Clock } from "./clock.js";
import { CommandQueue, type QueuedItem, type SubmissionWriter, type WrittenItem } from "./command-queue.js";
import { CommandReader } from "./command-reader.js";
import type { CommandEvent } from "./command-record.js";
import { toEvent } from "./command-rows.js";
import { KwebTaskError, type LaneRuntime } from "./command-runtime.js";
import { KmapError } from "./errors.js";
import type { EmbeddedKwebManager } from "./kweb/embedded-kweb-manager.js";
import { failureFromWire, type WireFailure } from "./thread-errors.js";
import type { LaneFromWorker, LaneToWorker } from "./worker-lane-protocol.js";
import { FAULT, NO_FAULT, type ApplyFaults } from "./worker-seams.js";

export interface WorkerLaneOptions {
  /** The lane's SQLite file. */
  readonly commandsPath: string;
  readonly maxPending: number;
  readonly eventRetention: number;
  /** How long the lane's writer (in the worker) waits for a lock held elsewhere. */
  readonly busyTimeoutMs: number;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
  /** The `clock` seam: the runtime in the worker takes its time from this clock. */
  readonly clock?: Clock;
  /** The `applyFaults` seam: the runtime's manager in the worker asks these before each apply and after each commit. */
  readonly applyFaults?: ApplyFaults;
}

interface Settle<T> {
  readonly resolve: (value: T) => void;
  readonly reject: (error: Error) => void;
}

/**
 * The main thread's side of the command lane hosted in the Kweb worker
 * thread (LaneHost): the queue callers use, the runtime the server
 * supervises, and the submission writer that hands groups to the worker.
 *
 * The main thread validates submissions, decides backlog refusals at once,
 * answers, and serves reads and watches (a read-only connection that never
 * waits for a lock, and the feed the worker posts durable changes to). Every
 * SQLite write of the lane — submissions, transitions, pruning — and every
 * Kweb apply happen in the worker, so none of them, nor any wait for a lock
 * another process holds, ever runs on the server's event loop.
 */
export class WorkerLane implements SubmissionWriter, LaneRuntime {
  readonly queue: CommandQueue;
  /** The Applying records the previous process left, now Queued again. */
  readonly recovered: readonly CommandEvent[];
  readonly #channel: { post(message: LaneToWorker): void };
  readonly #feed: ChangeFeed;
  readonly #reader: CommandReader;
  readonly #log: Logger;
  readonly #pause: PausePoints;
  readonly #pauseCell: Int32Array | undefined;
  readonly #submissions = new Map<number, Settle<WrittenItem[]>>();
  #nextSubmission = 1;
  #running: Promise<void> | undefined;
  #settleRun: Settle<void> | undefined;
  #stopped: (() => void) | undefined;
  #closed: (() => void) | undefined;
  /** Set once the worker thread is gone: nothing it held can answer. */
  #gone = false;
  /** Set once the worker is gone or the runtime failed: every later request fails with it. */
  #failure: Error | undefined;

  private constructor(init: {
    channel: { post(message: LaneToWorker): void };
    feed: ChangeFeed;
    reader: CommandReader;
    recovered: readonly CommandEvent[];
    options: WorkerLaneOptions;
    pauseCell: Int32Array | undefined;
  }) {
    this.#channel = init.channel;
    this.#feed = init.feed;
    this.#reader = init.reader;
    this.recovered = init.recovered;
    this.#log = init.options.logger ?? silentLogger;
    this.#pause = init.options.pausePoints ?? noPausePoints;
    this.#pauseCell = init.pauseCell;
    this.queue = new CommandQueue({ reader: init.reader, feed: init.feed, writer: this, maxPending: init.options.maxPending, logger: this.#log });
  }

  /**
   * Opens the lane in the manager's worker (which must be ready): the
   * worker opens the lane's database and recovers Applying records; then
   * the read-only connection opens here. The runtime starts with `run()`.
   */
  static async open(manager: EmbeddedKwebManager, options: WorkerLaneOptions): Promise<WorkerLane> {
    let lane: WorkerLane | undefined;
    let opened: Settle<{ recovered: readonly CommandEvent[]; feed: ChangeFeed }> | undefined;
    const buffered: LaneFromWorker[] = [];
    const seams = new MainThreadSeams(options, (message) => channel.post(message));
    const channel = manager.laneChannel((message) => {
      if (seams.handle(message)) return;
      if (lane !== undefined) return lane.#onMessage(message);
      if (message.type === "lane_opened") opened?.resolve({ recovered: message.recovered.map(toEvent), feed: new ChangeFeed(message.counters) });
      else if (message.type === "lane_open_failed") opened?.reject(failureFromWire(message.error, "the command lane could not be opened"));
      else buffered.push(message);
    });
    const pausing = (options.pausePoints ?? noPausePoints) !== noPausePoints;
    const pauseFlag = pausing ? new SharedArrayBuffer(4) : undefined;
    const result = await Promise.race([
      new Promise<{ recovered: readonly CommandEvent[]; feed: ChangeFeed }>((resolve, reject) => {
        opened = { resolve, reject };
        channel.post({
          type: "lane_open",
          commandsPath: options.commandsPath,
          busyTimeoutMs: options.busyTimeoutMs,
          eventRetention: options.eventRetention,
          pauseFlag,
          clockCell: seams.clockCell,
          faultCell: seams.faultCell,
        });
      }),
      manager.failure.then((error) => {
        throw new KwebTaskError(error);
      }),
    ]);
    let reader: CommandReader;
    try {
      reader = new CommandReader(options.commandsPath);
    } catch (error) {
      await new Promise<void>((resolve) => {
        manager.laneChannel((message) => message.type === "lane_closed" && resolve());
        channel.post({ type: "lane_close" });
      });
      throw error;
    }
    lane = new WorkerLane({ channel, feed: result.feed, reader, recovered: result.recovered, options, pauseCell: pauseFlag ? new Int32Array(pauseFlag) : undefined });
    for (const message of buffered) lane.#onMessage(message);
    void manager.failure.then((error) => lane!.#workerGone(new KwebTaskError(error)));
    return lane;
  }

  /** SubmissionWriter: one message per group; the worker commits the groups of one of its turns together. */
  write(items: readonly QueuedItem[], maxPending: number): Promise<WrittenItem[]> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    const id = this.#nextSubmission++;
    return new Promise<WrittenItem[]>((resolve, reject) => {
      this.#submissions.set(id, { resolve, reject });
      this.#channel.post({ type: "lane_submit", id, items: items.map(({ idempotencyId, canonical }) => ({ idempotencyId, canonical })), maxPending });
    });
  }

  /** LaneRuntime: starts the runtime in the worker; rejects when it fails or the worker dies. */
  run(): Promise<void> {
    if (this.#running === undefined) {
      this.#running = new Promise<void>((resolve, reject) => (this.#settleRun = { resolve, reject }));
      if (this.#failure !== undefined) this.#settleRun!.reject(this.#failure);
      else this.#channel.post({ type: "lane_run" });
    }
    return this.#running;
  }

  /** LaneRuntime: stops after the command being applied; resolves when the runtime has ended. */
  async stop(): Promise<void> {
    if (this.#failure === undefined) {
      await new Promise<void>((resolve) => {
        this.#stopped = resolve;
        this.#channel.post({ type: "lane_stop" });
      });
    }
    await this.#running?.catch(() => {});
  }

  /** Closes the read-only connection and the lane's database in the worker (stop the runtime first). */
  async close(): Promise<void> {
    this.#reader.close();
    // A worker that died cannot answer (and its connection died with it);
    // one that dies meanwhile settles the wait through #fail.
    if (!this.#gone) {
      await new Promise<void>((resolve) => {
        this.#closed = resolve;
        this.#channel.post({ type: "lane_close" });
      });
    }
    for (const [, pending] of this.#submissions) pending.reject(new KmapError("internal", "the command lane is closed"));
    this.#submissions.clear();
  }

  #onMessage(message: LaneFromWorker): void {
    switch (message.type) {
      case "lane_changes":
        this.#feed.publish(message.rows.map(toEvent), message.counters);
        return;
      case "lane_submitted": {
        const pending = this.#submissions.get(message.id);
        this.#submissions.delete(message.id);
        pending?.resolve([...message.results]);
        return;
      }
      case "lane_submit_failed": {
        const pending = this.#submissions.get(message.id);
        this.#submissions.delete(message.id);
        pending?.reject(failureFromWire(message.error, "the command lane failed while queueing commands"));
        return;
      }
      case "lane_failed":
        this.#fail(runtimeFailure(message.error));
        return;
      case "lane_stopped":
        this.#settleRun?.resolve();
        this.#stopped?.();
        return;
      case "lane_closed":
        this.#closed?.();
        return;
      case "lane_pause":
        try {
          this.#pause.reached(message.point, message.id);
        } finally {
          if (this.#pauseCell !== undefined) {
            Atomics.store(this.#pauseCell, 0, 1);
            Atomics.notify(this.#pauseCell, 0);
          }
        }
        return;
      case "lane_log":
        this.#log[message.level](message.message, message.fields);
        return;
      case "lane_opened":
      case "lane_open_failed":
      case "lane_clock_now":
      case "lane_clock_sleep":
      case "lane_clock_cancel":
      case "lane_fault":
        return;
    }
  }

  /** The worker thread died: the runtime's future rejects, and nothing waits for an answer from it. */
  #workerGone(error: Error): void {
    this.#gone = true;
    this.#fail(error);
    this.#closed?.();
  }

  /** The runtime failed or the worker died: the runtime's future rejects, and so does every waiting submission. */
  #fail(error: Error): void {
    if (this.#failure !== undefined) return;
    this.#failure = error;
    this.#settleRun?.reject(error);
    this.#stopped?.();
    this.#closed?.();
    for (const [, pending] of this.#submissions) pending.reject(error);
    this.#submissions.clear();
  }
}

/**
 * The runtime's failure as the worker reported it: a failure of the Kweb
 * manager stays a KwebTaskError (what the runtime threw), with the chain
 * below it; anything else is rebuilt as it was.
 */
function runtimeFailure(wire: WireFailure): Error {
  const rebuilt = failureFromWire(wire, "the Kmap command runtime failed");
  return wire[0]?.name === "KwebTaskError" ? new KwebTaskError(rebuilt.cause) : rebuilt;
}

/**
 * The main thread's side of the Kmap core's test seams (worker-seams.ts):
 * answers the worker runtime's questions of time from the `clock` and of
 * faults from the `applyFaults`. Without seams it handles nothing.
 */
class MainThreadSeams {
  /** The cell `now()` answers in, when there is a clock. */
  readonly clockCell: SharedArrayBuffer | undefined;
  readonly #clock: Clock | undefined;
  /** The cell a fault question is answered in, when there are faults. */
  readonly faultCell: SharedArrayBuffer | undefined;
  readonly #faults: ApplyFaults | undefined;
  readonly #post: (message: LaneToWorker) => void;
  readonly #sleeps = new Map<number, AbortController>();

  constructor(options: WorkerLaneOptions, post: (message: LaneToWorker) => void) {
    this.#clock = options.clock;
    this.#faults = options.applyFaults;
    this.faultCell = options.applyFaults === undefined ? undefined : new SharedArrayBuffer(8);
    this.#post = post;
    this.clockCell = options.clock === undefined ? undefined : new SharedArrayBuffer(16);
  }

  /** Handles a seam's message; false for every other message. */
  handle(message: LaneFromWorker): boolean {
    switch (message.type) {
      case "lane_clock_now": {
        const flag = new Int32Array(this.clockCell!, 0, 1);
        new Float64Array(this.clockCell!, 8, 1)[0] = this.#clock!.now();
        Atomics.store(flag, 0, 1);
        Atomics.notify(flag, 0);
        return true;
      }
      case "lane_clock_sleep": {
        const controller = new AbortController();
        this.#sleeps.set(message.id, controller);
        void this.#clock!.sleep(message.ms, controller.signal).then(() => {
          this.#sleeps.delete(message.id);
          this.#post({ type: "lane_clock_woke", id: message.id });
        });
        return true;
      }
      case "lane_clock_cancel":
        this.#sleeps.get(message.id)?.abort();
        return true;
      case "lane_fault": {
        const cell = new Int32Array(this.faultCell!, 0, 2);
        let fault = false;
        try {
          const ask = message.point === "before" ? this.#faults!.before : this.#faults!.after;
          fault = ask?.(message.idempotencyId) !== undefined;
        } finally {
          // Always answered: the worker waits on the cell.
          Atomics.store(cell, 1, fault ? FAULT : NO_FAULT);
          Atomics.store(cell, 0, 1);
          Atomics.notify(cell, 0);
        }
        return true;
      }
      default:
        return false;
    }
  }
}
