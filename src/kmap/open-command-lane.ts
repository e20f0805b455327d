import { ChangeFeed } from "./change-feed.js";
import { systemClock } from "./clock.js";
import type { CommandEvent } from "./command-record.js";
import { CommandLane } from "./command-lane.js";
import { CommandRuntime, type RuntimeOptions } from "./command-runtime.js";
import type { KwebManager } from "./kweb-manager.js";
import { LaneStore } from "./lane-store.js";

/** An opened command lane: the lane, its runtime, and what recovery found. */
export interface OpenedCommandLane {
  readonly lane: CommandLane;
  /** Supervise `runtime.run()`; it starts applying once the manager is ready. */
  readonly runtime: CommandRuntime;
  /** The Applying records a previous process left, now Queued again. */
  readonly recovered: readonly CommandEvent[];
  /** Closes the SQLite database; stop the runtime first. */
  close(): void;
}

/**
 * `open(database_path, manager)`: opens or creates the command table,
 * recovers every Applying record to Queued, and returns the lane and its
 * runtime. Nothing is applied until the caller runs the runtime.
 */
export function openCommandLane(databasePath: string, manager: KwebManager, options: RuntimeOptions = {}): OpenedCommandLane {
  const clock = options.clock ?? systemClock;
  const store = new LaneStore(databasePath);
  let recovered: CommandEvent[];
  try {
    recovered = store.recoverApplying(clock.now());
  } catch (error) {
    store.close();
    throw error;
  }
  const feed = new ChangeFeed();
  const runtime = new CommandRuntime(store, manager, feed, { ...options, clock });
  const lane = new CommandLane(store, feed, clock, () => runtime.wake());
  return { lane, runtime, recovered, close: () => store.close() };
}
