/**
 * The raw SQLite baseline of the kmap-lane benchmark, run as its own
 * process: better-sqlite3 inserting rows like the lane's Queued record
 * (into the lane's own `commands` table, created beforehand by CommandStore, a ~300 B canonical submission with a fresh
 * 32-hex idempotency id) into a WAL database with synchronous=FULL, one
 * IMMEDIATE transaction (one fsync) per insert, as fast as it can for
 * `seconds`.
 *
 * Shapes:
 * - "row": one INSERT per transaction (the baseline the ratios use);
 * - "submit": the same statements as the lane's submit transaction
 *   (look up the id, insert the record, insert its change-log row with
 *   INSERT … SELECT, read the change back), still one transaction.
 *
 * Several copies may run at once on the same file (writers then queue on
 * SQLite's write lock, busy_timeout 5 s, as in the lane); `startAt` (epoch
 * ms) makes them start inserting at the same moment.
 *
 * Usage (argv[2] is JSON): {path, seconds, shape: "row"|"submit", startAt?}
 * Prints {completed, seconds, startedAt}.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { storedSubmission } from "./kmap-bench-command.js";

interface BaselineSpec {
  path: string;
  seconds: number;
  shape: "row" | "submit";
  startAt?: number;
}

const spec = JSON.parse(process.argv[2]!) as BaselineSpec;

const db = new Database(spec.path);
db.pragma("journal_mode = WAL");
db.pragma("synchronous = FULL");
db.pragma("foreign_keys = ON");
db.pragma("busy_timeout = 5000");
// The file already holds the lane's schema: bench/kmap-lane.ts creates it with the lane's CommandStore.

const byId = db.prepare<[string], { sequence: number }>("SELECT sequence FROM commands WHERE idempotency_id = ?");
const insert = db.prepare<[string, string, number, number, number]>(
  "INSERT INTO commands (idempotency_id, submission, state, submitted_at, attempts, next_attempt_at, updated_at) VALUES (?, ?, 'queued', ?, 0, ?, ?)",
);
const insertEvent = db.prepare<[string, number, number]>(
  `INSERT INTO command_events (sequence, kind, state, attempts, next_attempt_at, transaction_id, created_node_id, error_code, error_message, changed_at)
   SELECT sequence, ?, state, attempts, next_attempt_at, transaction_id, created_node_id, error_code, error_message, ? FROM commands WHERE sequence = ?`,
);
const readEvent = db.prepare<[number], unknown>(
  "SELECT e.position, e.kind, c.sequence, c.submission FROM command_events e JOIN commands c ON c.sequence = e.sequence WHERE e.position = ?",
);

const insertRow = db.transaction((id: string, now: number) => {
  insert.run(id, storedSubmission(id), now, now, now);
});
const submitLike = db.transaction((id: string, now: number) => {
  if (byId.get(id)) throw new Error(`duplicate id ${id}`);
  const { lastInsertRowid } = insert.run(id, storedSubmission(id), now, now, now);
  const event = insertEvent.run("queued", now, Number(lastInsertRowid));
  readEvent.get(Number(event.lastInsertRowid));
});
const write = spec.shape === "submit" ? submitLike.immediate : insertRow.immediate;

if (spec.startAt !== undefined && spec.startAt > Date.now()) await sleep(spec.startAt - Date.now());
const startedAt = Date.now();
const deadline = startedAt + spec.seconds * 1000;
let completed = 0;
while (Date.now() < deadline) {
  write(randomBytes(16).toString("hex"), Date.now());
  completed++;
}
const seconds = (Date.now() - startedAt) / 1000;
db.close();
process.stdout.write(JSON.stringify({ completed, seconds, startedAt }) + "\n");
