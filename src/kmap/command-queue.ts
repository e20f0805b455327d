import type { Clock } from "./clock.js";
import type { ChangeFeed } from "./change-feed.js";
import type { CommandEvent, CommandRecord, CommandState } from "./command-record.js";
import { KmapError } from "./errors.js";
import type { CommandStore } from "./command-store.js";
import { validateSubmission, type Submission } from "./submission.js";

/** What `submit` returns. */
export interface SubmitResult {
  readonly record: CommandRecord;
  /** True when an identical earlier submission was returned. */
  readonly existing: boolean;
  /** The change-log position of the record's `queued` event. */
  readonly position: number;
}

/** A validated submission waiting for the next group commit. */
interface PendingSubmission {
  readonly idempotencyId: string;
  readonly canonical: string;
  readonly resolve: (result: SubmitResult) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The single submission queue for administrator Kmap commands (the
 * specification's "command lane").
 *
 * `submit` validates, commits a Queued record to SQLite and only then wakes
 * the runtime and answers; an exact repeat returns the original record and
 * a reuse of the id for different input is a conflict. Submissions that
 * arrive in the same turn of the event loop share one SQLite transaction
 * (group commit): each is still its own record, answered only after the
 * commit, but the group pays one fsync — which keeps the main thread free
 * for the runtime under load. `snapshot` returns every durable record in
 * submission order; `page` and `watch` read the same table and change log,
 * so callers need no second status store.
 */
export class CommandQueue {
  #pending: PendingSubmission[] = [];

  constructor(
    private readonly store: CommandStore,
    private readonly feed: ChangeFeed,
    private readonly clock: Clock,
    private readonly wakeRuntime: () => void,
  ) {}

  submit(submission: Submission): Promise<SubmitResult> {
    let canonical: string;
    try {
      canonical = validateSubmission(submission);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      if (this.#pending.length === 0) setImmediate(() => this.#commitPending());
      this.#pending.push({ idempotencyId: submission.idempotencyId, canonical, resolve, reject });
    });
  }

  #commitPending(): void {
    const group = this.#pending.splice(0);
    let results;
    try {
      results = this.store.insertQueued(group, this.clock.now());
    } catch (error) {
      for (const item of group) item.reject(error);
      return;
    }
    results.forEach((result, i) => {
      const item = group[i]!;
      if ("created" in result) {
        this.feed.publish(result.created);
        item.resolve({ record: result.created.record, existing: false, position: result.created.position });
      } else if (result.canonical !== item.canonical) {
        item.reject(new KmapError("conflict", `idempotency_id ${item.idempotencyId} was already used for a different submission`));
      } else {
        item.resolve({ record: result.existing, existing: true, position: this.store.queuedPosition(result.existing.sequence) });
      }
    });
    if (results.some((r) => "created" in r)) this.wakeRuntime();
  }

  /** Every durable record, in submission order. */
  snapshot(): CommandRecord[] {
    return this.store.all();
  }

  get(idempotencyId: string): CommandRecord | undefined {
    return this.store.get(idempotencyId);
  }

  /** Up to `limit` records after `afterSequence`, optionally only in `state`. */
  page(afterSequence: number, limit: number, state?: CommandState): CommandRecord[] {
    return this.store.page(afterSequence, limit, state);
  }

  /**
   * Every change after `afterPosition` from the durable change log, then each
   * new change as it happens, until `signal` aborts. Optionally only the
   * changes of one command.
   */
  async *watch(options: { afterPosition: number; idempotencyId?: string | undefined; signal: AbortSignal }): AsyncGenerator<CommandEvent> {
    let position = options.afterPosition;
    while (!options.signal.aborted) {
      const version = this.feed.version;
      const events = this.feed.recentAfter(position, options.idempotencyId) ?? this.store.eventsAfter(position, 256, options.idempotencyId);
      for (const event of events) {
        yield event;
        position = event.position;
        if (options.signal.aborted) return;
      }
      if (events.length === 0) await this.feed.waitForChange(version, options.signal);
    }
  }
}
