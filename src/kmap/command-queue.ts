import { silentLogger, type Logger } from "../log/logger.js";
import type { ChangeFeed } from "./change-feed.js";
import type { CommandReader } from "./command-reader.js";
import type { CommandEvent, CommandRecord, CommandState } from "./command-record.js";
import { toRecord, type CommandRow, type EventRow } from "./command-rows.js";
import { BacklogFullError, KmapBusyError, KmapError } from "./errors.js";
import { validateSubmission, type Submission } from "./submission.js";

/**
 * The queue's operations take one params object each (`submit` takes the
 * Submission itself) and, when they can wait, the call's signal after it.
 */
export interface GetCommandParams {
  readonly idempotencyId: string;
}

export interface PageParams {
  /** Start after this submission sequence (0: from the first). */
  readonly afterSequence: number;
  /** The most records to return. */
  readonly limit: number;
  /** Only records in this state. */
  readonly state?: CommandState | undefined;
}

export interface WatchParams {
  /** Every change after this change-log position (0: from the oldest held). */
  readonly afterPosition: number;
  /** Only the changes of this command. */
  readonly idempotencyId?: string | undefined;
}

/** What `submit` returns. */
export interface SubmitResult {
  readonly record: CommandRecord;
  /** True when an identical earlier submission was returned. */
  readonly existing: boolean;
  /** The change-log position of the record's `queued` event (0 when that change has been pruned). */
  readonly position: number;
}

/** The lane's backlog and change-log range, as the writer last reported them. */
export interface LaneStatus {
  /** Unfinished (Queued or Applying) commands. */
  readonly pending: number;
  /** The most unfinished commands the lane accepts (`--kmap-max-pending`). */
  readonly maxPending: number;
  /** The oldest change the change log still holds. */
  readonly oldestPosition: number;
  /** The newest durable change. */
  readonly latestPosition: number;
}

/** One validated submission on its way to the writer. */
export interface QueuedItem {
  readonly idempotencyId: string;
  /** The canonical submission text (what is stored and compared). */
  readonly canonical: string;
}

/** What the writer did with one item (rows, as SQLite returned them). */
export type WrittenItem =
  | { readonly created: EventRow }
  | { readonly existing: CommandRow; readonly queuedPosition: number }
  | { readonly refused: "backlog_full" };

/**
 * Where submissions are committed: one `full` SQLite transaction per group,
 * on whichever thread owns the lane's writer connection. The group's
 * changes reach the feed (through DurableChanges) before the promise
 * resolves.
 */
export interface SubmissionWriter {
  write(items: readonly QueuedItem[], maxPending: number): Promise<WrittenItem[]>;
}

/** A validated submission waiting for the next group commit. */
interface PendingSubmission extends QueuedItem {
  readonly resolve: (result: SubmitResult) => void;
  readonly reject: (error: unknown) => void;
}

export interface CommandQueueOptions {
  readonly reader: CommandReader;
  readonly feed: ChangeFeed;
  readonly writer: SubmissionWriter;
  /** The most unfinished commands; a new submission past it fails with BacklogFullError. */
  readonly maxPending: number;
  readonly logger?: Logger;
}

/** How many change-log entries a watcher reads between two turns of the event loop. */
export const WATCH_PAGE = 128;

/**
 * The single submission queue for administrator Kmap commands (the
 * specification's "command lane").
 *
 * `submit` validates, has the writer commit a Queued record durably, and
 * only then answers; an exact repeat returns the original record and a reuse
 * of the id for different input is a conflict. Submissions that arrive in
 * the same turn of the event loop go to the writer as one group and share
 * one SQLite transaction (group commit): each is still its own record,
 * answered only after the commit.
 *
 * The backlog is bounded: while `maxPending` commands are unfinished, a new
 * submission fails at once with BacklogFullError (`backlog_full`) — decided
 * here from the writer's last count, without waiting for the writer — and
 * nothing already accepted is touched. The writer checks again when it
 * commits, so the bound holds exactly.
 *
 * `get`, `page` and `snapshot` read the lane's own table over a read-only
 * connection that never waits for a lock (they throw KmapBusyError when one
 * is held; see retryWhileBusy); `watch` replays the change log in pages,
 * yielding to the event loop between them, and then follows the feed.
 */
export class CommandQueue {
  readonly #reader: CommandReader;
  readonly #feed: ChangeFeed;
  readonly #writer: SubmissionWriter;
  readonly #log: Logger;
  readonly #maxPending: number;
  #pending: PendingSubmission[] = [];
  /** Items handed to the writer and not answered yet: each may become one more unfinished command. */
  #inFlight = 0;
  #backlogFull = false;

  constructor(options: CommandQueueOptions) {
    this.#reader = options.reader;
    this.#feed = options.feed;
    this.#writer = options.writer;
    this.#log = options.logger ?? silentLogger;
    this.#maxPending = options.maxPending;
  }

  submit(submission: Submission): Promise<SubmitResult> {
    let canonical: string;
    try {
      canonical = validateSubmission(submission);
    } catch (error) {
      return Promise.reject(error);
    }
    const unfinished = this.#feed.counters.pending + this.#inFlight + this.#pending.length;
    if (unfinished >= this.#maxPending && !this.#mayExist(submission.idempotencyId)) {
      this.#noteBacklog(true);
      return Promise.reject(new BacklogFullError(this.#maxPending));
    }
    if (unfinished < this.#maxPending) this.#noteBacklog(false);
    return new Promise((resolve, reject) => {
      if (this.#pending.length === 0) setImmediate(() => this.#commitPending());
      this.#pending.push({ idempotencyId: submission.idempotencyId, canonical, resolve, reject });
    });
  }

  /** Whether a record with this id may already exist (then its submission is answered from it, full backlog or not). */
  #mayExist(idempotencyId: string): boolean {
    try {
      return this.#reader.get(idempotencyId) !== undefined;
    } catch (error) {
      // Cannot tell without waiting: let the writer decide.
      if (error instanceof KmapBusyError) return true;
      throw error;
    }
  }

  /** Logs when the backlog fills up and when it has room again (once each, not per refusal). */
  #noteBacklog(full: boolean): void {
    if (full === this.#backlogFull) return;
    this.#backlogFull = full;
    const fields = { pending: this.#feed.counters.pending, maxPending: this.#maxPending };
    if (full) this.#log.warn("the Kmap command backlog is full: new submissions are refused until commands finish", fields);
    else this.#log.info("the Kmap command backlog has room again", fields);
  }

  #commitPending(): void {
    const group = this.#pending.splice(0);
    this.#inFlight += group.length;
    const done = () => (this.#inFlight -= group.length);
    this.#writer.write(group, this.#maxPending).then(
      (results) => {
        done();
        results.forEach((result, i) => this.#answer(group[i]!, result));
      },
      (error: unknown) => {
        done();
        for (const item of group) item.reject(error);
      },
    );
  }

  #answer(item: PendingSubmission, result: WrittenItem): void {
    if ("created" in result) {
      item.resolve({ record: toRecord(result.created), existing: false, position: result.created.position });
    } else if ("refused" in result) {
      this.#noteBacklog(true);
      item.reject(new BacklogFullError(this.#maxPending));
    } else if (result.existing.submission !== item.canonical) {
      item.reject(new KmapError("conflict", `idempotency_id ${item.idempotencyId} was already used for a different submission`));
    } else {
      item.resolve({ record: toRecord(result.existing), existing: true, position: result.queuedPosition });
    }
  }

  /** The backlog and the change log's range. */
  status(): LaneStatus {
    const counters = this.#feed.counters;
    return { pending: counters.pending, maxPending: this.#maxPending, oldestPosition: counters.oldestPosition, latestPosition: counters.latestPosition };
  }

  /** Every durable record, in submission order. Throws KmapBusyError while a lock is held elsewhere. */
  snapshot(): CommandRecord[] {
    return this.#reader.all();
  }

  /** One record. Throws KmapBusyError while a lock is held elsewhere. */
  get({ idempotencyId }: GetCommandParams): CommandRecord | undefined {
    return this.#reader.get(idempotencyId);
  }

  /** Up to `limit` records after `afterSequence`, optionally only in `state`. Throws KmapBusyError while a lock is held elsewhere. */
  page({ afterSequence, limit, state }: PageParams): CommandRecord[] {
    return this.#reader.page(afterSequence, limit, state);
  }

  /**
   * Every change after `afterPosition` from the durable change log, then each
   * new change as it happens, until `signal` aborts. Optionally only the
   * changes of one command.
   *
   * History is read in pages of WATCH_PAGE entries with a turn of the event
   * loop between pages, so any number of replaying watchers delay other work
   * by at most a page each. Throws PositionPrunedError when the changes
   * after `afterPosition` are no longer all held.
   */
  async *watch(params: WatchParams, signal: AbortSignal): AsyncGenerator<CommandEvent> {
    const { idempotencyId } = params;
    let position = params.afterPosition;
    // A start before the oldest change still held is checked against the
    // log itself, even while memory still holds what was pruned, so that the
    // answer does not depend on what this process happens to remember.
    let fromLog = position < this.#feed.counters.oldestPosition - 1;
    while (!signal.aborted) {
      const version = this.#feed.version;
      const page = (fromLog ? undefined : this.#feed.recentAfter(position, idempotencyId, WATCH_PAGE)) ?? (await this.#readPage(position, idempotencyId, signal));
      fromLog = false;
      for (const event of page.events) {
        yield event;
        position = event.position;
        if (signal.aborted) return;
      }
      // Nothing else of interest up to here (a filtered watch skips the rest).
      position = Math.max(position, page.scannedThrough);
      if (page.events.length > 0) {
        await new Promise<void>((resolve) => setImmediate(resolve));
      } else if (position >= this.#feed.latestPosition) {
        await this.#feed.waitForChange(version, signal);
      }
    }
  }

  async #readPage(position: number, idempotencyId: string | undefined, signal: AbortSignal): Promise<{ events: CommandEvent[]; scannedThrough: number }> {
    for (let delay = 1; ; delay = Math.min(100, delay * 2)) {
      try {
        return this.#reader.eventsAfter(position, WATCH_PAGE, idempotencyId, this.#feed.latestPosition);
      } catch (error) {
        // A watch waits as long as it takes; only this watcher waits.
        if (!(error instanceof KmapBusyError) || signal.aborted) throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
