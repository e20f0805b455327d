import { createHmac, createSecretKey, randomBytes, timingSafeEqual, type KeyObject } from "node:crypto";

/**
 * Receipts without stored receipts. Every group state holds a 32-byte
 * random secret, created with the state; a receipt is
 *
 *   hex(HMAC-SHA256(secret, "laneway receipt v1" ‖ lane ‖ group ‖ holder ‖ sequence ‖ attempt))
 *
 * with each string length-prefixed and the numbers fixed-width, so no two
 * tuples share an input. The attempt is the ownership generation: every
 * lease increments it, so each lease has its own receipt, and a receipt
 * binds lane, group, holder project, sequence and generation. Nothing else
 * is stored: a receipt is verified by recomputing the MAC for the caller's
 * project and the attempt the state holds for that sequence, compared in
 * constant time. Another project's receipt, an older attempt's, or one of
 * another group never verifies.
 *
 * Whoever reads the secret can compute every receipt of the group: the
 * secret lives in the group's KV value, which only Laneway's own broker
 * credentials reach (write access to that bucket was already total).
 */

/** The secret's length, in bytes. */
export const RECEIPT_SECRET_BYTES = 32;

const RECEIPT_DOMAIN = "laneway receipt v1";
const RECOVERY_DOMAIN = "laneway recovery body v1";

export function newReceiptSecret(): Uint8Array {
  return new Uint8Array(randomBytes(RECEIPT_SECRET_BYTES));
}

function lengthPrefixed(text: string): Buffer {
  const bytes = Buffer.from(text, "utf8");
  const out = Buffer.allocUnsafe(4 + bytes.length);
  out.writeUInt32BE(bytes.length, 0);
  bytes.copy(out, 4);
  return out;
}

/** Computes and checks the receipts of one group. */
export class GroupReceipts {
  readonly #key: KeyObject;
  /** The domain, lane and group: the same for every receipt of the group. */
  readonly #prefix: Buffer;
  readonly #holders = new Map<string, Buffer>();

  constructor(secret: Uint8Array, lane: string, group: string) {
    this.#key = createSecretKey(Buffer.from(secret));
    this.#prefix = Buffer.concat([lengthPrefixed(RECEIPT_DOMAIN), lengthPrefixed(lane), lengthPrefixed(group)]);
  }

  /** The receipt of `holder`'s lease of `sequence` at `attempt` (64 lowercase hex). */
  receipt(holder: string, sequence: number, attempt: number): string {
    let holderBytes = this.#holders.get(holder);
    if (holderBytes === undefined) {
      holderBytes = lengthPrefixed(holder);
      if (this.#holders.size < 1_024) this.#holders.set(holder, holderBytes);
    }
    const numbers = Buffer.allocUnsafe(12);
    numbers.writeBigUInt64BE(BigInt(sequence), 0);
    numbers.writeUInt32BE(attempt >>> 0, 8);
    return createHmac("sha256", this.#key).update(this.#prefix).update(holderBytes).update(numbers).digest("hex");
  }

  /** Whether `receipt` is exactly the receipt of (holder, sequence, attempt); constant time in the receipt. */
  verify(receipt: string, holder: string, sequence: number, attempt: number): boolean {
    const expected = Buffer.from(this.receipt(holder, sequence, attempt), "latin1");
    const given = Buffer.from(receipt, "latin1");
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /** The digest of a recovery request's canonical body (32 bytes): binds its receipts without revealing them. */
  recoveryDigest(canonicalBody: string): Uint8Array {
    return new Uint8Array(createHmac("sha256", this.#key).update(lengthPrefixed(RECOVERY_DOMAIN)).update(canonicalBody, "utf8").digest());
  }
}
