import type { Clock } from "../../src/kmap/clock.js";

/**
 * A clock that moves only when the test says so: the runtime's retry
 * schedule is checked by advancing it, never by sleeping.
 */
export class ManualClock implements Clock {
  #now: number;
  #sleepers: { until: number; resolve: () => void }[] = [];

  constructor(start = Date.UTC(2026, 10, 29, 12, 0, 0)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const sleeper = {
        until: this.#now + ms,
        resolve: () => {
          this.#sleepers = this.#sleepers.filter((s) => s !== sleeper);
          signal.removeEventListener("abort", sleeper.resolve);
          resolve();
        },
      };
      this.#sleepers.push(sleeper);
      signal.addEventListener("abort", sleeper.resolve, { once: true });
    });
  }

  /** How many sleeps are pending (the runtime is waiting on the clock). */
  get sleeping(): number {
    return this.#sleepers.length;
  }

  /** The earliest pending wake-up time. */
  get nextWakeAt(): number | undefined {
    return this.#sleepers.length === 0 ? undefined : Math.min(...this.#sleepers.map((s) => s.until));
  }

  advance(ms: number): void {
    this.#now += ms;
    for (const sleeper of [...this.#sleepers]) if (sleeper.until <= this.#now) sleeper.resolve();
  }
}
