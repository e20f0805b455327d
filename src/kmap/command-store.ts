import Database from "better-sqlite3";
import type { Database as SqliteDatabase, Statement } from "better-sqlite3";
import { closeSync, fsyncSync, openSync } from "node:fs";
import { transitions, type CommandEventKind, type CommandFailure, type CommandRecord, type CommandState } from "./command-record.js";
import { eventColumns, recordColumns, toRecord, type CommandRow, type EventRow } from "./command-rows.js";
import { KmapBusyError, KmapError } from "./errors.js";
import { isLockContention } from "./kweb/sqlite-errors.js";

/**
 * The command lane's storage: one SQLite file, authoritative for command
 * lifecycle state, written by one connection (the runtime's and the
 * submissions'; reads for callers go through CommandReader's own read-only
 * connection).
 *
 * Two tables: `commands` (one row per submission, in submission order) and
 * `command_events` (the change log: one row per change, written in the same
 * transaction as the change, so WatchCommands can replay from any position
 * after a restart). Every transition states the state it expects; a record
 * in another state is an invariant violation, never silently overwritten.
 *
 * Durability (WAL; docs/kmap.md, "What is fsync'd"): every write states
 * whether it must be on disk when it returns. `full` commits with
 * `synchronous=FULL` (the WAL is fsync'd at commit): submissions, terminal
 * failures, and any transition after which the runtime may wait. `normal`
 * commits without an fsync (`synchronous=NORMAL`): transitions that recovery
 * rebuilds exactly — marking a record Applying, and recording a Committed
 * outcome, whose signed transaction the Kweb already holds durably under the
 * command's provenance. A later `full` commit makes every earlier one durable
 * too (the WAL is one append-only file), and `syncFiles` does the same
 * without a write.
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
  override readonly name: string = "CommandStoreError";

  constructor(action: string, cause: unknown) {
    super("internal", `the command lane database failed while ${action}`, { cause });
  }
}

/** Whether a write must be on disk when it returns (`full`) or may wait for the next fsync (`normal`). */
export type Durability = "full" | "normal";

export const SCHEMA_VERSION = 1;

/** How long the writer waits for a lock another connection holds, by default. */
export const DEFAULT_LANE_BUSY_TIMEOUT_MS = 5_000;

/** The fields a transition sets, besides state and times. */
interface Change {
  readonly attempts?: number;
  readonly nextAttemptAt?: number | undefined;
  readonly transactionId?: string | undefined;
  readonly createdNodeId?: string | undefined;
  readonly error?: CommandFailure | undefined;
}

/** How the runtime's attempt of one record ended. */
export type AttemptOutcome =
  | { readonly kind: "committed"; readonly transactionId: string; readonly createdNodeId: string | undefined }
  | { readonly kind: "failed"; readonly error: CommandFailure }
  | { readonly kind: "retry"; readonly nextAttemptAt: number; readonly error: CommandFailure };

/** What one submitted item led to. */
export type InsertResult =
  | { readonly created: EventRow }
  | { readonly existing: CommandRow; readonly queuedPosition: number }
  | { readonly refused: "backlog_full" };

/** The lane's counters, as of the last write. */
export interface LaneCounters {
  /** Unfinished (Queued or Applying) records. */
  readonly pending: number;
  /** The newest change-log position (0 when the log is empty). */
  readonly latestPosition: number;
  /** The oldest change the log still holds (latestPosition + 1 when it is empty). */
  readonly oldestPosition: number;
}

export interface CommandStoreOptions {
  /** How long a write waits for a lock another connection holds; default 5 s. */
  readonly busyTimeoutMs?: number;
}

export class CommandStore {
  readonly #db: SqliteDatabase;
  readonly #path: string;
  readonly #statements: {
    byId: Statement<[string], CommandRow>;
    bySequence: Statement<[number], CommandRow>;
    head: Statement<[], CommandRow>;
    nextAfter: Statement<[number], CommandRow>;
    unfinishedAfter: Statement<[number, number], CommandRow>;
    insert: Statement<[string, string, number, number, number]>;
    update: Statement<[CommandState, number, number | null, string | null, string | null, string | null, string | null, number, number, CommandState]>;
    insertEvent: Statement<[CommandEventKind, number, number]>;
    event: Statement<[number], EventRow>;
    applying: Statement<[], CommandRow>;
    queuedPosition: Statement<[number], { position: number }>;
    pending: Statement<[], { n: number }>;
    bounds: Statement<[], { oldest: number | null; latest: number | null }>;
    firstUnfinishedPosition: Statement<[], { position: number | null }>;
    prune: Statement<[number]>;
    syncFull: Statement<[]>;
    syncNormal: Statement<[]>;
  };
  #synchronous: Durability = "full";
  #pending: number;
  #latestPosition: number;
  #oldestPosition: number;

  constructor(path: string, options: CommandStoreOptions = {}) {
    this.#path = path;
    try {
      this.#db = new Database(path);
      this.#db.pragma("journal_mode = WAL");
      this.#db.pragma("synchronous = FULL");
      this.#db.pragma("foreign_keys = ON");
      this.#db.pragma(`busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs ?? DEFAULT_LANE_BUSY_TIMEOUT_MS))}`);
      this.#migrate();
    } catch (error) {
      if (error instanceof KmapError) throw error;
      throw new CommandStoreError("opening", error);
    }
    const db = this.#db;
    this.#statements = {
      byId: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.idempotency_id = ?`),
      bySequence: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.sequence = ?`),
      head: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.state IN ('queued', 'applying') ORDER BY c.sequence LIMIT 1`),
      nextAfter: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.state IN ('queued', 'applying') AND c.sequence > ? ORDER BY c.sequence LIMIT 1`),
      unfinishedAfter: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.state IN ('queued', 'applying') AND c.sequence > ? ORDER BY c.sequence LIMIT ?`),
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
      event: db.prepare(`SELECT ${eventColumns} FROM command_events e JOIN commands c ON c.sequence = e.sequence WHERE e.position = ?`),
      applying: db.prepare(`SELECT ${recordColumns} FROM commands c WHERE c.state = 'applying' ORDER BY c.sequence`),
      queuedPosition: db.prepare("SELECT position FROM command_events WHERE sequence = ? AND kind = 'queued'"),
      pending: db.prepare("SELECT count(*) AS n FROM commands WHERE state IN ('queued', 'applying')"),
      bounds: db.prepare("SELECT min(position) AS oldest, max(position) AS latest FROM command_events"),
      firstUnfinishedPosition: db.prepare(
        "SELECT min(position) AS position FROM command_events WHERE sequence = (SELECT min(sequence) FROM commands WHERE state IN ('queued', 'applying'))",
      ),
      prune: db.prepare("DELETE FROM command_events WHERE position <= ?"),
      syncFull: db.prepare("PRAGMA synchronous = FULL"),
      syncNormal: db.prepare("PRAGMA synchronous = NORMAL"),
    };
    this.#pending = this.#statements.pending.get()!.n;
    const bounds = this.#statements.bounds.get()!;
    this.#latestPosition = bounds.latest ?? 0;
    this.#oldestPosition = bounds.oldest ?? this.#latestPosition + 1;
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

  /** The lane's counters as of the last write. */
  counters(): LaneCounters {
    return { pending: this.#pending, latestPosition: this.#latestPosition, oldestPosition: this.#oldestPosition };
  }

  #guard<T>(action: string, body: () => T): T {
    try {
      return body();
    } catch (error) {
      if (error instanceof KmapError) throw error;
      throw new CommandStoreError(action, error);
    }
  }

  /** Runs `body` as one IMMEDIATE transaction committed with the given durability. */
  #write<T>(durability: Durability, body: () => T): T {
    if (this.#synchronous !== durability) {
      (durability === "full" ? this.#statements.syncFull : this.#statements.syncNormal).run();
      this.#synchronous = durability;
    }
    return this.#db.transaction(body).immediate();
  }

  /**
   * Returns every Applying record to Queued, one `recovered` event each, and
   * then makes everything the file holds durable: a previous process may
   * have committed `normal` writes the operating system has not written out
   * yet, and they are about to be served as history.
   */
  recoverApplying(now: number): EventRow[] {
    const rows = this.#guard("recovering applying records", () =>
      this.#write("full", () => this.#statements.applying.all().map((row) => this.#transition(row.sequence, "recovered", now, { nextAttemptAt: now }))),
    );
    this.syncFiles();
    return rows;
  }

  /**
   * Forces what has been committed so far onto the disk (fsync of the WAL
   * and of the database file), as a `full` commit would, without writing.
   */
  syncFiles(): void {
    this.#guard("syncing to disk", () => {
      for (const file of [`${this.#path}-wal`, this.#path]) {
        let fd: number;
        try {
          fd = openSync(file, "r");
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
          throw error;
        }
        try {
          fsyncSync(fd);
        } finally {
          closeSync(fd);
        }
      }
    });
  }

  /**
   * Inserts Queued records, in the given order, in one `full` transaction
   * (one fsync for the whole group), skipping ids that exist. For each item
   * it returns the new record's `queued` event row, the existing record with
   * the position of its `queued` event (0 when that change was pruned), or —
   * for a new id while `maxPending` records are unfinished — a refusal. An
   * id repeated within the group finds its first occurrence.
   *
   * A lock another connection holds for longer than the busy timeout fails
   * the group with KmapBusyError (`unavailable`): nothing was stored.
   */
  insertQueued(
    items: readonly { readonly idempotencyId: string; readonly canonical: string }[],
    now: number,
    maxPending = Number.POSITIVE_INFINITY,
  ): InsertResult[] {
    let created = 0;
    let results: InsertResult[];
    try {
      results = this.#guard("queueing commands", () =>
        this.#write("full", () => {
          created = 0;
          return items.map((item): InsertResult => {
            const existing = this.#statements.byId.get(item.idempotencyId);
            if (existing) return { existing, queuedPosition: this.#statements.queuedPosition.get(existing.sequence)?.position ?? 0 };
            if (this.#pending + created >= maxPending) return { refused: "backlog_full" };
            const { lastInsertRowid } = this.#statements.insert.run(item.idempotencyId, item.canonical, now, now, now);
            created += 1;
            return { created: this.#event(Number(lastInsertRowid), "queued", now) };
          });
        }),
      );
    } catch (error) {
      if (error instanceof CommandStoreError && isLockContention(error.cause)) throw new KmapBusyError("the command lane database", { cause: error.cause });
      throw error;
    }
    this.#pending += created;
    this.#noteEvents(results.flatMap((r) => ("created" in r ? [r.created] : [])));
    return results;
  }

  /** The first unfinished record in submission order: the only one the runtime may work on. */
  head(): CommandRecord | undefined {
    return this.#guard("reading the next record", () => {
      const row = this.#statements.head.get();
      return row ? toRecord(row) : undefined;
    });
  }

  /** The first unfinished record after `sequence` in submission order. */
  nextAfter(sequence: number): CommandRecord | undefined {
    return this.#guard("reading the next record", () => {
      const row = this.#statements.nextAfter.get(sequence);
      return row ? toRecord(row) : undefined;
    });
  }

  /** Up to `limit` unfinished records after `sequence`, in submission order. */
  unfinishedAfter(sequence: number, limit: number): CommandRecord[] {
    return this.#guard("reading the next records", () => this.#statements.unfinishedAfter.all(sequence, limit).map(toRecord));
  }

  /** Marks a Queued record Applying (its `attempts`-th attempt). */
  markApplying(sequence: number, attempts: number, now: number, durability: Durability): EventRow {
    const row = this.#guard("marking a record applying", () =>
      this.#write(durability, () => this.#transition(sequence, "applying", now, { attempts, nextAttemptAt: undefined, error: undefined })),
    );
    this.#noteEvents([row]);
    return row;
  }

  /**
   * Records how an attempt ended and, when `takeNext` names the next record
   * (the caller found it Queued and due: see nextAfter), marks that record
   * Applying in the same transaction — the shared "N committed, N+1
   * applying" transaction. Returns the change rows in position order and the
   * record taken, if any.
   */
  recordOutcome(
    sequence: number,
    outcome: AttemptOutcome,
    now: number,
    options: { readonly durability: Durability; readonly takeNext?: CommandRecord | undefined },
  ): { rows: EventRow[]; next: CommandRecord | undefined } {
    return this.recordOutcomes([{ sequence, outcome }], now, options);
  }

  /**
   * Records how the attempts of several records ended (a group's outcomes,
   * in submission order) in one transaction, and, when `takeNext` names the
   * record after them (Queued and due), marks it Applying in the same
   * transaction. A record given `markApplying` (a group's further member,
   * still Queued) is first marked Applying, with that attempt number, in
   * the same transaction. A `retry` outcome takes nothing next. Returns the
   * change rows in position order and the record taken, if any.
   */
  recordOutcomes(
    outcomes: readonly { readonly sequence: number; readonly markApplying?: number; readonly outcome: AttemptOutcome }[],
    now: number,
    options: { readonly durability: Durability; readonly takeNext?: CommandRecord | undefined },
  ): { rows: EventRow[]; next: CommandRecord | undefined } {
    const kinds = new Set(outcomes.map((o) => o.outcome.kind));
    const action = kinds.has("retry") ? "scheduling a retry" : kinds.has("failed") ? "recording a failure" : "recording a committed transaction";
    const result = this.#guard(action, () =>
      this.#write(options.durability, () => {
        const rows: EventRow[] = [];
        for (const { sequence, markApplying, outcome } of outcomes) {
          if (markApplying !== undefined) {
            rows.push(this.#transition(sequence, "applying", now, { attempts: markApplying, nextAttemptAt: undefined, error: undefined }));
          }
          if (outcome.kind === "committed") {
            rows.push(this.#transition(sequence, "committed", now, { transactionId: outcome.transactionId, createdNodeId: outcome.createdNodeId, error: undefined }));
          } else if (outcome.kind === "failed") {
            rows.push(this.#transition(sequence, "failed", now, { error: outcome.error }));
          } else {
            rows.push(this.#transition(sequence, "retry_scheduled", now, { nextAttemptAt: outcome.nextAttemptAt, error: outcome.error }));
          }
        }
        let next: EventRow | undefined;
        const take = options.takeNext;
        if (take !== undefined && !kinds.has("retry")) {
          next = this.#transition(take.sequence, "applying", now, { attempts: take.attempts + 1, nextAttemptAt: undefined, error: undefined });
          rows.push(next);
        }
        return { rows, next };
      }),
    );
    this.#pending -= outcomes.filter((o) => o.outcome.kind !== "retry").length;
    this.#noteEvents(result.rows);
    return { rows: result.rows, next: result.next === undefined ? undefined : toRecord(result.next) };
  }

  /**
   * Deletes the oldest change-log entries so that at most `retain` remain,
   * never an entry of an unfinished record (so a pending command can always
   * be followed from its first change), and at most `maxRows` in this call.
   * A `normal` write: a pruning lost to a power failure is simply redone.
   * Returns how many entries were deleted.
   */
  prune(retain: number, maxRows: number): number {
    const deleted = this.#guard("pruning the change log", () =>
      this.#write("normal", () => {
        const firstUnfinished = this.#statements.firstUnfinishedPosition.get()?.position ?? Number.POSITIVE_INFINITY;
        const bounds = this.#statements.bounds.get()!;
        if (bounds.oldest === null || bounds.latest === null) return 0;
        const through = Math.min(bounds.latest - retain, firstUnfinished - 1, bounds.oldest + maxRows - 1);
        if (through < bounds.oldest) return 0;
        return this.#statements.prune.run(through).changes;
      }),
    );
    if (deleted > 0) {
      const bounds = this.#statements.bounds.get()!;
      this.#oldestPosition = bounds.oldest ?? this.#latestPosition + 1;
    }
    return deleted;
  }

  /** Whether the change log holds enough more than `retain` entries for pruning to be worth a write. */
  pruneDue(retain: number): boolean {
    const held = this.#latestPosition - this.#oldestPosition + 1;
    return held - retain >= Math.min(1_000, Math.max(1, Math.floor(retain / 100)));
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }

  #noteEvents(rows: readonly EventRow[]): void {
    if (rows.length === 0) return;
    const wasEmpty = this.#oldestPosition > this.#latestPosition;
    for (const row of rows) if (row.position > this.#latestPosition) this.#latestPosition = row.position;
    if (wasEmpty) this.#oldestPosition = Math.min(...rows.map((r) => r.position));
  }

  #transition(sequence: number, kind: Exclude<CommandEventKind, "queued">, now: number, change: Change): EventRow {
    const { from, to } = transitions[kind];
    const current = this.#statements.bySequence.get(sequence);
    if (!current || current.state !== from) {
      throw new KmapError("internal", `command ${sequence} cannot go from ${current?.state ?? "nowhere"} to ${to}`);
    }
    const has = (key: keyof Change) => Object.hasOwn(change, key);
    const error = has("error") ? change.error : current.error_code ? { code: current.error_code, message: current.error_message ?? "" } : undefined;
    const updated: CommandRow = {
      ...current,
      state: to,
      attempts: change.attempts ?? current.attempts,
      next_attempt_at: has("nextAttemptAt") ? (change.nextAttemptAt ?? null) : current.next_attempt_at,
      transaction_id: has("transactionId") ? (change.transactionId ?? null) : current.transaction_id,
      created_node_id: has("createdNodeId") ? (change.createdNodeId ?? null) : current.created_node_id,
      error_code: error?.code ?? null,
      error_message: error?.message ?? null,
      updated_at: now,
    };
    this.#statements.update.run(
      to,
      updated.attempts,
      updated.next_attempt_at,
      updated.transaction_id,
      updated.created_node_id,
      updated.error_code,
      updated.error_message,
      now,
      sequence,
      from,
    );
    const { lastInsertRowid } = this.#statements.insertEvent.run(kind, now, sequence);
    // The change-log row just written is the record as updated: no need to read it back.
    return { ...updated, position: Number(lastInsertRowid), kind, changed_at: now };
  }

  #event(sequence: number, kind: CommandEventKind, now: number): EventRow {
    const { lastInsertRowid } = this.#statements.insertEvent.run(kind, now, sequence);
    return this.#statements.event.get(Number(lastInsertRowid))!;
  }
}
