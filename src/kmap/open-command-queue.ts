import { ChangeFeed } from "./change-feed.js";
import { systemClock } from "./clock.js";
import type { CommandEvent } from "./command-record.js";
import { CommandQueue } from "./command-queue.js";
import { CommandRuntime, type RuntimeOptions } from "./command-runtime.js";
import type { KwebManager } from "./kweb-manager.js";
import { CommandStore } from "./command-store.js";

/** An opened command queue: the queue, its runtime, and what recovery found. */
export interface OpenedCommandQueue {
  readonly queue: CommandQueue;
  /** Supervise `runtime.run()`; it starts applying once the manager is ready. */
  readonly runtime: CommandRuntime;
  /** The Applying records a previous process left, now Queued again. */
  readonly recovered: readonly CommandEvent[];
  /** Closes the SQLite database; stop the runtime first. */
  close(): void;
}

/**
 * `open(database_path, manager)`: opens or creates the command table,
 * recovers every Applying record to Queued, and returns the queue and its
 * runtime. Nothing is applied until the caller runs the runtime.
 */
export function openCommandQueue(databasePath: string, manager: KwebManager, options: RuntimeOptions = {}): OpenedCommandQueue {
  const clock = options.clock ?? systemClock;
  const store = new CommandStore(databasePath);
  let recovered: CommandEvent[];
  try {
    recovered = store.recoverApplying(clock.now());
  } catch (error) {
    store.close();
    throw error;
  }
  const feed = new ChangeFeed();
  const runtime = new CommandRuntime(store, manager, feed, { ...options, clock });
  const queue = new CommandQueue(store, feed, clock, () => runtime.wake());
  return { queue, runtime, recovered, close: () => store.close() };
}
