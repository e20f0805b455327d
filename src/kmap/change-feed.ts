import type { CommandEvent } from "./command-record.js";

/**
 * The in-memory side of the change log. SQLite stays the record of what
 * happened; the feed wakes watchers promptly and keeps the most recent
 * changes so that a watcher that is keeping up reads them from memory
 * instead of querying SQLite on every change.
 *
 * Each published change bumps `version`, so a watcher that read the log at
 * version v and found nothing new waits for `version > v` and cannot miss a
 * change published between its read and its wait.
 */
export class ChangeFeed {
  static readonly RECENT = 1024;
  #version = 0;
  #waiters: (() => void)[] = [];
  /** The latest changes, contiguous positions in increasing order. */
  #recent: CommandEvent[] = [];

  get version(): number {
    return this.#version;
  }

  /** Publishes a change just committed to SQLite (in commit order). */
  publish(event: CommandEvent): void {
    this.#recent.push(event);
    if (this.#recent.length > ChangeFeed.RECENT * 2) this.#recent = this.#recent.slice(-ChangeFeed.RECENT);
    this.#version += 1;
    for (const waiter of this.#waiters.splice(0)) waiter();
  }

  /**
   * The changes after `position` (optionally of one command) when memory
   * holds all of them; undefined when the caller must read SQLite.
   */
  recentAfter(position: number, idempotencyId: string | undefined): CommandEvent[] | undefined {
    const first = this.#recent[0];
    if (first === undefined || position < first.position - 1) return undefined;
    return this.#recent.filter((e) => e.position > position && (idempotencyId === undefined || e.record.submission.idempotencyId === idempotencyId));
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
