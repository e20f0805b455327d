/**
 * A wrapper for credential values (project bearer tokens, the operator
 * token) that cannot leak by accident.
 *
 * A token that sits in a plain string ends up in a log line, an error
 * message or a JSON dump the first time someone prints the object holding
 * it. A `Secret` prints as `[redacted]` through every ordinary path —
 * `String()`, template literals, `JSON.stringify`, `console.log` /
 * `util.inspect` — and gives its value only through the deliberately
 * greppable `reveal()`.
 *
 * Comparison is constant-time: both sides are reduced to HMAC-SHA-256
 * digests under a per-process random key and the digests are compared with
 * `crypto.timingSafeEqual`. Digests always have the same length, so the
 * comparison time does not depend on where the values differ or on
 * whether their lengths match, and the random key means an attacker cannot
 * precompute anything about the digests.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { inspect } from "node:util";

const REDACTED = "[redacted]";

/** Per-process key for comparison digests; never leaves this module. */
const compareKey = randomBytes(32);

function digest(value: string | Buffer): Buffer {
  return createHmac("sha256", compareKey).update(value).digest();
}

export class Secret {
  readonly #value: string;

  constructor(value: string) {
    if (typeof value !== "string") throw new TypeError("Secret value must be a string");
    this.#value = value;
    Object.freeze(this);
  }

  /** The secret value itself. Call only where the value must cross a boundary (a header, a hash). */
  reveal(): string {
    return this.#value;
  }

  /** Length of the value in UTF-8 bytes (the unit token bounds are stated in). */
  get byteLength(): number {
    return Buffer.byteLength(this.#value, "utf8");
  }

  /**
   * Constant-time equality with another value. Strings compare by their
   * UTF-8 bytes; a Buffer compares byte for byte.
   */
  equals(other: string | Buffer | Secret): boolean {
    const theirs = other instanceof Secret ? other.#value : other;
    return timingSafeEqual(digest(this.#value), digest(theirs));
  }

  toString(): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  [Symbol.toPrimitive](): string {
    return REDACTED;
  }

  [inspect.custom](): string {
    return REDACTED;
  }
}

/**
 * Constant-time comparison of two plain strings, for callers that hold a
 * presented credential (from a request header) and a stored one.
 */
export function constantTimeEquals(a: string | Buffer, b: string | Buffer): boolean {
  return timingSafeEqual(digest(a), digest(b));
}
