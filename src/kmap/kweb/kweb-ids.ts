import { randomBytes } from "node:crypto";

/**
 * Kweb identifiers (node ids and transaction ids): 32 lowercase hexadecimal
 * characters from 16 random bytes. Random rather than sequential so an id
 * says nothing about order or volume and never collides across Kweb files.
 */
export function newKwebId(): string {
  return randomBytes(16).toString("hex");
}

const canonicalId = /^[0-9a-f]{32}$/;

/** Whether `value` is a canonical Kweb id. */
export function isCanonicalKwebId(value: string): boolean {
  return canonicalId.test(value);
}
