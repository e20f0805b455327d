import Database from "better-sqlite3";
/**
 * Takes the write lock of a SQLite file from the test's own connection
 * (BEGIN IMMEDIATE), as another process could, until `release`.
 */
export function holdWriteLock(path: string): { release(): void } {
  const db = new Database(path, { timeout: 10_000 });
  try {
    db.exec("BEGIN IMMEDIATE");
  } catch (error) {
    db.close();
    throw error;
  }
  return {
    release() {
      if (!db.open) return;
      if (db.inTransaction) db.exec("ROLLBACK");
      db.close();
    },
  };
}
