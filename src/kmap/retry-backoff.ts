/**
 * When a deferred command is tried again: exponential backoff from one
 * second, doubling with every attempt, bounded at 60 seconds, as the
 * specification requires. `attempts` counts the attempts made so far
 * (1 after the first).
 */
export const FIRST_RETRY_DELAY_MS = 1_000;
export const MAX_RETRY_DELAY_MS = 60_000;

export function retryDelayMs(attempts: number): number {
  const exponent = Math.max(0, attempts - 1);
  // 2^6 already exceeds the bound; avoid huge powers for long outages.
  return exponent >= 6 ? MAX_RETRY_DELAY_MS : Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** exponent);
}
