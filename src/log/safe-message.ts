/**
 * Marks error classes whose messages Laneway wrote for callers: fixed
 * templates and identifiers, never a token, address, path or backend text.
 * Logging may keep such a message; any other error is reduced to its class
 * name and code (see `safeErrorFields`).
 */
export const safeMessage: unique symbol = Symbol.for("laneway.safeMessage");

export interface SafeMessageError extends Error {
  readonly [safeMessage]: true;
}

export function hasSafeMessage(error: unknown): error is SafeMessageError {
  return error instanceof Error && (error as Partial<SafeMessageError>)[safeMessage] === true;
}
