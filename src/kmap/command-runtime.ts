import { silentLogger, type Logger } from "../log/logger.js";
import type { ChangeFeed } from "./change-feed.js";
import { systemClock, type Clock } from "./clock.js";
import type { CommandEvent, CommandRecord } from "./command-record.js";
import { KmapError } from "./errors.js";
import { WriterUnavailableError, type KwebManager } from "./kweb-manager.js";
import type { CommandStore } from "./command-store.js";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { retryDelayMs } from "./retry-backoff.js";

/** The Kweb manager failed in a way that is not a writer outage. Ends the runtime. */
export class KwebTaskError extends KmapError {
  constructor(cause: unknown) {
    super("internal", "the Kweb manager failed while applying a command", { cause });
  }
}

export interface RuntimeOptions {
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
}

/**
 * The supervised runtime that applies queued commands.
 *
 * It works strictly in durable submission order: only the first unfinished
 * record (the head) is ever taken. For each it marks the record Applying,
 * hands it to the Kweb manager (which applies off the event loop and checks
 * provenance first), and records the outcome. A writer outage returns the
 * head to Queued with exponential backoff bounded at 60 s — later records
 * wait behind it, so order is preserved — while invalid input, missing
 * nodes and stale revisions become terminal Failed records and the runtime
 * moves on. A new submission wakes it at once.
 *
 * `run()` is the future the application supervises: it resolves when
 * `stop()` is called and rejects when SQLite or the manager fails; the
 * application then reports the core as not serving and exits so that a
 * restart recovers.
 */
export class CommandRuntime {
  readonly #store: CommandStore;
  readonly #manager: KwebManager;
  readonly #feed: ChangeFeed;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #pause: PausePoints;
  readonly #stopping = new AbortController();
  #woken = false;
  #wakeWaiter: (() => void) | undefined;
  #running: Promise<void> | undefined;

  constructor(store: CommandStore, manager: KwebManager, feed: ChangeFeed, options: RuntimeOptions = {}) {
    this.#store = store;
    this.#manager = manager;
    this.#feed = feed;
    this.#clock = options.clock ?? systemClock;
    this.#log = options.logger ?? silentLogger;
    this.#pause = options.pausePoints ?? noPausePoints;
  }

  /** Starts the runtime once the manager is ready; the same promise on every call. */
  run(): Promise<void> {
    if (this.#running === undefined) {
      const failure = this.#manager.failure;
      this.#running =
        failure === undefined
          ? this.#loop()
          : Promise.race([
              this.#loop(),
              // A manager that fails while the runtime is idle ends it too.
              failure.then((error) => {
                if (this.stopped) return;
                this.#stopping.abort();
                this.#wakeWaiter?.();
                throw new KwebTaskError(error);
              }),
            ]);
    }
    return this.#running;
  }

  /** Wakes an idle runtime (a record was queued). */
  wake(): void {
    this.#woken = true;
    this.#wakeWaiter?.();
  }

  /** Stops after the record being applied, if any; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.#stopping.abort();
    this.#wakeWaiter?.();
    await this.#running?.catch(() => {});
  }

  get stopped(): boolean {
    return this.#stopping.signal.aborted;
  }

  async #loop(): Promise<void> {
    await this.#manager.ready();
    while (!this.stopped) {
      this.#woken = false;
      const head = this.#store.head();
      if (head === undefined) {
        await this.#idle(undefined);
        continue;
      }
      const dueIn = (head.nextAttemptAt ?? 0) - this.#clock.now();
      if (dueIn > 0) {
        await this.#idle(dueIn);
        continue;
      }
      await this.#apply(head);
    }
  }

  /** Waits for a wake-up, a stop, or (when given) `ms` on the clock. */
  async #idle(ms: number | undefined): Promise<void> {
    if (this.#woken || this.stopped) return;
    const interrupt = new AbortController();
    const woken = new Promise<void>((resolve) => (this.#wakeWaiter = resolve));
    const waits: Promise<void>[] = [woken];
    if (ms !== undefined) waits.push(this.#clock.sleep(ms, interrupt.signal));
    await Promise.race(waits);
    interrupt.abort();
    this.#wakeWaiter = undefined;
  }

  #record(event: CommandEvent): void {
    this.#feed.publish(event);
  }

  async #apply(head: CommandRecord): Promise<void> {
    const id = head.submission.idempotencyId;
    const attempts = head.attempts + 1;
    this.#record(this.#store.markApplying(head.sequence, attempts, this.#clock.now()));
    this.#pause.reached("after-applying", id);
    let outcome;
    try {
      outcome = await this.#manager.apply({
        idempotencyId: id,
        command: head.submission.command,
        expectedTransactionIds: head.submission.expectedTransactionIds,
      });
    } catch (error) {
      if (!(error instanceof WriterUnavailableError)) throw new KwebTaskError(error);
      const now = this.#clock.now();
      const delay = retryDelayMs(attempts);
      this.#record(this.#store.markRetry(head.sequence, now + delay, { code: "writer_unavailable", message: error.message }, now));
      this.#log.warn("the Kweb writer is unavailable; the command will be retried", { sequence: head.sequence, attempts, retryInMs: delay });
      return;
    }
    if (outcome.kind === "committed") {
      this.#pause.reached("after-kweb-commit", id);
      this.#record(this.#store.markCommitted(head.sequence, outcome.transactionId, outcome.createdNodeId, this.#clock.now()));
    } else {
      this.#record(this.#store.markFailed(head.sequence, { code: outcome.code, message: outcome.message }, this.#clock.now()));
    }
    this.#pause.reached("between-records", id);
  }
}
