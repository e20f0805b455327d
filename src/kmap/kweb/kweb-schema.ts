import type { Database } from "better-sqlite3";
import { KwebFailureError } from "./kweb-failure-error.js";

/**
 * The Kweb file's schema. One SQLite file holds one Kmap graph and its
 * signed history:
 *
 * - `nodes`: the graph's nodes as of the latest transaction. Attributes are
 *   canonical JSON so equal attribute sets are equal text.
 *   `visible_transaction_id` is the last transaction that changed the node:
 *   the value commands quote as their expectation.
 * - `links`: typed directed links, unique per (from, type, to).
 * - `transactions`: one row per applied command in commit order. The UNIQUE
 *   `provenance` (the command's idempotency id) is what makes applying
 *   exactly-once: the writer looks it up before applying. `signed_payload`
 *   holds the exact bytes that were signed.
 * - `transaction_nodes`: node → transactions that touched it, so history by
 *   node needs no scan (and survives the node's deletion).
 * - `signing_keys`: every public key that ever signed here, so history stays
 *   verifiable if the key file is ever replaced; `kweb_meta.active_key_id`
 *   names the current one.
 * - `kweb_meta`: the schema version row and the active key id.
 *
 * Foreign keys to `transactions` are deferred: a transaction's row is
 * written after the graph changes it records, within the same SQLite
 * transaction.
 */

/** The schema version this code writes and reads. */
export const KWEB_SCHEMA_VERSION = 1;

const schema = `
CREATE TABLE kweb_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;

CREATE TABLE signing_keys (
  key_id TEXT PRIMARY KEY,
  public_key BLOB NOT NULL CHECK (length(public_key) = 32),
  registered_at INTEGER NOT NULL
) STRICT;

CREATE TABLE transactions (
  sequence INTEGER PRIMARY KEY CHECK (sequence >= 1),
  id TEXT NOT NULL UNIQUE CHECK (length(id) = 32),
  provenance TEXT NOT NULL UNIQUE,
  command TEXT NOT NULL,
  touched_node_ids TEXT NOT NULL,
  created_node_id TEXT,
  committed_at INTEGER NOT NULL,
  signed_payload BLOB NOT NULL,
  signature BLOB NOT NULL,
  key_id TEXT NOT NULL REFERENCES signing_keys (key_id),
  previous_digest TEXT NOT NULL CHECK (length(previous_digest) = 64)
) STRICT;

CREATE TABLE nodes (
  id TEXT PRIMARY KEY CHECK (length(id) = 32),
  kind TEXT NOT NULL,
  title TEXT NOT NULL,
  body TEXT NOT NULL,
  attributes TEXT NOT NULL,
  parent_id TEXT REFERENCES nodes (id),
  visible_transaction_id TEXT NOT NULL REFERENCES transactions (id) DEFERRABLE INITIALLY DEFERRED,
  created_transaction_id TEXT NOT NULL REFERENCES transactions (id) DEFERRABLE INITIALLY DEFERRED,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX nodes_by_parent ON nodes (parent_id, id);

CREATE TABLE links (
  from_id TEXT NOT NULL REFERENCES nodes (id),
  link_type TEXT NOT NULL,
  to_id TEXT NOT NULL REFERENCES nodes (id),
  created_transaction_id TEXT NOT NULL REFERENCES transactions (id) DEFERRABLE INITIALLY DEFERRED,
  PRIMARY KEY (from_id, link_type, to_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX links_by_target ON links (to_id);

CREATE TABLE transaction_nodes (
  node_id TEXT NOT NULL,
  sequence INTEGER NOT NULL REFERENCES transactions (sequence) DEFERRABLE INITIALLY DEFERRED,
  PRIMARY KEY (node_id, sequence)
) STRICT, WITHOUT ROWID;
`;

/** The schema version recorded in the file, or undefined for an empty file. */
function recordedVersion(db: Database): number | undefined {
  const hasMeta = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'kweb_meta'").get();
  if (hasMeta === undefined) {
    const tables = db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE type = 'table'").get() as { n: number };
    if (tables.n > 0) throw new KwebFailureError("unsupported_schema", "the Kweb file is a SQLite database without a Kweb schema");
    return undefined;
  }
  const row = db.prepare("SELECT value FROM kweb_meta WHERE key = 'schema_version'").get() as { value: string } | undefined;
  const version = row === undefined ? Number.NaN : Number(row.value);
  if (!Number.isInteger(version) || version < 1) {
    throw new KwebFailureError("unsupported_schema", "the Kweb file has no valid schema version row");
  }
  return version;
}

function refuseOtherVersion(version: number): void {
  if (version > KWEB_SCHEMA_VERSION) {
    throw new KwebFailureError(
      "unsupported_schema",
      `the Kweb file has schema version ${version}, newer than this Laneway understands (${KWEB_SCHEMA_VERSION}); upgrade Laneway`,
    );
  }
  if (version < KWEB_SCHEMA_VERSION) {
    throw new KwebFailureError("unsupported_schema", `the Kweb file has schema version ${version}, which this Laneway cannot migrate`);
  }
}

/**
 * Creates the schema in an empty file, or checks that an existing file has
 * this code's version. Creation runs under BEGIN IMMEDIATE and re-checks
 * inside, so two writers starting at once cannot both create it.
 */
export function prepareKwebSchema(db: Database): void {
  const version = recordedVersion(db);
  if (version !== undefined) {
    refuseOtherVersion(version);
    return;
  }
  db.transaction(() => {
    const again = recordedVersion(db);
    if (again !== undefined) {
      refuseOtherVersion(again);
      return;
    }
    db.exec(schema);
    db.prepare("INSERT INTO kweb_meta (key, value) VALUES ('schema_version', ?)").run(String(KWEB_SCHEMA_VERSION));
  }).immediate();
}

/** Checks, without writing, that a file has this code's schema (for readers). */
export function checkKwebSchema(db: Database): void {
  const version = recordedVersion(db);
  if (version === undefined) throw new KwebFailureError("unsupported_schema", "the Kweb file has not been initialised by a Kweb writer");
  refuseOtherVersion(version);
}
