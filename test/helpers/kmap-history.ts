/**
 * A long command lane history written straight into a data directory's
 * `kmap/commands.sqlite`, for tests that need more change-log entries than
 * they could submit in reasonable time: the lane's own CommandStore creates
 * the file and its schema, then one SQLite transaction inserts `commands`
 * finished records (Committed), each with its three changes (queued,
 * applying, committed), exactly as the runtime writes them. The Kweb has no
 * transactions for them; nothing that reads the change log looks.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { CommandStore } from "../../src/kmap/internal.js";

/** The idempotency id of the n-th command of a written history (1-based). */
export const historyId = (n: number) => n.toString(16).padStart(32, "0");

/** Writes `commands` committed records and 3 × `commands` change-log entries; returns the last position. */
export function writeCommandHistory(dataDir: string, commands: number): number {
  const directory = join(dataDir, "kmap");
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  const path = join(directory, "commands.sqlite");
  new CommandStore(path).close();
  const db = new Database(path);
  try {
    db.pragma("journal_mode = WAL");
    const insert = db.prepare<[string, string, number, string, number]>(
      `INSERT INTO commands (idempotency_id, submission, state, submitted_at, attempts, next_attempt_at, transaction_id, created_node_id, updated_at)
       VALUES (?, ?, 'committed', ?, 1, NULL, ?, NULL, ?)`,
    );
    const event = db.prepare<[number, string, string, number, string | null, number]>(
      `INSERT INTO command_events (sequence, kind, state, attempts, next_attempt_at, transaction_id, created_node_id, error_code, error_message, changed_at)
       VALUES (?, ?, ?, ?, NULL, ?, NULL, NULL, NULL, ?)`,
    );
    const now = Date.now();
    db.transaction(() => {
      for (let n = 1; n <= commands; n++) {
        const id = historyId(n);
        const submission = JSON.stringify({
          command: { update_node: { node_id: "f".repeat(32), title: `history ${n}` } },
          expected_transaction_ids: {},
          idempotency_id: id,
        });
        const transaction = n.toString(16).padStart(32, "a");
        const { lastInsertRowid } = insert.run(id, submission, now, transaction, now);
        const sequence = Number(lastInsertRowid);
        event.run(sequence, "queued", "queued", 0, null, now);
        event.run(sequence, "applying", "applying", 1, null, now);
        event.run(sequence, "committed", "committed", 1, transaction, now);
      }
    })();
    return Number((db.prepare("SELECT max(position) AS p FROM command_events").get() as { p: number }).p);
  } finally {
    db.close();
  }
}
