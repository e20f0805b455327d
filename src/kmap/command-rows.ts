import type { CommandEvent, CommandEventKind, CommandRecord, CommandState } from "./command-record.js";
import { parseSubmission, type Submission } from "./stored-submission.js";

/**
 * The command lane's rows as SQLite returns them, and their conversion to
 * records and events. Shared by the writer (CommandStore), the read-only
 * connection (CommandReader) and the worker that posts committed changes to
 * the main thread: rows are plain data, so they cross the thread boundary
 * as they are and become records on the side that needs them.
 */

export interface CommandRow {
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

export interface EventRow extends CommandRow {
  position: number;
  kind: CommandEventKind;
  changed_at: number;
}

export const recordColumns =
  "c.sequence, c.idempotency_id, c.submission, c.state, c.submitted_at, c.attempts, c.next_attempt_at, c.transaction_id, c.created_node_id, c.error_code, c.error_message, c.updated_at";

export const eventColumns =
  "e.position, e.kind, e.changed_at, c.sequence, c.idempotency_id, c.submission, e.state, c.submitted_at, e.attempts, e.next_attempt_at, e.transaction_id, e.created_node_id, e.error_code, e.error_message, e.changed_at AS updated_at";

/**
 * Parsed submissions by their stored text, most recently used last, up to a
 * budget of stored text. A command's record appears in several change-log
 * entries, and replaying watchers read the same stretch of the log at about
 * the same time: each distinct submission is parsed once instead of once
 * per entry and per watcher. Keyed by the text itself, so records of
 * different lanes in one process cannot be confused.
 */
class ParsedSubmissions {
  static readonly BUDGET = 8 * 1024 * 1024;
  readonly #entries = new Map<string, Submission>();
  #size = 0;

  parse(text: string): Submission {
    const cached = this.#entries.get(text);
    if (cached !== undefined) {
      this.#entries.delete(text);
      this.#entries.set(text, cached);
      return cached;
    }
    const parsed = parseSubmission(text);
    if (text.length <= ParsedSubmissions.BUDGET / 64) {
      this.#entries.set(text, parsed);
      this.#size += text.length;
      for (const [key] of this.#entries) {
        if (this.#size <= ParsedSubmissions.BUDGET) break;
        this.#entries.delete(key);
        this.#size -= key.length;
      }
    }
    return parsed;
  }
}

const parsedSubmissions = new ParsedSubmissions();

/**
 * The stored submission, parsed on first use. Parsing (JSON, then the
 * Protobuf JSON mapping) is most of what a record costs, and many records
 * that pass through the lane — change-log rows a filtered watcher skips,
 * events kept in memory for watchers that never come — are never looked
 * at. The idempotency id is known without parsing.
 */
function lazySubmission(idempotencyId: string, text: string): Submission {
  let parsed: Submission | undefined;
  const parse = () => (parsed ??= parsedSubmissions.parse(text));
  return {
    idempotencyId,
    get command() {
      return parse().command;
    },
    get expectedTransactionIds() {
      return parse().expectedTransactionIds;
    },
  };
}

export function toRecord(row: CommandRow): CommandRecord {
  return {
    sequence: row.sequence,
    submission: lazySubmission(row.idempotency_id, row.submission),
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

export function toEvent(row: EventRow): CommandEvent {
  return { position: row.position, kind: row.kind, record: toRecord(row), changedAt: row.changed_at };
}
