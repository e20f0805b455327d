import type { Clock } from "./clock.js";
import type { ChangeFeed } from "./change-feed.js";
import type { CommandEvent, CommandRecord, CommandState } from "./command-record.js";
import { KmapError } from "./errors.js";
import type { LaneStore } from "./lane-store.js";
import { validateSubmission, type Submission } from "./submission.js";

/** What `submit` returns. */
export interface SubmitResult {
  readonly record: CommandRecord;
  /** True when an identical earlier submission was returned. */
  readonly existing: boolean;
  /** The change-log position of the record's `queued` event. */
  readonly position: number;
}

/**
 * The single submission lane for administrator Kmap commands.
 *
 * `submit` validates, commits a Queued record to SQLite and only then wakes
 * the runtime; an exact repeat returns the original record and a reuse of
 * the id for different input is a conflict. `snapshot` returns every
 * durable record in submission order; `page` and `watch` read the same
 * table and change log, so callers need no second status store.
 */
export class CommandLane {
  constructor(
    private readonly store: LaneStore,
    private readonly feed: ChangeFeed,
    private readonly clock: Clock,
    private readonly wakeRuntime: () => void,
  ) {}

  submit(submission: Submission): SubmitResult {
    const canonical = validateSubmission(submission);
    const result = this.store.insertQueued(submission.idempotencyId, canonical, this.clock.now());
    if ("existing" in result) {
      if (result.canonical !== canonical) {
        throw new KmapError("conflict", `idempotency_id ${submission.idempotencyId} was already used for a different submission`);
      }
      return { record: result.existing, existing: true, position: this.store.queuedPosition(result.existing.sequence) };
    }
    this.feed.publish(result.created);
    this.wakeRuntime();
    return { record: result.created.record, existing: false, position: result.created.position };
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
      const events = this.store.eventsAfter(position, 256, options.idempotencyId);
      for (const event of events) {
        yield event;
        position = event.position;
      }
      if (events.length === 0) await this.feed.waitForChange(version, options.signal);
    }
  }
}
