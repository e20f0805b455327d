/**
 * Classifies SQLite failures. Only a held lock (SQLITE_BUSY, SQLITE_LOCKED
 * and their extended codes) means "the writer is unavailable, try later";
 * everything else is a failure of the Kweb itself.
 */
export function isLockContention(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/** The SQLite result code of an error, when it has one. */
export function sqliteCode(error: unknown): string | undefined {
  const code = error instanceof Error ? (error as { code?: unknown }).code : undefined;
  return typeof code === "string" && code.startsWith("SQLITE_") ? code : undefined;
}
