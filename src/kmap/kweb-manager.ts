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
}
