import type { CommandEvent } from "./command-record.js";
import type { LaneCounters } from "./command-store.js";
import { coreChannel } from "../observe/core-events.js";

/**
 * The in-memory side of the change log. SQLite stays the record of what
 * happened; the feed wakes watchers promptly and keeps the most recent
 * changes so that a watcher that is keeping up reads them from memory
 * instead of querying SQLite on every change.
 *
 * Only durable changes are published here (see DurableChanges): the feed's
 * `latestPosition` is the durable horizon, and replays from SQLite stop at
 * it, so no watcher ever sees a change that a power failure could take back.
 *
 * Each published change bumps `version`, so a watcher that read the log at
 * version v and found nothing new waits for `version > v` and cannot miss a
 * change published between its read and its wait.
 *
 * The feed also carries the lane's counters as the writer last reported
 * them (the backlog of unfinished commands, the change log's range).
 */
export class ChangeFeed {
  static readonly RECENT = 1024;
  #version = 0;
  #waiters: (() => void)[] = [];
  /** The latest changes, contiguous positions in increasing order. */
  #recent: CommandEvent[] = [];
  #counters: LaneCounters;

  constructor(counters: LaneCounters = { pending: 0, latestPosition: 0, oldestPosition: 1 }) {
    this.#counters = counters;
  }

  get version(): number {
    return this.#version;
  }

  /** The newest durable change-log position: watchers may read up to it. */
  get latestPosition(): number {
    return this.#counters.latestPosition;
  }

  /** The writer's counters: backlog and change-log range. */
  get counters(): LaneCounters {
    return this.#counters;
  }

  /**
   * Publishes durable changes, in commit order, with the writer's counters
   * as of their commit (the latest position is that of the last change).
   */
  publish(events: readonly CommandEvent[], counters: Omit<LaneCounters, "latestPosition">): void {
    for (const event of events) this.#recent.push(event);
    observeOutcomes(events);
    if (this.#recent.length > ChangeFeed.RECENT * 2) this.#recent = this.#recent.slice(-ChangeFeed.RECENT);
    const latest = events.length > 0 ? Math.max(this.#counters.latestPosition, events[events.length - 1]!.position) : this.#counters.latestPosition;
    this.#counters = { pending: counters.pending, oldestPosition: counters.oldestPosition, latestPosition: latest };
    if (events.length === 0) return;
    this.#version += 1;
    for (const waiter of this.#waiters.splice(0)) waiter();
  }

  /**
   * Up to `limit` changes after `position` (optionally of one command) when
   * memory holds all of them, and the position up to which memory was
   * examined; undefined when the caller must read SQLite.
   */
  recentAfter(position: number, idempotencyId: string | undefined, limit = Number.POSITIVE_INFINITY): { events: CommandEvent[]; scannedThrough: number } | undefined {
    const first = this.#recent[0];
    if (first === undefined) return position >= this.#counters.latestPosition ? { events: [], scannedThrough: position } : undefined;
    if (position < first.position - 1) return undefined;
    const events: CommandEvent[] = [];
    // Positions in memory are increasing and normally contiguous: start at
    // the first one after `position` (searching only if there is a gap).
    let start = Math.max(0, position - first.position + 1);
    if (start > 0 && this.#recent[start - 1]?.position !== position) {
      start = this.#recent.findIndex((e) => e.position > position);
      if (start < 0) start = this.#recent.length;
    }
    let scannedThrough = position;
    for (let i = start; i < this.#recent.length && events.length < limit; i++) {
      const event = this.#recent[i]!;
      if (idempotencyId === undefined || event.record.submission.idempotencyId === idempotencyId) events.push(event);
      scannedThrough = event.position;
    }
    return { events, scannedThrough };
  }

  /** Resolves once a change after `sinceVersion` was published, or when `signal` aborts. */
  waitForChange(sinceVersion: number, signal: AbortSignal): Promise<void> {
    if (this.#version > sinceVersion || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve();
      };
      this.#waiters.push(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

/**
 * What the process's metrics hear of commands that reached their outcome:
 * the commands committed in one lane transaction, each with its time from
 * submission to commit, or one command that failed for good, with its
 * error code.
 */
export type CommandOutcomes =
  | { readonly kind: "committed"; readonly latenciesMs: readonly number[] }
  | { readonly kind: "failed"; readonly code: string; readonly latencyMs: number };

/** The channel of command outcomes (src/observe/core-events.ts); the Kmap binding's metrics install its sink. */
export const commandOutcomes = coreChannel<CommandOutcomes>("kmap.outcomes");

/** Tells the process's metrics of the commands that reached their outcome. */
function observeOutcomes(events: readonly CommandEvent[]): void {
  let committed: number[] | undefined;
  for (const event of events) {
    if (event.kind === "committed") (committed ??= []).push(event.changedAt - event.record.submittedAt);
    else if (event.kind === "failed") commandOutcomes.emit({ kind: "failed", code: event.record.error?.code ?? "unknown", latencyMs: event.changedAt - event.record.submittedAt });
  }
  if (committed !== undefined) commandOutcomes.emit({ kind: "committed", latenciesMs: committed });
}
