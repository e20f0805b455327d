import { performance } from "node:perf_hooks";
import { silentLogger, type Logger } from "../log/logger.js";
import { systemClock, type Clock } from "./clock.js";
import type { CommandRecord } from "./command-record.js";
import { toRecord } from "./command-rows.js";
import type { CommandStore, Durability } from "./command-store.js";
import type { DurableChanges } from "./durable-changes.js";
import { KmapError } from "./errors.js";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type GroupApply, type KwebManager } from "./kweb-manager.js";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { retryDelayMs } from "./retry-backoff.js";

/** The Kweb manager failed in a way that is not a writer outage. Ends the runtime. */
export class KwebTaskError extends KmapError {
  override readonly name: string = "KwebTaskError";

  constructor(cause: unknown) {
    super("internal", "the Kweb manager failed while applying a command", { cause });
  }
}

/** The default number of change-log entries kept (docs/kmap.md, "The change log"). */
export const DEFAULT_EVENT_RETENTION = 1_000_000;

/** How many change-log entries one pruning transaction deletes at most. */
const PRUNE_ROWS_PER_WRITE = 5_000;

export interface RuntimeOptions {
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
  /** How many change-log entries to keep; older ones are pruned. Default 1,000,000. */
  readonly eventRetention?: number;
}

/** What the application supervises: the future of the specification's runtime. */
export interface LaneRuntime {
  /** Resolves when stopped; rejects when SQLite or the Kweb manager fails. The same promise on every call. */
  run(): Promise<void>;
  /** Stops after the record being applied, if any; resolves when the loop has ended. */
  stop(): Promise<void>;
}

/** Lets the event loop run everything that is waiting (I/O, messages, timers) before the next record. */
const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * How long the runtime works through a backlog before it yields to the
 * event loop. Long enough that the submissions arriving meanwhile are
 * committed as one group (one fsync for all of them) rather than one group
 * per command, short enough that a submission waits at most this long.
 */
const SLICE_MS = 10;

/** The most commands one group applies with one Kweb fsync (see #attemptGroup). */
export const GROUP_MAX_COMMANDS = 64;

/**
 * How long a group keeps taking further commands, in ms of apply work: past
 * GROUP_MIN_COMMANDS, a group ends at whichever of this and
 * GROUP_MAX_COMMANDS comes first, so a submission waiting for the worker's
 * next turn waits about this long.
 */
const GROUP_MS = 8;

/**
 * How many commands a group takes (when that many are queued and due)
 * however long they take: even on a starved CPU, where 8 ms pass in one
 * apply, a backlog still shares its fsyncs. Small enough to cost a
 * submission little more than one turn.
 */
export const GROUP_MIN_COMMANDS = 8;

/** How many records a group reads from the lane at a time while it grows. */
const GROUP_READ_PAGE = 16;

/** What the manager needs to apply a record. */
const requestOf = (record: CommandRecord): ApplyRequest => ({
  idempotencyId: record.submission.idempotencyId,
  command: record.submission.command,
  expectedTransactionIds: record.submission.expectedTransactionIds,
});

/**
 * The supervised runtime that applies queued commands.
 *
 * It works strictly in durable submission order: only the first unfinished
 * record (the head) is ever taken. For each it marks the record Applying,
 * hands it to the Kweb manager (which checks provenance first), and records
 * the outcome. A writer outage returns the head to Queued with exponential
 * backoff bounded at 60 s — later records wait behind it, so order is
 * preserved — while invalid input, missing nodes and stale revisions become
 * terminal Failed records and the runtime moves on. A new submission wakes
 * it at once.
 *
 * One record, one Kweb transaction, one outcome — but the lane's own writes
 * are shared where they can be: when a command commits and its successor is
 * due, "N committed" and "N+1 applying" are one SQLite transaction; and with
 * a manager that offers group apply, a backlog is applied in groups whose
 * Kweb transactions share one fsync (#attemptGroup). Which
 * writes are fsync'd is decided here (docs/kmap.md, "What is fsync'd"):
 * Applying marks and Committed outcomes followed at once by more work are
 * `normal` (recovery rebuilds them exactly through provenance); a Failed
 * outcome, a retry, and the last write before the runtime may wait are
 * `full`. Between records the runtime yields to the event loop, so whatever
 * shares its thread (submissions in the worker, requests on the main
 * thread) is never starved by a backlog, and does not starve it either.
 *
 * The same runtime runs wherever its store and manager are: in the Kweb
 * worker thread for the embedded Kweb (the server's default), or on the
 * caller's thread for a library user's own KwebManager.
 *
 * `run()` is the future the application supervises: it resolves when
 * `stop()` is called and rejects when SQLite or the manager fails; the
 * application then reports the core as not serving and exits so that a
 * restart recovers.
 */
export class CommandRuntime implements LaneRuntime {
  readonly #store: CommandStore;
  readonly #manager: KwebManager;
  readonly #changes: DurableChanges;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #pause: PausePoints;
  readonly #retention: number;
  readonly #stopping = new AbortController();
  #woken = false;
  #wakeWaiter: (() => void) | undefined;
  #running: Promise<void> | undefined;

  constructor(store: CommandStore, manager: KwebManager, changes: DurableChanges, options: RuntimeOptions = {}) {
    this.#store = store;
    this.#manager = manager;
    this.#changes = changes;
    this.#clock = options.clock ?? systemClock;
    this.#log = options.logger ?? silentLogger;
    this.#pause = options.pausePoints ?? noPausePoints;
    this.#retention = Math.max(1, Math.floor(options.eventRetention ?? DEFAULT_EVENT_RETENTION));
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

  /**
   * Prunes the change log when it holds enough beyond the retention (a
   * bounded delete per call). Called by whoever writes to the store, after
   * a write.
   */
  maintain(): void {
    if (this.#store.pruneDue(this.#retention)) {
      if (this.#store.prune(this.#retention, PRUNE_ROWS_PER_WRITE) > 0) this.#changes.countersChanged();
    }
  }

  async #loop(): Promise<void> {
    await this.#manager.ready();
    /** A record this loop already marked Applying (alone or with the previous outcome). */
    let taken: CommandRecord | undefined;
    let sliceStarted = performance.now();
    for (;;) {
      if (taken === undefined) {
        if (this.stopped) return;
        this.#woken = false;
        const head = this.#store.head();
        if (head === undefined) {
          await this.#idle(undefined);
          sliceStarted = performance.now();
          continue;
        }
        if (head.state !== "queued") throw new KmapError("internal", `command ${head.sequence} is ${head.state} although no attempt is in progress`);
        const dueIn = (head.nextAttemptAt ?? 0) - this.#clock.now();
        if (dueIn > 0) {
          await this.#idle(dueIn);
          continue;
        }
        taken = this.#take(head);
      }
      taken = await this.#attempt(taken);
      this.maintain();
      if (taken === undefined || performance.now() - sliceStarted >= SLICE_MS) {
        await yieldToEventLoop();
        sliceStarted = performance.now();
      }
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

  /** `normal` unless held changes have waited long enough (see DurableChanges). */
  #continuing(): Durability {
    return this.#changes.syncDue ? "full" : "normal";
  }

  /** Marks the head Applying on its own (the runtime was idle or the previous outcome took nothing). */
  #take(head: CommandRecord): CommandRecord {
    const durability = this.#continuing();
    const row = this.#store.markApplying(head.sequence, head.attempts + 1, this.#clock.now(), durability);
    this.#changes.committed([row], durability);
    const taken = toRecord(row);
    this.#pause.reached("after-applying", taken.submission.idempotencyId);
    return taken;
  }

  /**
   * Hands an Applying record to the manager and records the outcome.
   * Returns the next record when it was taken in the same transaction.
   * With a manager that offers group apply, the record leads a group.
   */
  async #attempt(record: CommandRecord): Promise<CommandRecord | undefined> {
    const group = this.#manager.groupApply;
    if (group !== undefined) return this.#attemptGroup(record, group);
    let outcome: ApplyOutcome;
    try {
      outcome = await this.#manager.apply(requestOf(record));
    } catch (error) {
      if (!(error instanceof WriterUnavailableError)) throw new KwebTaskError(error);
      this.#scheduleRetry(record, error);
      return undefined;
    }
    if (outcome.kind === "rejected") {
      this.#recordRejection(record, outcome);
      return undefined;
    }
    return this.#recordCommitted([record], [outcome]);
  }

  /**
   * Group apply: `head` (already Applying) and the Queued, due records that
   * follow it in submission order, applied in one worker turn — each in
   * its own Kweb transaction, as its own signed transaction with its own
   * provenance — with ONE Kweb fsync for all of them.
   *
   * The order of the writes, which is what makes every crash point safe
   * (docs/kmap.md, "Group apply"):
   * 1. the head is Applying (marked alone or with the previous outcome);
   *    its Kweb transaction begins (the write lock: a writer outage ends
   *    the attempt here, with only the head to return to Queued), applies
   *    it and commits without an fsync;
   * 2. while the group's budget lasts, the next record gets a Kweb
   *    transaction of its own, committed without an fsync; its lane record
   *    stays Queued. A record that is rejected (or meets a lock) is rolled
   *    back and ends the group: it is taken next, alone, and recorded
   *    Failed before anything after it is applied;
   * 3. one fsync of the Kweb's WAL makes every member's transaction durable;
   * 4. one lane transaction records the head Committed, every further
   *    member Applying and then Committed, and takes the next record when
   *    it is due.
   * So only the head is ever Applying, as when commands are applied one at
   * a time, and no record is Committed before its Kweb transaction is
   * durable. A crash before 4 leaves the head Applying and the further
   * members Queued, each either not in Kweb or committed there (a power
   * failure can take back only a suffix of the unsynced commits): recovery
   * returns the head to Queued, and applying them all again, in order,
   * answers those in Kweb from history by provenance and applies the
   * others. Either way each is applied exactly once.
   */
  #attemptGroup(head: CommandRecord, group: GroupApply): CommandRecord | undefined {
    const members: CommandRecord[] = [head];
    const store = this.#store;
    const dueAt = this.#clock.now();
    const stopped = () => this.stopped;
    function* requests(): Generator<ApplyRequest> {
      yield requestOf(head);
      let after = head.sequence;
      while (members.length < GROUP_MAX_COMMANDS && !stopped()) {
        const page = store.unfinishedAfter(after, Math.min(GROUP_READ_PAGE, GROUP_MAX_COMMANDS - members.length));
        for (const record of page) {
          // Strict order: the group ends at the first record that is not Queued and due.
          if (record.state !== "queued" || (record.nextAttemptAt ?? 0) > dueAt || stopped()) return;
          members.push(record);
          yield requestOf(record);
        }
        if (page.length === 0) return;
        after = page[page.length - 1]!.sequence;
      }
    }
    const committedOne = (index: number) => {
      const record = members[index];
      if (record !== undefined) this.#pause.reached("group-kweb-commit", record.submission.idempotencyId);
    };

    let outcomes: ApplyOutcome[];
    try {
      outcomes = group.apply(requests(), { until: performance.now() + GROUP_MS, atLeast: GROUP_MIN_COMMANDS, afterCommit: committedOne });
    } catch (error) {
      if (!(error instanceof WriterUnavailableError)) throw new KwebTaskError(error);
      this.#scheduleRetry(head, error);
      return undefined;
    }
    const first = outcomes[0];
    if (first === undefined || outcomes.length > members.length) {
      throw new KwebTaskError(new Error("the Kweb manager returned outcomes that do not match the group"));
    }
    if (first.kind === "rejected") {
      this.#recordRejection(head, first);
      return undefined;
    }
    return this.#recordCommitted(members.slice(0, outcomes.length), outcomes);
  }

  /** A writer outage: the record goes back to Queued with backoff (fsync'd: the runtime waits after it). */
  #scheduleRetry(record: CommandRecord, error: WriterUnavailableError): void {
    const now = this.#clock.now();
    const delay = retryDelayMs(record.attempts);
    const { rows } = this.#store.recordOutcome(
      record.sequence,
      { kind: "retry", nextAttemptAt: now + delay, error: { code: "writer_unavailable", message: error.message } },
      now,
      { durability: "full" },
    );
    this.#changes.committed(rows, "full");
    this.#log.warn("the Kweb writer is unavailable; the command will be retried", { sequence: record.sequence, attempts: record.attempts, retryInMs: delay });
  }

  /**
   * A terminal rejection. It leaves no trace in Kweb, and applying the
   * command again after later commands could end differently: it is
   * durable before anything else happens.
   */
  #recordRejection(record: CommandRecord, outcome: Extract<ApplyOutcome, { kind: "rejected" }>): void {
    const { rows } = this.#store.recordOutcome(record.sequence, { kind: "failed", error: { code: outcome.code, message: outcome.message } }, this.#clock.now(), {
      durability: "full",
    });
    this.#changes.committed(rows, "full");
    this.#pause.reached("between-records", record.submission.idempotencyId);
  }

  /**
   * Records committed outcomes in one lane transaction: `records[0]` is the
   * Applying head; the others (a group's further members, still Queued)
   * are marked Applying and recorded Committed in that same transaction.
   * Takes the next record in the same transaction when it is due. Returns
   * the record taken, if any.
   */
  #recordCommitted(records: readonly CommandRecord[], outcomes: readonly ApplyOutcome[]): CommandRecord | undefined {
    // The head is the one record Applying while its Kweb transaction (and its group's) is durable and unrecorded.
    this.#pause.reached("after-kweb-commit", records[0]!.submission.idempotencyId);
    const now = this.#clock.now();
    // Strict order: only the very next unfinished record may be taken, and
    // only when it is due. A stop takes nothing more.
    const next = this.stopped ? undefined : this.#dueSuccessor(records[records.length - 1]!.sequence, now);
    const durability = next ? this.#continuing() : "full";
    const result = this.#store.recordOutcomes(
      records.map((record, i) => {
        const outcome = outcomes[i]!;
        if (outcome.kind !== "committed") throw new KmapError("internal", `command ${record.sequence} was not committed`);
        return {
          sequence: record.sequence,
          ...(i > 0 ? { markApplying: record.attempts + 1 } : {}),
          outcome: { kind: "committed" as const, transactionId: outcome.transactionId, createdNodeId: outcome.createdNodeId },
        };
      }),
      now,
      { durability, takeNext: next },
    );
    this.#changes.committed(result.rows, durability);
    for (const record of records) this.#pause.reached("between-records", record.submission.idempotencyId);
    if (result.next === undefined) return undefined;
    const nextId = result.next.submission.idempotencyId;
    this.#pause.reached("after-commit-and-applying", nextId);
    this.#pause.reached("after-applying", nextId);
    return result.next;
  }

  /** The record after `sequence` in submission order when it is Queued and due at `now`. */
  #dueSuccessor(sequence: number, now: number): CommandRecord | undefined {
    const next = this.#store.nextAfter(sequence);
    return next !== undefined && next.state === "queued" && (next.nextAttemptAt ?? 0) <= now ? next : undefined;
  }
}
