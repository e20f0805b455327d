import type { Submission } from "./submission.js";

/**
 * The lifecycle of one command, in one place.
 *
 *   submit ──► Queued ──► Applying ──► Committed
 *                ▲            │   └──► Failed        (invalid input, missing node, stale revision)
 *                └────────────┘                      (writer unavailable: retry with backoff;
 *                                                     restart: every Applying record is recovered)
 *
 * Queued and Applying are transient; Committed and Failed are terminal and
 * never change again. SQLite holds the state; every change is also one row
 * of the change log (a CommandEvent), written in the same transaction.
 */
export type CommandState = "queued" | "applying" | "committed" | "failed";

/** Why a record failed, or why its last attempt was deferred. */
export interface CommandFailure {
  /** `invalid_input`, `missing_node`, `stale_revision`, or `writer_unavailable` on a Queued record. */
  readonly code: string;
  readonly message: string;
}

/** One durable command record. Times are epoch milliseconds. */
export interface CommandRecord {
  /** Submission order, starting at 1. */
  readonly sequence: number;
  readonly submission: Submission;
  readonly state: CommandState;
  readonly submittedAt: number;
  /** How many times the runtime handed the command to the Kweb manager. */
  readonly attempts: number;
  /** When the runtime will next try it; set on Queued records only. */
  readonly nextAttemptAt: number | undefined;
  /** The signed transaction that applied it (Committed only). */
  readonly transactionId: string | undefined;
  /** The node a create_node command created (Committed only). */
  readonly createdNodeId: string | undefined;
  /** The terminal error (Failed), or why the last attempt was deferred (Queued). */
  readonly error: CommandFailure | undefined;
  readonly updatedAt: number;
}

/** What changed a record. */
export type CommandEventKind = "queued" | "applying" | "retry_scheduled" | "committed" | "failed" | "recovered";

/** One entry of the durable change log. */
export interface CommandEvent {
  /** The change log position: increasing, never reused. */
  readonly position: number;
  readonly kind: CommandEventKind;
  /** The record as it was right after the change. */
  readonly record: CommandRecord;
  readonly changedAt: number;
}

/** The state each change requires and the state it leads to. */
export const transitions: Readonly<Record<Exclude<CommandEventKind, "queued">, { from: CommandState; to: CommandState }>> = {
  applying: { from: "queued", to: "applying" },
  retry_scheduled: { from: "applying", to: "queued" },
  committed: { from: "applying", to: "committed" },
  failed: { from: "applying", to: "failed" },
  recovered: { from: "applying", to: "queued" },
};
