import { performance } from "node:perf_hooks";
import type { EventRow } from "./command-rows.js";
import type { Durability } from "./command-store.js";

/**
 * Holds back change-log entries committed without an fsync (`normal`) until
 * a later `full` commit (or an explicit sync) has made them durable, and only
 * then hands them on to the watchers.
 *
 * Why: a `normal` commit survives a crash of the process (the operating
 * system keeps the written pages) but not a power failure, and after one
 * SQLite would hand the lost positions out again to other changes. A watcher
 * that had already seen such a change would then resume after a position
 * that now means something else. Publishing only durable changes keeps every
 * position a watcher ever sees for good.
 *
 * The runtime keeps the hold short: it commits `full` whenever it is about to
 * wait (idle, a retry, a stop) and whenever `syncDue` says the oldest held
 * change has waited `maxHoldMs`; every submission group commit is `full` too.
 */
export class DurableChanges {
  #held: EventRow[] = [];
  #heldSince: number | undefined;

  constructor(
    /** Receives durable change rows, in commit (position) order. */
    private readonly publish: (rows: readonly EventRow[]) => void,
    private readonly maxHoldMs = 25,
  ) {}

  /** Rows just committed with `durability`; a `full` commit also releases every row held so far. */
  committed(rows: readonly EventRow[], durability: Durability): void {
    if (durability === "normal") {
      if (rows.length === 0) return;
      this.#held.push(...rows);
      this.#heldSince ??= performance.now();
      return;
    }
    const released = this.#held.length === 0 ? rows : [...this.#held, ...rows];
    this.#held = [];
    this.#heldSince = undefined;
    this.publish(released);
  }

  /**
   * Tells the watchers' side that the writer's counters changed without a
   * change of any record (pruning moved the oldest position). Held rows stay
   * held.
   */
  countersChanged(): void {
    this.publish([]);
  }

  /** Whether the next write should be `full` so that no change waits longer than `maxHoldMs`. */
  get syncDue(): boolean {
    return this.#heldSince !== undefined && performance.now() - this.#heldSince >= this.maxHoldMs;
  }

  /** Whether changes are waiting for an fsync. */
  get holding(): boolean {
    return this.#held.length > 0;
  }
}
