import Database from "better-sqlite3";
import type { Database as SqliteDatabase, Statement } from "better-sqlite3";
import type { CommandEvent, CommandRecord, CommandState } from "./command-record.js";
import { eventColumns, recordColumns, toEvent, toRecord, type CommandRow, type EventRow } from "./command-rows.js";
import { CommandStoreError } from "./command-store.js";
import { KmapBusyError, KmapError, PositionPrunedError } from "./errors.js";
import { isLockContention } from "./kweb/sqlite-errors.js";

/**
 * Reads of the command lane for callers (GetCommand, ListCommands,
 * WatchCommands replays), over a read-only connection of their own that
 * never waits for a lock: busy_timeout is 0, so a read that meets a lock
 * (another process holding the file in exclusive mode, a recovery in
 * progress) fails at once with KmapBusyError instead of blocking the
 * thread it runs on — the server's event loop. `retryWhileBusy` retries such
 * a read asynchronously. WAL readers do not wait for writers, so ordinary
 * writes, the lane's own included, never get in the way.
 *
 * Each method reads one snapshot (one read transaction). Open it after the
 * writer (CommandStore) has created the file.
 */
export class CommandReader {
  readonly #db: SqliteDatabase;
  readonly #statements: {
    byId: Statement<[string], CommandRow>;
    all: Statement<[], CommandRow>;
    page: Statement<[number, string | null, string | null, number], CommandRow>;
    eventsAfter: Statement<[number, number, number], EventRow>;
    eventsAfterFor: Statement<[number, number, string, number], EventRow>;
    oldest: Statement<[], { position: number | null }>;
    queuedPositionOf: Statement<[string], { position: number | null; sequence: number }>;
  };

  constructor(path: string) {
    try {
      this.#db = new Database(path, { readonly: true, fileMustExist: true, timeout: 0 });
      this.#db.pragma("busy_timeout = 0");
    } catch (error) {
      throw new CommandStoreError("opening it for reading", error);
    }
    const db = this.#db;
    this.#statements = {
      byId: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.idempotency_id = ?`),
      all: db.prepare(`SELECT ${recordColumns} FROM commands c ORDER BY c.sequence`),
      page: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.sequence > ? AND (? IS NULL OR c.state = ?) ORDER BY c.sequence LIMIT ?`),
      eventsAfter: db.prepare(
        `SELECT ${eventColumns} FROM command_events e JOIN commands c ON c.sequence = e.sequence WHERE e.position > ? AND e.position <= ? ORDER BY e.position LIMIT ?`,
      ),
      eventsAfterFor: db.prepare(
        `SELECT ${eventColumns} FROM command_events e JOIN commands c ON c.sequence = e.sequence
         WHERE e.position > ? AND e.position <= ? AND c.idempotency_id = ? ORDER BY e.position LIMIT ?`,
      ),
      oldest: db.prepare("SELECT min(position) AS position FROM command_events"),
      queuedPositionOf: db.prepare(
        "SELECT c.sequence, (SELECT e.position FROM command_events e WHERE e.sequence = c.sequence AND e.kind = 'queued') AS position FROM commands c WHERE c.idempotency_id = ?",
      ),
    };
  }

  /** Runs a read as one snapshot; a lock held elsewhere becomes KmapBusyError, any other failure CommandStoreError. */
  #read<T>(action: string, read: () => T): T {
    try {
      return this.#db.transaction(read).deferred();
    } catch (error) {
      if (error instanceof KmapError) throw error;
      if (isLockContention(error)) throw new KmapBusyError("the command lane database", { cause: error });
      throw new CommandStoreError(action, error);
    }
  }

  get(idempotencyId: string): CommandRecord | undefined {
    return this.#read("reading a record", () => {
      const row = this.#statements.byId.get(idempotencyId);
      return row ? toRecord(row) : undefined;
    });
  }

  /** Every record in submission order. */
  all(): CommandRecord[] {
    return this.#read("reading records", () => this.#statements.all.all().map(toRecord));
  }

  /** Records after a sequence, optionally in one state, in submission order. */
  page(afterSequence: number, limit: number, state: CommandState | undefined): CommandRecord[] {
    return this.#read("reading records", () => this.#statements.page.all(afterSequence, state ?? null, state ?? null, limit).map(toRecord));
  }

  /**
   * Up to `limit` change-log entries after `position` and at most `upTo`
   * (the newest durable position), optionally of one command, oldest first;
   * `scannedThrough` is the position the caller has now seen everything up
   * to (`upTo` when fewer than `limit` entries matched).
   *
   * Throws PositionPrunedError when entries after `position` have been
   * pruned: for every watch when the log no longer starts right after
   * `position`, and for a watch of one command only when that command's own
   * first change is gone (a command submitted later, or whose changes are all
   * still held, has lost nothing).
   */
  eventsAfter(position: number, limit: number, idempotencyId: string | undefined, upTo: number): { events: CommandEvent[]; scannedThrough: number } {
    return this.#read("reading the change log", () => {
      const oldest = this.#statements.oldest.get()?.position ?? null;
      if (oldest !== null && position < oldest - 1) {
        if (idempotencyId === undefined) throw new PositionPrunedError(position, oldest);
        const own = this.#statements.queuedPositionOf.get(idempotencyId);
        if (own !== undefined && own.position === null) throw new PositionPrunedError(position, oldest);
      }
      const rows =
        idempotencyId === undefined
          ? this.#statements.eventsAfter.all(position, upTo, limit)
          : this.#statements.eventsAfterFor.all(position, upTo, idempotencyId, limit);
      const events = rows.map(toEvent);
      return { events, scannedThrough: rows.length < limit ? Math.max(position, upTo) : events[events.length - 1]!.position };
    });
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }
}

/**
 * Runs a non-blocking read, retrying asynchronously while it fails with
 * KmapBusyError: 1 ms, doubling to 100 ms between attempts, for at most
 * `budgetMs` (default 5 s, the lane's own busy timeout), after which the
 * KmapBusyError stands (`unavailable`). Only the caller waits; the event loop
 * keeps serving everyone else. Stops early, rethrowing, when `signal` aborts.
 */
export async function retryWhileBusy<T>(read: () => T, options: { signal?: AbortSignal; budgetMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (options.budgetMs ?? 5_000);
  let delay = 1;
  for (;;) {
    try {
      return read();
    } catch (error) {
      if (!(error instanceof KmapBusyError) || Date.now() + delay > deadline || options.signal?.aborted) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(100, delay * 2);
  }
}
