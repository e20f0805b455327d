import { createHash } from "node:crypto";
import { ZERO_DIGEST, type KwebTransaction, type Verification } from "./signed-transaction.js";

/**
 * The hash chain through Kweb history. Each transaction's signed payload
 * carries the SHA-256 of the previous transaction's signed payload, so a
 * transaction removed, inserted or reordered after the fact breaks the chain
 * even though every remaining signature still verifies. Combine with
 * `verifyTransaction` on each transaction (which ties `previousDigest` and
 * `sequence` to the signed bytes) to check a whole history.
 */

/** Hex SHA-256 of a signed payload: the next transaction's previous digest. */
export function payloadDigest(signedPayload: Uint8Array): string {
  return createHash("sha256").update(signedPayload).digest("hex");
}

/** The fields of a transaction the chain depends on. */
export type ChainLink = Pick<KwebTransaction, "id" | "sequence" | "signedPayload" | "previousDigest">;

/**
 * Checks that `transactions`, in commit order, form an unbroken chain:
 * consecutive sequences, each previous digest equal to the digest of the
 * transaction before it, and the zero digest when the list starts at
 * sequence 1. A list starting later is checked from its first element on.
 */
export function verifyHistoryChain(transactions: readonly ChainLink[]): Verification {
  let previous: ChainLink | undefined;
  for (const transaction of transactions) {
    if (previous === undefined) {
      if (transaction.sequence === 1 && transaction.previousDigest !== ZERO_DIGEST) {
        return { valid: false, reason: `transaction ${transaction.id} is the first but does not carry the zero previous digest` };
      }
    } else {
      if (transaction.sequence !== previous.sequence + 1) {
        return {
          valid: false,
          reason: `transaction ${transaction.id} has sequence ${transaction.sequence} but follows sequence ${previous.sequence}: the history has a gap or is out of order`,
        };
      }
      if (transaction.previousDigest !== payloadDigest(previous.signedPayload)) {
        return { valid: false, reason: `transaction ${transaction.id} does not chain to transaction ${previous.id}` };
      }
    }
    previous = transaction;
  }
  return { valid: true };
}
