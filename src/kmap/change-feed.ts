import type { CommandEvent } from "./command-record.js";

/**
 * The in-memory side of the change log: it only wakes watchers promptly;
 * SQLite stays the record of what happened. Each published change bumps
 * `version`, so a watcher that read the log at version v and found nothing
 * new waits for `version > v` and cannot miss a change published between
 * its read and its wait.
 */
export class ChangeFeed {
  #version = 0;
  #waiters: (() => void)[] = [];

  get version(): number {
    return this.#version;
  }

  publish(_event: CommandEvent): void {
    this.#version += 1;
    for (const waiter of this.#waiters.splice(0)) waiter();
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
