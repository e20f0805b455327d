/**
 * Rules every bearer token shares: project tokens (from a core's
 * configuration) and the operator token (`LANEWAY_ADMIN_TOKEN`).
 *
 * Tokens travel in an HTTP header as `Authorization: Bearer <token>`: a
 * space, a control character or a non-ASCII byte would make a token
 * impossible to present, so tokens are visible ASCII only. Their length is
 * the specification's 32–4,096 bytes.
 */
import type { Secret } from "./secret.js";

export const TOKEN_RULES = Object.freeze({
  /** Shortest token, in bytes. */
  minBytes: 32,
  /** Longest token, in bytes. */
  maxBytes: 4_096,
  /** Visible ASCII, no spaces. */
  characters: /^[\x21-\x7e]*$/,
});

/** The operator token's variable; every project token must differ from it. */
export const ADMIN_TOKEN_ENV = "LANEWAY_ADMIN_TOKEN";

/**
 * What is wrong with a token, as the end of a sentence naming it ("must be
 * 32 to 4096 bytes, got 12"), or undefined when it is acceptable. Never
 * quotes the token.
 */
export function tokenProblem(token: Secret): string | undefined {
  const { minBytes, maxBytes, characters } = TOKEN_RULES;
  if (token.byteLength < minBytes || token.byteLength > maxBytes) {
    return `must be ${minBytes} to ${maxBytes} bytes, got ${token.byteLength}`;
  }
  if (!characters.test(token.reveal())) return "must be visible ASCII without spaces";
  return undefined;
}
