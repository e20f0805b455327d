/**
 * Polls a condition until it holds. Tests wait for outcomes this way instead
 * of asserting on elapsed time: the deadline is only a generous upper bound
 * so a broken build fails instead of hanging.
 */
export async function waitFor<T>(
  probe: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== null && value !== false) return value as NonNullable<T>;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${options.what ?? "condition"}`, { cause: lastError });
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 20));
  }
}
