import type { PausePoints } from "../fault-injection/pause-points.js";
import type { Logger, LogFields } from "../log/logger.js";
import type { QueuedItem } from "./command-queue.js";
import { systemClock, type Clock } from "./clock.js";
import { CommandRuntime } from "./command-runtime.js";
import { CommandStore } from "./command-store.js";
import { DurableChanges } from "./durable-changes.js";
import { InThreadKwebManager } from "./kweb/in-thread-kweb-manager.js";
import type { KwebWriter } from "./kweb/kweb-writer.js";
import { failureToWire } from "./thread-errors.js";
import type { LaneFromWorker, LaneToWorker } from "./worker-lane-protocol.js";
import { FaultingKwebManager, WorkerClock, WorkerFaults } from "./worker-seams.js";

/**
 * The command lane inside the Kweb worker thread: the thread that owns the
 * Kweb writer also owns the lane's SQLite writer connection, runs the
 * runtime (CommandRuntime over an InThreadKwebManager) and commits
 * submissions. Nothing of the lane writes, fsyncs or waits for a lock on
 * the server's event loop; the main thread validates, answers and serves
 * reads (WorkerLane).
 *
 * Submissions that arrive in one turn of this thread's event loop are
 * committed together in one `full` transaction; the runtime yields between
 * records, so a flood of submissions and a backlog of commands take turns
 * instead of starving each other. Durable changes are posted to the main
 * thread's feed as they become durable (DurableChanges).
 */
export class LaneHost {
  readonly #post: (message: LaneFromWorker) => void;
  readonly #store: CommandStore;
  readonly #runtime: CommandRuntime;
  readonly #changes: DurableChanges;
  readonly #pause: PausePoints;
  readonly #clock: Clock;
  #groups: Extract<LaneToWorker, { type: "lane_submit" }>[] = [];
  #running: Promise<void> | undefined;
  #closed = false;

  private constructor(
    post: (message: LaneFromWorker) => void,
    store: CommandStore,
    writer: KwebWriter,
    clock: Clock,
    open: Extract<LaneToWorker, { type: "lane_open" }>,
  ) {
    this.#post = post;
    this.#store = store;
    this.#clock = clock;
    this.#changes = new DurableChanges((rows) => post({ type: "lane_changes", rows, counters: store.counters() }));
    this.#pause = pauseBridge(post, open.pauseFlag);
    const manager = new InThreadKwebManager(writer);
    this.#runtime = new CommandRuntime(store, open.faultCell === undefined ? manager : new FaultingKwebManager(manager, new WorkerFaults(post, open.faultCell)), this.#changes, {
      logger: forwardingLogger(post),
      pausePoints: this.#pause,
      eventRetention: open.eventRetention,
      clock,
    });
  }

  /** Opens the lane's database, recovers Applying records and reports them; undefined (after reporting) when it cannot. */
  static open(post: (message: LaneFromWorker) => void, writer: KwebWriter, open: Extract<LaneToWorker, { type: "lane_open" }>): LaneHost | undefined {
    let store: CommandStore | undefined;
    try {
      const clock = open.clockCell === undefined ? systemClock : new WorkerClock(post, open.clockCell);
      store = new CommandStore(open.commandsPath, { busyTimeoutMs: open.busyTimeoutMs });
      const recovered = store.recoverApplying(clock.now());
      const host = new LaneHost(post, store, writer, clock, open);
      post({ type: "lane_opened", recovered, counters: store.counters() });
      return host;
    } catch (error) {
      store?.close();
      post({ type: "lane_open_failed", error: failureToWire(error) });
      return undefined;
    }
  }

  handle(message: LaneToWorker): void {
    switch (message.type) {
      case "lane_submit":
        if (this.#groups.length === 0) setImmediate(() => this.#commitGroups());
        this.#groups.push(message);
        return;
      case "lane_run":
        this.#running ??= this.#runtime.run().then(
          () => this.#post({ type: "lane_stopped" }),
          (error: unknown) => this.#post({ type: "lane_failed", error: failureToWire(error) }),
        );
        return;
      case "lane_stop":
        if (this.#running === undefined) this.#post({ type: "lane_stopped" });
        else void this.#runtime.stop();
        return;
      case "lane_close":
        this.close();
        this.#post({ type: "lane_closed" });
        return;
      case "lane_clock_woke":
        if (this.#clock instanceof WorkerClock) this.#clock.woke(message.id);
        return;
      case "lane_open":
        return;
    }
  }

  /** Closes the lane's database (the runtime must have stopped). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const group of this.#groups.splice(0)) {
      this.#post({ type: "lane_submit_failed", id: group.id, error: failureToWire(new Error("the command lane is closed")) });
    }
    this.#store.close();
  }

  /** Commits every group that arrived in this turn as one transaction, then answers each. */
  #commitGroups(): void {
    const groups = this.#groups.splice(0);
    if (groups.length === 0 || this.#closed) return;
    const items: QueuedItem[] = groups.flatMap((g) => g.items);
    let results;
    try {
      results = this.#store.insertQueued(items, this.#clock.now(), groups[groups.length - 1]!.maxPending);
    } catch (error) {
      const wire = failureToWire(error);
      for (const group of groups) this.#post({ type: "lane_submit_failed", id: group.id, error: wire });
      return;
    }
    const created = results.flatMap((r) => ("created" in r ? [r.created] : []));
    // A group of repeats writes nothing, and SQLite then syncs nothing either.
    this.#changes.committed(created, created.length > 0 ? "full" : "normal");
    if (items.length > 0) this.#pause.reached("after-queued", items[0]!.idempotencyId);
    let offset = 0;
    for (const group of groups) {
      this.#post({ type: "lane_submitted", id: group.id, results: results.slice(offset, offset + group.items.length) });
      offset += group.items.length;
    }
    if (created.length > 0) this.#runtime.wake();
  }
}

/**
 * Pause points reached in this thread, handled by the main thread's
 * PausePoints (which print the pause line and stop the whole process): the
 * worker posts the point and waits on the shared flag until the main thread
 * has handled it, so nothing here moves past the point before the process
 * is stopped. Without a flag, pause points are off and cost nothing.
 */
function pauseBridge(post: (message: LaneFromWorker) => void, flag: SharedArrayBuffer | undefined): PausePoints {
  if (flag === undefined) return { reached: () => {} };
  const cell = new Int32Array(flag);
  return {
    reached(point, id) {
      Atomics.store(cell, 0, 0);
      post({ type: "lane_pause", point, id });
      Atomics.wait(cell, 0, 0);
    },
  };
}

/** A logger whose lines go to the main thread's logger. */
function forwardingLogger(post: (message: LaneFromWorker) => void): Logger {
  const emit = (level: "info" | "warn") => (message: string, fields?: LogFields) => post({ type: "lane_log", level, message, fields: { ...fields } });
  const logger: Logger = {
    debug: () => {},
    info: emit("info"),
    warn: emit("warn"),
    error: emit("warn"),
    child: () => logger,
  };
  return logger;
}
