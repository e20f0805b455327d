import type { Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { safeMessage } from "../log/safe-message.js";

/**
 * The boundary between the command lane and the Kweb that holds the Kmap.
 *
 * The lane never opens Kweb itself: it hands each command to a manager and
 * records the outcome. A manager must apply each command at most once per
 * provenance (the idempotency id): before applying, it looks for a
 * transaction with that exact provenance in Kweb history and, if there is
 * one, returns it instead of applying again. That is what makes a crash
 * after the Kweb commit but before the lane's status update harmless.
 *
 * The embedded Kweb (src/kmap/kweb/) is the default manager; tests wrap it
 * to inject writer outages at this boundary.
 */

/** One command to apply. */
export interface ApplyRequest {
  /** The command's idempotency id: its provenance in Kweb history. */
  readonly idempotencyId: string;
  /** The typed command (already validated by the lane). */
  readonly command: Command;
  /** Node id → the visible transaction id it must have; a mismatch is a stale revision. */
  readonly expectedTransactionIds: Readonly<Record<string, string>>;
}

/** Why a command cannot apply. Terminal: the lane records it as Failed. */
export type RejectionCode = "invalid_input" | "missing_node" | "stale_revision";

/** What applying a command led to. */
export type ApplyOutcome =
  | {
      readonly kind: "committed";
      /** The signed transaction (the existing one when the provenance was already applied). */
      readonly transactionId: string;
      /** The node a create_node command created. */
      readonly createdNodeId: string | undefined;
      /** True when the transaction was found in history rather than applied now. */
      readonly replayed: boolean;
    }
  | { readonly kind: "rejected"; readonly code: RejectionCode; readonly message: string };

/**
 * The Kweb writer is unavailable (for example another writer holds the Kweb
 * file's lock). Not terminal: the lane returns the record to Queued and
 * retries with exponential backoff.
 */
export class WriterUnavailableError extends Error {
  override readonly name = "WriterUnavailableError";
  readonly [safeMessage] = true as const;
}

export interface KwebManager {
  /** Resolves once commands can be applied; the lane's runtime starts only after. */
  ready(): Promise<void>;
  /**
   * Applies one command exactly once per provenance, off the caller's event
   * loop. Resolves with the outcome; rejects with WriterUnavailableError when
   * the writer is unavailable, and with any other error for a failure of
   * the manager itself (which ends the lane's runtime).
   */
  apply(request: ApplyRequest): Promise<ApplyOutcome>;
  /** Stops the manager; an apply in progress finishes first. */
  close(): Promise<void>;
  /**
   * Optional: settles with the reason once the manager can no longer apply
   * anything (for example its writer thread died while idle), so that the
   * runtime ends at once instead of at the next command.
   */
  readonly failure?: Promise<Error>;
  /**
   * Optional: applies a run of queued commands with one fsync for all of
   * them (see GroupApply). Only a manager whose writer runs synchronously
   * on the runtime's own thread can offer it; the runtime uses it when
   * present and applies one command at a time otherwise.
   */
  readonly groupApply?: GroupApply;
}

/**
 * Group apply: several commands, each still exactly once per provenance,
 * each its own Kweb (SQLite) transaction and its own signed transaction of
 * the history, made durable together by one fsync.
 *
 * `apply` runs synchronously. It applies `requests` in order, reading each
 * only when it is about to be applied (the caller may produce them as the
 * group grows), and returns the outcomes of the group — a prefix of the
 * requests: all `committed`, or a single `rejected` when the first command
 * is rejected. A later command that is rejected, or whose BEGIN meets a
 * lock held elsewhere, is not part of the group (nothing of it is written)
 * and comes first in a later call. Once the group holds `atLeast`
 * commands, no further command joins after `until` (performance.now()).
 * Every outcome returned is durable (fsync'd) when `apply` returns.
 *
 * `afterCommit(index, outcome)` runs after each command's Kweb COMMIT,
 * before the group's fsync; an error it throws ends the group and is
 * rethrown unchanged. Throws WriterUnavailableError only when the writer is
 * unavailable at the first command (nothing was applied).
 */
export interface GroupApply {
  apply(
    requests: Iterable<ApplyRequest>,
    options: { readonly until: number; readonly atLeast: number; readonly afterCommit?: (index: number, outcome: ApplyOutcome) => void },
  ): ApplyOutcome[];
}
