import Database from "better-sqlite3";
import type { Database as SqliteDatabase, Statement } from "better-sqlite3";
import { transitions, type CommandEvent, type CommandEventKind, type CommandFailure, type CommandRecord, type CommandState } from "./command-record.js";
import { KmapError } from "./errors.js";
import { parseSubmission } from "./submission.js";

/**
 * The command lane's storage: one SQLite file, authoritative for command
 * lifecycle state. WAL with `synchronous=FULL`, so a change is on disk
 * before any caller hears of it.
 *
 * Two tables: `commands` (one row per submission, in submission order) and
 * `command_events` (the change log: one row per change, written in the same
 * transaction as the change, so WatchCommands can replay from any position
 * after a restart). Every transition states the state it expects; a record
 * in another state is an invariant violation, never silently overwritten.
 *
 * Every write is an IMMEDIATE transaction: it takes the write lock before
 * reading, so another writer makes it wait up to the busy timeout instead
 * of failing at once on the read-to-write upgrade.
 *
 * SQLite's own error text can hold file paths, so failures become
 * CommandStoreError with a fixed message and the original as `cause`.
 */

/** A failure of the lane's SQLite database. The runtime ends on it. */
export class CommandStoreError extends KmapError {
  constructor(action: string, cause: unknown) {
    super("internal", `the command lane database failed while ${action}`, { cause });
  }
}

const SCHEMA_VERSION = 1;

interface CommandRow {
  sequence: number;
  idempotency_id: string;
  submission: string;
  state: CommandState;
  submitted_at: number;
  attempts: number;
  next_attempt_at: number | null;
  transaction_id: string | null;
  created_node_id: string | null;
  error_code: string | null;
  error_message: string | null;
  updated_at: number;
}

interface EventRow extends CommandRow {
  position: number;
  kind: CommandEventKind;
  changed_at: number;
}

/** The fields a transition sets, besides state and times. */
interface Change {
  readonly attempts?: number;
  readonly nextAttemptAt?: number | undefined;
  readonly transactionId?: string | undefined;
  readonly createdNodeId?: string | undefined;
  readonly error?: CommandFailure | undefined;
}

export class CommandStore {
  readonly #db: SqliteDatabase;
  readonly #statements: {
    byId: Statement<[string], CommandRow>;
    bySequence: Statement<[number], CommandRow>;
    all: Statement<[], CommandRow>;
    page: Statement<[number, string | null, string | null, number], CommandRow>;
    head: Statement<[], CommandRow>;
    insert: Statement<[string, string, number, number, number]>;
    update: Statement<[CommandState, number, number | null, string | null, string | null, string | null, string | null, number, number, CommandState]>;
    insertEvent: Statement<[CommandEventKind, number, number]>;
    applying: Statement<[], CommandRow>;
    eventsAfter: Statement<[number, number], EventRow>;
    eventsAfterFor: Statement<[number, string, number], EventRow>;
    queuedPosition: Statement<[number], { position: number }>;
  };

  constructor(path: string) {
    try {
      this.#db = new Database(path);
      this.#db.pragma("journal_mode = WAL");
      this.#db.pragma("synchronous = FULL");
      this.#db.pragma("foreign_keys = ON");
      this.#db.pragma("busy_timeout = 5000");
      this.#migrate();
    } catch (error) {
      if (error instanceof KmapError) throw error;
      throw new CommandStoreError("opening", error);
    }
    const columns = "c.sequence, c.idempotency_id, c.submission, c.state, c.submitted_at, c.attempts, c.next_attempt_at, c.transaction_id, c.created_node_id, c.error_code, c.error_message, c.updated_at";
    const eventColumns =
      "e.position, e.kind, e.changed_at, c.sequence, c.idempotency_id, c.submission, e.state, c.submitted_at, e.attempts, e.next_attempt_at, e.transaction_id, e.created_node_id, e.error_code, e.error_message, e.changed_at AS updated_at";
    const db = this.#db;
    this.#statements = {
      byId: db.prepare(`SELECT ${columns} FROM commands c WHERE c.idempotency_id = ?`),
      bySequence: db.prepare(`SELECT ${columns} FROM commands c WHERE c.sequence = ?`),
      all: db.prepare(`SELECT ${columns} FROM commands c ORDER BY c.sequence`),
      page: db.prepare(`SELECT ${columns} FROM commands c WHERE c.sequence > ? AND (? IS NULL OR c.state = ?) ORDER BY c.sequence LIMIT ?`),
      head: db.prepare(`SELECT ${columns} FROM commands c WHERE c.state IN ('queued', 'applying') ORDER BY c.sequence LIMIT 1`),
      insert: db.prepare(
        "INSERT INTO commands (idempotency_id, submission, state, submitted_at, attempts, next_attempt_at, updated_at) VALUES (?, ?, 'queued', ?, 0, ?, ?)",
      ),
      update: db.prepare(
        `UPDATE commands SET state = ?, attempts = ?, next_attempt_at = ?, transaction_id = ?, created_node_id = ?, error_code = ?, error_message = ?, updated_at = ?
         WHERE sequence = ? AND state = ?`,
      ),
      insertEvent: db.prepare(
        `INSERT INTO command_events (sequence, kind, state, attempts, next_attempt_at, transaction_id, created_node_id, error_code, error_message, changed_at)
         SELECT sequence, ?, state, attempts, next_attempt_at, transaction_id, created_node_id, error_code, error_message, ? FROM commands WHERE sequence = ?`,
      ),
      applying: db.prepare(`SELECT ${columns} FROM commands c WHERE c.state = 'applying' ORDER BY c.sequence`),
      eventsAfter: db.prepare(`SELECT ${eventColumns} FROM command_events e JOIN commands c ON c.sequence = e.sequence WHERE e.position > ? ORDER BY e.position LIMIT ?`),
      eventsAfterFor: db.prepare(
        `SELECT ${eventColumns} FROM command_events e JOIN commands c ON c.sequence = e.sequence WHERE e.position > ? AND c.idempotency_id = ? ORDER BY e.position LIMIT ?`,
      ),
      queuedPosition: db.prepare("SELECT position FROM command_events WHERE sequence = ? AND kind = 'queued'"),
    };
  }

  #migrate(): void {
    const version = this.#db.pragma("user_version", { simple: true }) as number;
    if (version > SCHEMA_VERSION) {
      throw new KmapError("internal", `the command lane database has schema version ${version}; this Laneway understands up to ${SCHEMA_VERSION}`);
    }
    if (version === SCHEMA_VERSION) return;
    this.#db.exec(`
      BEGIN IMMEDIATE;
      CREATE TABLE commands (
        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_id TEXT NOT NULL UNIQUE,
        submission TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('queued', 'applying', 'committed', 'failed')),
        submitted_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at INTEGER,
        transaction_id TEXT,
        created_node_id TEXT,
        error_code TEXT,
        error_message TEXT,
        updated_at INTEGER NOT NULL
      );
      CREATE INDEX commands_unfinished ON commands (sequence) WHERE state IN ('queued', 'applying');
      CREATE TABLE command_events (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        sequence INTEGER NOT NULL REFERENCES commands (sequence),
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at INTEGER,
        transaction_id TEXT,
        created_node_id TEXT,
        error_code TEXT,
        error_message TEXT,
        changed_at INTEGER NOT NULL
      );
      CREATE INDEX command_events_by_sequence ON command_events (sequence, position);
      PRAGMA user_version = ${SCHEMA_VERSION};
      COMMIT;
    `);
  }

  #guard<T>(action: string, body: () => T): T {
    try {
      return body();
    } catch (error) {
      if (error instanceof KmapError) throw error;
      throw new CommandStoreError(action, error);
    }
  }

  /** Returns every Applying record to Queued, one `recovered` event each. */
  recoverApplying(now: number): CommandEvent[] {
    return this.#guard("recovering applying records", () =>
      this.#db.transaction(() => this.#statements.applying.all().map((row) => this.#transition(row.sequence, "recovered", now, { nextAttemptAt: now }))).immediate(),
    );
  }

  /**
   * Inserts Queued records, in the given order, in one transaction (one
   * fsync for the whole group), skipping ids that exist. For each item it
   * returns the new record's `queued` event, or the existing record and its
   * canonical text (the caller compares submissions). An id repeated within
   * the group finds its first occurrence.
   */
  insertQueued(
    items: readonly { readonly idempotencyId: string; readonly canonical: string }[],
    now: number,
  ): ({ created: CommandEvent } | { existing: CommandRecord; canonical: string })[] {
    return this.#guard("queueing commands", () =>
      this.#db
        .transaction(() =>
          items.map((item) => {
            const existing = this.#statements.byId.get(item.idempotencyId);
            if (existing) return { existing: toRecord(existing), canonical: existing.submission };
            const { lastInsertRowid } = this.#statements.insert.run(item.idempotencyId, item.canonical, now, now, now);
            return { created: this.#event(Number(lastInsertRowid), "queued", now) };
          }),
        )
        .immediate(),
    );
  }

  /** The position of a record's `queued` event. */
  queuedPosition(sequence: number): number {
    return this.#guard("reading the change log", () => this.#statements.queuedPosition.get(sequence)?.position ?? 0);
  }

  get(idempotencyId: string): CommandRecord | undefined {
    return this.#guard("reading a record", () => {
      const row = this.#statements.byId.get(idempotencyId);
      return row ? toRecord(row) : undefined;
    });
  }

  /** Every record in submission order. */
  all(): CommandRecord[] {
    return this.#guard("reading records", () => this.#statements.all.all().map(toRecord));
  }

  /** Records after a sequence, optionally in one state, in submission order. */
  page(afterSequence: number, limit: number, state: CommandState | undefined): CommandRecord[] {
    return this.#guard("reading records", () => this.#statements.page.all(afterSequence, state ?? null, state ?? null, limit).map(toRecord));
  }

  /** The first unfinished record in submission order: the only one the runtime may work on. */
  head(): CommandRecord | undefined {
    return this.#guard("reading the next record", () => {
      const row = this.#statements.head.get();
      return row ? toRecord(row) : undefined;
    });
  }

  markApplying(sequence: number, attempts: number, now: number): CommandEvent {
    return this.#guard("marking a record applying", () =>
      this.#db.transaction(() => this.#transition(sequence, "applying", now, { attempts, nextAttemptAt: undefined, error: undefined })).immediate(),
    );
  }

  markCommitted(sequence: number, transactionId: string, createdNodeId: string | undefined, now: number): CommandEvent {
    return this.#guard("recording a committed transaction", () =>
      this.#db.transaction(() => this.#transition(sequence, "committed", now, { transactionId, createdNodeId, error: undefined })).immediate(),
    );
  }

  markFailed(sequence: number, error: CommandFailure, now: number): CommandEvent {
    return this.#guard("recording a failure", () => this.#db.transaction(() => this.#transition(sequence, "failed", now, { error })).immediate());
  }

  markRetry(sequence: number, nextAttemptAt: number, error: CommandFailure, now: number): CommandEvent {
    return this.#guard("scheduling a retry", () =>
      this.#db.transaction(() => this.#transition(sequence, "retry_scheduled", now, { nextAttemptAt, error })).immediate(),
    );
  }

  /** Change log entries after a position (optionally of one command), oldest first. */
  eventsAfter(position: number, limit: number, idempotencyId?: string): CommandEvent[] {
    return this.#guard("reading the change log", () => {
      const rows =
        idempotencyId === undefined
          ? this.#statements.eventsAfter.all(position, limit)
          : this.#statements.eventsAfterFor.all(position, idempotencyId, limit);
      return rows.map(toEvent);
    });
  }

  close(): void {
    this.#db.close();
  }

  #transition(sequence: number, kind: Exclude<CommandEventKind, "queued">, now: number, change: Change): CommandEvent {
    const { from, to } = transitions[kind];
    const current = this.#statements.bySequence.get(sequence);
    if (!current || current.state !== from) {
      throw new KmapError("internal", `command ${sequence} cannot go from ${current?.state ?? "nowhere"} to ${to}`);
    }
    const has = (key: keyof Change) => Object.hasOwn(change, key);
    const error = has("error") ? change.error : current.error_code ? { code: current.error_code, message: current.error_message ?? "" } : undefined;
    this.#statements.update.run(
      to,
      change.attempts ?? current.attempts,
      has("nextAttemptAt") ? (change.nextAttemptAt ?? null) : current.next_attempt_at,
      has("transactionId") ? (change.transactionId ?? null) : current.transaction_id,
      has("createdNodeId") ? (change.createdNodeId ?? null) : current.created_node_id,
      error?.code ?? null,
      error?.message ?? null,
      now,
      sequence,
      from,
    );
    return this.#event(sequence, kind, now);
  }

  #event(sequence: number, kind: CommandEventKind, now: number): CommandEvent {
    const { lastInsertRowid } = this.#statements.insertEvent.run(kind, now, sequence);
    const [event] = this.eventsAfter(Number(lastInsertRowid) - 1, 1);
    return event!;
  }
}

function toRecord(row: CommandRow): CommandRecord {
  return {
    sequence: row.sequence,
    submission: parseSubmission(row.submission),
    state: row.state,
    submittedAt: row.submitted_at,
    attempts: row.attempts,
    nextAttemptAt: row.next_attempt_at ?? undefined,
    transactionId: row.transaction_id ?? undefined,
    createdNodeId: row.created_node_id ?? undefined,
    error: row.error_code ? { code: row.error_code, message: row.error_message ?? "" } : undefined,
    updatedAt: row.updated_at,
  };
}

function toEvent(row: EventRow): CommandEvent {
  return { position: row.position, kind: row.kind, record: toRecord(row), changedAt: row.changed_at };
}
