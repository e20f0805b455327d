import Database from "better-sqlite3";
import type { Database as SqliteDatabase, Statement } from "better-sqlite3";
import { closeSync, fdatasyncSync, mkdirSync, openSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { dirname } from "node:path";
import type { Command } from "../../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalCommand } from "../canonical-command.js";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest } from "../kweb-manager.js";
import { payloadDigest } from "./history-chain.js";
import { KwebFailureError } from "./kweb-failure-error.js";
import { KwebGraph } from "./kweb-graph.js";
import { newKwebId } from "./kweb-ids.js";
import { applyOperation } from "./kweb-operations.js";
import { KwebRejection, missingNode } from "./kweb-rejection.js";
import { prepareKwebSchema } from "./kweb-schema.js";
import { transactionPayload, ZERO_DIGEST } from "./signed-transaction.js";
import type { KwebSigningKey } from "./signing-key.js";
import { isLockContention, sqliteCode } from "./sqlite-errors.js";

/**
 * The Kweb's single writer: applies commands to the Kweb file, one SQLite
 * transaction each, and signs the resulting transactions.
 *
 * It is synchronous (better-sqlite3), so it runs on the Kweb worker thread
 * (kweb-worker.ts), never on the server's event loop. Each apply runs under
 * BEGIN IMMEDIATE: it takes the file's write lock before reading anything,
 * so the provenance lookup, the expectation checks and the operation all
 * see the state the transaction commits on top of.
 *
 * The busy timeout is short on purpose: if another connection or process
 * holds the write lock, the command lane should hear "writer unavailable"
 * promptly and retry with backoff, rather than sit blocked.
 */

/** Default busy timeout: how long an apply waits for another writer's lock. */
export const DEFAULT_BUSY_TIMEOUT_MS = 250;

/** How long first-time setup waits for the lock (it runs once, at startup). */
const SETUP_BUSY_TIMEOUT_MS = 5_000;

export interface KwebWriterOptions {
  /** The Kweb SQLite file; created (with its directory) when missing. */
  readonly databasePath: string;
  readonly signingKey: KwebSigningKey;
  /** How long an apply waits for a write lock held elsewhere; default 250 ms. */
  readonly busyTimeoutMs?: number;
  /** The clock, epoch milliseconds; default Date.now. */
  readonly now?: () => number;
}

interface LastTransaction {
  sequence: number;
  signed_payload: Buffer;
}

/** The placeholder of a transaction's payload and signature until they are known (same transaction). */
const EMPTY = new Uint8Array(0);

const writerUnavailable = () =>
  new WriterUnavailableError("the Kweb writer is unavailable: another connection holds the Kweb file's write lock");

function openFailure(error: unknown): Error {
  if (error instanceof KwebFailureError || error instanceof WriterUnavailableError) return error;
  if (isLockContention(error)) return writerUnavailable();
  if (sqliteCode(error) === "SQLITE_NOTADB") {
    return new KwebFailureError("unsupported_schema", "the Kweb file is not a SQLite database", { cause: error });
  }
  return new KwebFailureError("storage_failed", "the Kweb file cannot be opened", { cause: error });
}

export class KwebWriter {
  readonly #db: SqliteDatabase;
  readonly #graph: KwebGraph;
  readonly #key: KwebSigningKey;
  readonly #now: () => number;
  readonly #byProvenance: Statement<[string], { id: string; created_node_id: string | null }>;
  readonly #last: Statement<[], LastTransaction>;
  readonly #insertTransaction: Statement<
    [number, string, string, string, string, string | null, number, Uint8Array, Uint8Array, string, string]
  >;
  readonly #completeTransaction: Statement<[string, string | null, Uint8Array, Uint8Array, number]>;
  readonly #insertTouched: Statement<[string, number]>;
  /** One command in a SQLite transaction of its own, under BEGIN IMMEDIATE. */
  readonly #member: (request: ApplyRequest, commandText: string, progress: MemberProgress) => ApplyOutcome;
  /** The WAL file, fsync'd once per group (see applyGroup). */
  readonly #walPath: string;

  private constructor(db: SqliteDatabase, databasePath: string, key: KwebSigningKey, now: () => number) {
    this.#db = db;
    this.#walPath = `${databasePath}-wal`;
    this.#key = key;
    this.#now = now;
    this.#graph = new KwebGraph(db);
    this.#byProvenance = db.prepare("SELECT id, created_node_id FROM transactions WHERE provenance = ?");
    this.#last = db.prepare("SELECT sequence, signed_payload FROM transactions ORDER BY sequence DESC LIMIT 1");
    this.#insertTransaction = db.prepare(
      `INSERT INTO transactions (sequence, id, provenance, command, touched_node_ids, created_node_id, committed_at, signed_payload, signature, key_id, previous_digest)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#completeTransaction = db.prepare(
      "UPDATE transactions SET touched_node_ids = ?, created_node_id = ?, signed_payload = ?, signature = ? WHERE sequence = ?",
    );
    this.#insertTouched = db.prepare("INSERT INTO transaction_nodes (node_id, sequence) VALUES (?, ?)");
    const member = db.transaction((request: ApplyRequest, commandText: string, progress: MemberProgress) => {
      // BEGIN IMMEDIATE succeeded: the write lock is held from here on.
      progress.phase = "applying";
      return this.#applyLocked(request, request.command, commandText);
    });
    this.#member = (request, commandText, progress) => member.immediate(request, commandText, progress);
  }

  /**
   * Opens (creating when missing) the Kweb file and registers the signing
   * key. Throws KwebFailureError, or WriterUnavailableError when another
   * writer holds the lock throughout first-time setup.
   */
  static open(options: KwebWriterOptions): KwebWriter {
    const busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    let db: SqliteDatabase | undefined;
    try {
      mkdirSync(dirname(options.databasePath), { recursive: true });
      db = new Database(options.databasePath, { timeout: Math.max(busyTimeoutMs, SETUP_BUSY_TIMEOUT_MS) });
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = FULL");
      db.pragma("foreign_keys = ON");
      prepareKwebSchema(db);
      registerSigningKey(db, options.signingKey, (options.now ?? Date.now)());
      db.pragma(`busy_timeout = ${Math.max(0, Math.floor(busyTimeoutMs))}`);
      // A previous process may have committed group members without their
      // fsync (see applyGroup): they become durable before anything is
      // applied or answered from them.
      syncFiles([`${options.databasePath}-wal`, options.databasePath]);
      return new KwebWriter(db, options.databasePath, options.signingKey, options.now ?? Date.now);
    } catch (error) {
      db?.close();
      throw openFailure(error);
    }
  }

  /**
   * Applies one command exactly once per provenance. Returns the outcome
   * (committed, replayed or rejected); throws WriterUnavailableError when
   * the write lock is held elsewhere and KwebFailureError for any other
   * failure. Durable (fsync'd) when it returns.
   */
  apply(request: ApplyRequest): ApplyOutcome {
    return this.applyGroup([request])[0]!;
  }

  /**
   * Group apply: a run of commands, in the given order, each in a SQLite
   * transaction of its own (BEGIN IMMEDIATE … COMMIT) and each its own
   * signed transaction of the history, exactly once per provenance — the
   * history is the one the same commands write one call at a time. What
   * the group shares is the fsync: its commits are made with
   * synchronous=NORMAL and ONE fsync of the Kweb's WAL makes all of them
   * durable before this returns (the WAL is one append-only file: an fsync
   * covers every frame written before it).
   *
   * The group is a prefix of `requests`: it always holds the first, and it
   * ends before
   * - a command that is rejected (its transaction rolls back, nothing of it
   *   remains; it is left for a later call, where it comes first and is
   *   evaluated again on exactly the state it saw here),
   * - a command whose canonical form cannot be built (idem),
   * - a command whose BEGIN meets a write lock held elsewhere (idem),
   * - the next command once `options.until` (performance.now()) has passed
   *   and the group holds `options.atLeast` commands (default 1).
   * `requests` is read lazily, one command at a time, only when that
   * command is about to be applied.
   *
   * `options.afterCommit(index, outcome)` is called after each command's
   * COMMIT, before the group's fsync (fault injection stops the process
   * there). An error it throws ends the group and is rethrown unchanged
   * (the commands committed so far stay committed, without their fsync;
   * applied again, they are found by provenance).
   *
   * Returns the outcome of every command of the group: all `committed`
   * (applied now or found in history), or a single `rejected` when the
   * first command is rejected (then nothing was written). Throws
   * WriterUnavailableError only when the write lock is held elsewhere at
   * the first command's BEGIN (nothing was applied); every other failure,
   * such as a failed COMMIT or fsync, is a KwebFailureError.
   */
  applyGroup(requests: Iterable<ApplyRequest>, options: GroupApplyOptions = {}): ApplyOutcome[] {
    const iterator = requests[Symbol.iterator]();
    const atLeast = options.atLeast ?? 1;
    const outcomes: ApplyOutcome[] = [];
    let completed = false;
    try {
      this.#setSynchronous("NORMAL");
      for (;;) {
        const index = outcomes.length;
        if (index >= atLeast && options.until !== undefined && performance.now() >= options.until) break;
        const next = iterator.next();
        if (next.done === true) break;
        const request = next.value;
        let commandText: string;
        try {
          commandText = canonicalCommand(request.command);
        } catch {
          if (index === 0) outcomes.push({ kind: "rejected", code: "invalid_input", message: "the command cannot be serialised" });
          break;
        }
        const progress: MemberProgress = { phase: "begin" };
        let outcome: ApplyOutcome;
        try {
          outcome = this.#member(request, commandText, progress);
        } catch (error) {
          if (error instanceof KwebRejection) {
            if (index === 0) outcomes.push({ kind: "rejected", code: error.code, message: error.message });
            break;
          }
          if (progress.phase === "begin" && isLockContention(error)) {
            // Nothing of this command was applied: it is left for a later call.
            if (index === 0) throw writerUnavailable();
            break;
          }
          if (error instanceof KwebFailureError) throw error;
          throw new KwebFailureError("storage_failed", "the Kweb store failed while applying a command", { cause: error });
        }
        outcomes.push(outcome);
        options.afterCommit?.(index, outcome);
      }
      completed = true;
    } finally {
      // Back to FULL for everything else. After a failure the failure is
      // what the caller hears, not a second one.
      try {
        this.#setSynchronous("FULL");
      } catch (error) {
        if (completed) throw error;
      }
    }
    // One fsync for the group — also when every member was answered from
    // history: a previous attempt may have committed it without its fsync.
    if (outcomes[0]?.kind === "committed") syncFiles([this.#walPath]);
    return outcomes;
  }

  #setSynchronous(mode: "NORMAL" | "FULL"): void {
    try {
      this.#db.pragma(`synchronous = ${mode}`);
    } catch (error) {
      throw new KwebFailureError("storage_failed", "the Kweb store failed while applying a command", { cause: error });
    }
  }

  /**
   * The connection settings that durability and outage reporting depend
   * on, as SQLite reports them (for diagnostics and tests).
   */
  settings(): { journalMode: string; synchronous: "off" | "normal" | "full" | "extra"; foreignKeys: boolean; busyTimeoutMs: number } {
    const synchronous = (["off", "normal", "full", "extra"] as const)[this.#db.pragma("synchronous", { simple: true }) as number] ?? "off";
    return {
      journalMode: String(this.#db.pragma("journal_mode", { simple: true })),
      synchronous,
      foreignKeys: this.#db.pragma("foreign_keys", { simple: true }) === 1,
      busyTimeoutMs: Number(this.#db.pragma("busy_timeout", { simple: true })),
    };
  }

  /** Closes the connection; an uncommitted transaction cannot exist here. */
  close(): void {
    if (this.#db.open) this.#db.close();
  }

  #applyLocked(request: ApplyRequest, command: Command, commandText: string): ApplyOutcome {
    // Exactly once: a command already in history is answered from history.
    const existing = this.#byProvenance.get(request.idempotencyId);
    if (existing !== undefined) {
      return { kind: "committed", transactionId: existing.id, createdNodeId: existing.created_node_id ?? undefined, replayed: true };
    }

    for (const nodeId of Object.keys(request.expectedTransactionIds).sort()) {
      const expected = request.expectedTransactionIds[nodeId];
      const node = this.#graph.node(nodeId);
      if (node === undefined) throw missingNode(nodeId);
      if (node.visible_transaction_id !== expected) {
        throw new KwebRejection("stale_revision", `node ${nodeId} is at transaction ${node.visible_transaction_id}, expected ${expected}`);
      }
    }

    const transactionId = newKwebId();
    const committedAt = this.#now();
    const last = this.#last.get();
    const sequence = (last?.sequence ?? 0) + 1;
    const previousDigest = last === undefined ? ZERO_DIGEST : payloadDigest(last.signed_payload);
    // The transaction's row goes in first and is completed once the
    // operation is known. The graph rows the operation writes reference it
    // (deferred foreign keys on columns without an index): with the parent
    // already there, SQLite has no pending violation to resolve, whereas a
    // parent inserted afterwards makes it scan every node and link for
    // rows that reference it — a cost growing with the size of the Kmap.
    this.#insertTransaction.run(sequence, transactionId, request.idempotencyId, commandText, "[]", null, committedAt, EMPTY, EMPTY, this.#key.keyId, previousDigest);
    const effect = applyOperation({ graph: this.#graph, transactionId, at: committedAt }, command);
    const touched = [...new Set(effect.touched)].sort();

    const signedPayload = transactionPayload({
      id: transactionId,
      sequence,
      provenance: request.idempotencyId,
      canonicalCommand: commandText,
      touchedNodeIds: touched,
      createdNodeId: effect.createdNodeId,
      committedAt,
      keyId: this.#key.keyId,
      previousDigest,
    });
    const signature = this.#key.sign(signedPayload);

    this.#completeTransaction.run(JSON.stringify(touched), effect.createdNodeId ?? null, signedPayload, signature, sequence);
    for (const nodeId of touched) {
      this.#insertTouched.run(nodeId, sequence);
      // A deleted node has no row left to stamp; the update is then a no-op.
      this.#graph.markVisible(nodeId, transactionId, committedAt);
    }
    return { kind: "committed", transactionId, createdNodeId: effect.createdNodeId, replayed: false };
  }
}

/** How a group of commands is formed (see KwebWriter.applyGroup). */
export interface GroupApplyOptions {
  /** performance.now() after which no further command joins the group, once it holds `atLeast` commands. */
  readonly until?: number;
  /** How many commands may join the group whatever the time; default 1. */
  readonly atLeast?: number;
  /** Called after each command's COMMIT, before the group's fsync. */
  readonly afterCommit?: (index: number, outcome: ApplyOutcome) => void;
}

/** Where one command's transaction got to: only a lock met at BEGIN is a writer outage. */
interface MemberProgress {
  phase: "begin" | "applying";
}

/**
 * Records the signing key's public half in the file and makes it the
 * active key, unless it already is (a normal restart writes nothing).
 */
function registerSigningKey(db: SqliteDatabase, key: KwebSigningKey, at: number): void {
  const active = () =>
    (db.prepare("SELECT value FROM kweb_meta WHERE key = 'active_key_id'").get() as { value: string } | undefined)?.value;
  if (active() === key.keyId) return;
  db.transaction(() => {
    db.prepare("INSERT OR IGNORE INTO signing_keys (key_id, public_key, registered_at) VALUES (?, ?, ?)").run(key.keyId, key.publicKey, at);
    db.prepare("INSERT INTO kweb_meta (key, value) VALUES ('active_key_id', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value").run(
      key.keyId,
    );
  }).immediate();
}

/**
 * fsync of each file that exists (the WAL, then the database file), as a
 * FULL commit would, without writing: what SQLite wrote with
 * synchronous=NORMAL is then on disk. A missing WAL holds nothing to sync.
 */
function syncFiles(paths: readonly string[]): void {
  for (const path of paths) {
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw new KwebFailureError("storage_failed", "the Kweb store failed to make applied commands durable", { cause: error });
    }
    try {
      fdatasyncSync(fd);
    } catch (error) {
      throw new KwebFailureError("storage_failed", "the Kweb store failed to make applied commands durable", { cause: error });
    } finally {
      closeSync(fd);
    }
  }
}
