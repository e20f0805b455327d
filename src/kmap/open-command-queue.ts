import { noPausePoints } from "../fault-injection/pause-points.js";
import { ChangeFeed } from "./change-feed.js";
import { systemClock } from "./clock.js";
import { CommandQueue, type SubmissionWriter } from "./command-queue.js";
import { CommandReader } from "./command-reader.js";
import type { CommandEvent } from "./command-record.js";
import { toEvent } from "./command-rows.js";
import { CommandRuntime, type RuntimeOptions } from "./command-runtime.js";
import { CommandStore } from "./command-store.js";
import { DurableChanges } from "./durable-changes.js";
import type { KwebManager } from "./kweb-manager.js";

/** The default bound of unfinished commands (`--kmap-max-pending`). */
export const DEFAULT_MAX_PENDING = 10_000;

/** An opened command queue: the queue, its runtime, and what recovery found. */
export interface OpenedCommandQueue {
  readonly queue: CommandQueue;
  /** Supervise `runtime.run()`; it starts applying once the manager is ready. */
  readonly runtime: CommandRuntime;
  /** The Applying records a previous process left, now Queued again. */
  readonly recovered: readonly CommandEvent[];
  /** Closes the SQLite connections; stop the runtime first. */
  close(): void;
}

export interface OpenCommandQueueOptions extends RuntimeOptions {
  /** The most unfinished commands; past it a new submission fails with `backlog_full`. Default 10,000. */
  readonly maxPending?: number;
}

/**
 * `open(database_path, manager)`: opens or creates the command table,
 * recovers every Applying record to Queued, and returns the queue and its
 * runtime, both on the calling thread, for any KwebManager. Nothing is
 * applied until the caller runs the runtime.
 *
 * This is the specification's library API. The server's embedded Kweb runs
 * the same queue and runtime with the runtime and every write in the Kweb
 * worker thread instead (openKmapCore, WorkerLane); here SQLite writes run
 * on the caller's thread.
 */
export function openCommandQueue(databasePath: string, manager: KwebManager, options: OpenCommandQueueOptions = {}): OpenedCommandQueue {
  const clock = options.clock ?? systemClock;
  const pause = options.pausePoints ?? noPausePoints;
  const store = new CommandStore(databasePath);
  let recovered: CommandEvent[];
  let reader: CommandReader;
  try {
    recovered = store.recoverApplying(clock.now()).map(toEvent);
    reader = new CommandReader(databasePath);
  } catch (error) {
    store.close();
    throw error;
  }
  const feed = new ChangeFeed(store.counters());
  const changes = new DurableChanges((rows) => feed.publish(rows.map(toEvent), store.counters()));
  const runtime = new CommandRuntime(store, manager, changes, { ...options, clock });
  const writer: SubmissionWriter = {
    write: async (items, maxPending) => {
      const results = store.insertQueued(items, clock.now(), maxPending);
      const created = results.flatMap((r) => ("created" in r ? [r.created] : []));
      // A group of repeats writes nothing, and SQLite then syncs nothing either.
      changes.committed(created, created.length > 0 ? "full" : "normal");
      if (items.length > 0) pause.reached("after-queued", items[0]!.idempotencyId);
      if (created.length > 0) runtime.wake();
      return results;
    },
  };
  const queue = new CommandQueue({
    reader,
    feed,
    writer,
    maxPending: options.maxPending ?? DEFAULT_MAX_PENDING,
    ...(options.logger ? { logger: options.logger } : {}),
  });
  return {
    queue,
    runtime,
    recovered,
    close: () => {
      reader.close();
      store.close();
    },
  };
}
