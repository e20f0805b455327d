import Database from "better-sqlite3";
import type { Database as SqliteDatabase, Statement } from "better-sqlite3";
import { parseCanonicalCommand } from "../canonical-command.js";
import { KwebFailureError } from "./kweb-failure-error.js";
import type { KwebLink, KwebNode } from "./kweb-node.js";
import { checkKwebSchema } from "./kweb-schema.js";
import type { KwebTransaction } from "./signed-transaction.js";
import { publicSigningKey, type PublicSigningKey } from "./signing-key.js";
import { KmapBusyError } from "../errors.js";
import { isLockContention, sqliteCode } from "./sqlite-errors.js";

/**
 * Reads the Kmap and its history for the server, on the main thread, over
 * its own read-only connection. WAL lets it read a consistent snapshot
 * while the worker writes, and the queries are small indexed lookups and
 * bounded pages, so they do not need the worker's isolation. Open it after
 * the writer is ready (the writer creates the file and registers the key).
 *
 * Pages use keyset markers (the last node id, the last sequence) rather
 * than offsets, so a page boundary stays correct while the writer commits.
 */

export interface KwebReaderOptions {
  /**
   * How long a read waits on a lock (WAL readers rarely do: only while
   * another process holds the file in exclusive mode or recovers it);
   * default 1000 ms. The server uses 0: a read on its event loop must never
   * wait, and KmapBusyError lets the caller retry asynchronously.
   */
  readonly busyTimeoutMs?: number;
}

export interface GetNodeParams {
  /** The node's canonical id (32 lowercase hex). */
  readonly nodeId: string;
}

export interface GetTransactionParams {
  /** The transaction's id. */
  readonly transactionId: string;
}

export interface ListNodesOptions {
  /** Start after this node id (the previous page's `nextAfterId`). */
  readonly afterId?: string;
  /** The most nodes to return (at least 1). */
  readonly limit: number;
  /** Only children of this node. */
  readonly parentId?: string;
}

export interface NodePage {
  /** Ordered by id. */
  readonly nodes: readonly KwebNode[];
  /** Pass as `afterId` for the next page; undefined on the last page. */
  readonly nextAfterId: string | undefined;
}

export interface ListTransactionsOptions {
  /** Start after this sequence (the previous page's `nextAfterSequence`). */
  readonly afterSequence?: number;
  /** The most transactions to return (at least 1). */
  readonly limit: number;
  /** Only transactions that touched this node (deleted nodes included). */
  readonly nodeId?: string;
  /** Only the transaction with this provenance. */
  readonly provenance?: string;
}

export interface TransactionPage {
  /** In commit order. */
  readonly transactions: readonly KwebTransaction[];
  /** Pass as `afterSequence` for the next page; undefined on the last page. */
  readonly nextAfterSequence: number | undefined;
}

interface NodeRow {
  id: string;
  kind: string;
  title: string;
  body: string;
  attributes: string;
  parent_id: string | null;
  visible_transaction_id: string;
  created_transaction_id: string;
  created_at: number;
  updated_at: number;
}

interface TransactionRow {
  sequence: number;
  id: string;
  provenance: string;
  command: string;
  touched_node_ids: string;
  created_node_id: string | null;
  committed_at: number;
  signed_payload: Buffer;
  signature: Buffer;
  key_id: string;
  previous_digest: string;
}

const nodeColumns =
  "id, kind, title, body, attributes, parent_id, visible_transaction_id, created_transaction_id, created_at, updated_at";
const transactionColumns =
  "t.sequence, t.id, t.provenance, t.command, t.touched_node_ids, t.created_node_id, t.committed_at, t.signed_payload, t.signature, t.key_id, t.previous_digest";

/** Keeps limits sane so a bad caller value cannot ask SQLite for everything or nothing. */
function pageLimit(limit: number): number {
  if (!Number.isFinite(limit) || limit < 1) return 1;
  return Math.floor(limit);
}

export class KwebReader {
  readonly #db: SqliteDatabase;
  readonly #node: Statement<[string], NodeRow>;
  readonly #links: Statement<[string], { from_id: string; link_type: string; to_id: string }>;
  readonly #nodesAfter: Statement<[string, number], NodeRow>;
  readonly #childrenAfter: Statement<[string, string, number], NodeRow>;
  readonly #transaction: Statement<[string], TransactionRow>;
  readonly #transactionsAfter: Statement<[{ after: number; node: string | null; provenance: string | null; limit: number }], TransactionRow>;
  readonly #activeKey: Statement<[], { public_key: Buffer }>;

  private constructor(db: SqliteDatabase) {
    this.#db = db;
    this.#node = db.prepare(`SELECT ${nodeColumns} FROM nodes WHERE id = ?`);
    this.#links = db.prepare("SELECT from_id, link_type, to_id FROM links WHERE from_id = ? ORDER BY link_type, to_id");
    this.#nodesAfter = db.prepare(`SELECT ${nodeColumns} FROM nodes WHERE id > ? ORDER BY id LIMIT ?`);
    this.#childrenAfter = db.prepare(`SELECT ${nodeColumns} FROM nodes WHERE parent_id = ? AND id > ? ORDER BY id LIMIT ?`);
    this.#transaction = db.prepare(`SELECT ${transactionColumns} FROM transactions t WHERE t.id = ?`);
    this.#transactionsAfter = db.prepare(
      `SELECT ${transactionColumns} FROM transactions t
       WHERE t.sequence > @after
         AND (@node IS NULL OR t.sequence IN (SELECT sequence FROM transaction_nodes WHERE node_id = @node))
         AND (@provenance IS NULL OR t.provenance = @provenance)
       ORDER BY t.sequence LIMIT @limit`,
    );
    this.#activeKey = db.prepare(
      "SELECT k.public_key FROM signing_keys k JOIN kweb_meta m ON m.key = 'active_key_id' AND m.value = k.key_id",
    );
  }

  /**
   * Opens a read-only connection to a Kweb file a writer has created.
   * Throws KwebFailureError when the file is missing, not a Kweb file, or
   * of another schema version.
   */
  static open(databasePath: string, options: KwebReaderOptions = {}): KwebReader {
    let db: SqliteDatabase | undefined;
    try {
      db = new Database(databasePath, { readonly: true, fileMustExist: true, timeout: options.busyTimeoutMs ?? 1000 });
      checkKwebSchema(db);
      return new KwebReader(db);
    } catch (error) {
      db?.close();
      if (error instanceof KwebFailureError) throw error;
      if (sqliteCode(error) === "SQLITE_NOTADB") {
        throw new KwebFailureError("unsupported_schema", "the Kweb file is not a SQLite database", { cause: error });
      }
      throw new KwebFailureError("storage_failed", "the Kweb file cannot be opened for reading", { cause: error });
    }
  }

  /** The node, or undefined when it was never created or has been deleted. */
  getNode({ nodeId }: GetNodeParams): KwebNode | undefined {
    return this.#read(() => {
      const row = this.#node.get(nodeId);
      return row === undefined ? undefined : this.#toNode(row);
    });
  }

  /** One page of nodes ordered by id, optionally only the children of `parentId`. */
  listNodes(options: ListNodesOptions): NodePage {
    return this.#read(() => {
      const limit = pageLimit(options.limit);
      const after = options.afterId ?? "";
      const rows =
        options.parentId === undefined
          ? this.#nodesAfter.all(after, limit + 1)
          : this.#childrenAfter.all(options.parentId, after, limit + 1);
      const more = rows.length > limit;
      const nodes = rows.slice(0, limit).map((row) => this.#toNode(row));
      return { nodes, nextAfterId: more ? nodes[nodes.length - 1]?.id : undefined };
    });
  }

  /** The transaction, or undefined when there is none with this id. */
  getTransaction({ transactionId }: GetTransactionParams): KwebTransaction | undefined {
    return this.#read(() => {
      const row = this.#transaction.get(transactionId);
      return row === undefined ? undefined : toTransaction(row);
    });
  }

  /** One page of history in commit order, optionally filtered by touched node and/or provenance. */
  listTransactions(options: ListTransactionsOptions): TransactionPage {
    return this.#read(() => {
      const limit = pageLimit(options.limit);
      const rows = this.#transactionsAfter.all({
        after: options.afterSequence ?? 0,
        node: options.nodeId ?? null,
        provenance: options.provenance ?? null,
        limit: limit + 1,
      });
      const more = rows.length > limit;
      const transactions = rows.slice(0, limit).map(toTransaction);
      return { transactions, nextAfterSequence: more ? transactions[transactions.length - 1]?.sequence : undefined };
    });
  }

  /** The public key that signs new transactions. */
  signingKey(): PublicSigningKey {
    return this.#read(() => {
      const row = this.#activeKey.get();
      if (row === undefined) throw new KwebFailureError("signing_key_invalid", "the Kweb file has no active signing key");
      return publicSigningKey(new Uint8Array(row.public_key));
    });
  }

  close(): void {
    if (this.#db.open) this.#db.close();
  }

  #toNode(row: NodeRow): KwebNode {
    const links: KwebLink[] = this.#links.all(row.id).map((link) => ({ fromId: link.from_id, toId: link.to_id, linkType: link.link_type }));
    return {
      id: row.id,
      kind: row.kind,
      title: row.title,
      body: row.body,
      attributes: JSON.parse(row.attributes) as Record<string, string>,
      parentId: row.parent_id ?? undefined,
      links,
      visibleTransactionId: row.visible_transaction_id,
      createdTransactionId: row.created_transaction_id,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
    };
  }

  /**
   * Runs a read in one SQLite read transaction, so a node and its links (or
   * a page) come from the same snapshot, and turns SQLite failures into
   * KwebFailureError — or KmapBusyError (`unavailable`) when a lock held
   * elsewhere stopped the read.
   */
  #read<T>(read: () => T): T {
    try {
      return this.#db.transaction(read).deferred();
    } catch (error) {
      if (error instanceof KwebFailureError) throw error;
      if (isLockContention(error)) throw new KmapBusyError("the Kweb file", { cause: error });
      throw new KwebFailureError("storage_failed", "the Kweb file could not be read", { cause: error });
    }
  }
}

function toTransaction(row: TransactionRow): KwebTransaction {
  return {
    id: row.id,
    sequence: row.sequence,
    provenance: row.provenance,
    command: parseCanonicalCommand(row.command),
    touchedNodeIds: JSON.parse(row.touched_node_ids) as string[],
    createdNodeId: row.created_node_id ?? undefined,
    committedAt: row.committed_at,
    signedPayload: new Uint8Array(row.signed_payload),
    signature: new Uint8Array(row.signature),
    keyId: row.key_id,
    previousDigest: row.previous_digest,
  };
}
