import type { Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalJson, type Json } from "../encoding/canonical-json.js";
import { parseCanonicalCommand } from "./canonical-command.js";

/**
 * What an administrator submits: a 32-character lowercase hexadecimal
 * idempotency id, one typed command (the decoded Kweb tool), and the
 * visible transaction id each named node must have when the command
 * applies — and its stored form, the canonical text the lane keeps and
 * compares resubmissions by.
 *
 * Validation lives in submission.ts; this module only writes and reads the
 * stored text, so the Kweb worker thread, which reads stored submissions
 * but never validates, does not load the contract validator.
 */
export interface Submission {
  readonly idempotencyId: string;
  readonly command: Command;
  /** Canonical node id → expected visible transaction id. */
  readonly expectedTransactionIds: Readonly<Record<string, string>>;
}

/** The stored text of a validated submission, given its canonical command text. */
export function canonicalSubmission(idempotencyId: string, command: string, expected: Readonly<Record<string, string>>): string {
  return canonicalJson({
    idempotency_id: idempotencyId,
    command: JSON.parse(command) as Json,
    expected_transaction_ids: { ...expected },
  });
}

/** The submission of a stored canonical text. */
export function parseSubmission(text: string): Submission {
  const parsed = JSON.parse(text) as {
    idempotency_id: string;
    command: Json;
    expected_transaction_ids: Record<string, string>;
  };
  return {
    idempotencyId: parsed.idempotency_id,
    command: parseCanonicalCommand(canonicalJson(parsed.command)),
    expectedTransactionIds: parsed.expected_transaction_ids,
  };
}
