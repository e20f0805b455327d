import type { Database, Statement } from "better-sqlite3";

/**
 * The writer's view of the graph tables: the reads and writes the
 * operations need, as prepared statements on the writer connection. Every
 * call runs inside the writer's BEGIN IMMEDIATE transaction, so what it
 * reads cannot change underneath the operation.
 */

/** A node row as the operations need it. */
export interface GraphNode {
  readonly id: string;
  readonly kind: string;
  readonly title: string;
  readonly body: string;
  /** Canonical JSON object of string values. */
  readonly attributes: string;
  readonly parent_id: string | null;
  readonly visible_transaction_id: string;
}

/** A link row. */
export interface GraphLink {
  readonly from_id: string;
  readonly link_type: string;
  readonly to_id: string;
}

/** The values of a new node. */
export interface NewNode {
  readonly id: string;
  readonly kind: string;
  readonly title: string;
  readonly body: string;
  readonly attributes: string;
  readonly parentId: string | null;
  readonly transactionId: string;
  readonly at: number;
}

export class KwebGraph {
  readonly #node: Statement<[string], GraphNode>;
  readonly #parent: Statement<[string], { parent_id: string | null }>;
  readonly #childCount: Statement<[string], { n: number }>;
  readonly #insertNode: Statement<[string, string, string, string, string, string | null, string, string, number, number]>;
  readonly #updateFields: Statement<[string, string, string, string, string]>;
  readonly #setParent: Statement<[string | null, string]>;
  readonly #deleteNode: Statement<[string]>;
  readonly #link: Statement<[string, string, string], { one: number }>;
  readonly #insertLink: Statement<[string, string, string, string]>;
  readonly #deleteLink: Statement<[string, string, string]>;
  readonly #linksTouching: Statement<[string, string], GraphLink>;
  readonly #deleteLinksTouching: Statement<[string, string]>;
  readonly #markVisible: Statement<[string, number, string]>;

  constructor(db: Database) {
    this.#node = db.prepare("SELECT id, kind, title, body, attributes, parent_id, visible_transaction_id FROM nodes WHERE id = ?");
    this.#parent = db.prepare("SELECT parent_id FROM nodes WHERE id = ?");
    this.#childCount = db.prepare("SELECT count(*) AS n FROM nodes WHERE parent_id = ?");
    this.#insertNode = db.prepare(
      `INSERT INTO nodes (id, kind, title, body, attributes, parent_id, visible_transaction_id, created_transaction_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#updateFields = db.prepare("UPDATE nodes SET kind = ?, title = ?, body = ?, attributes = ? WHERE id = ?");
    this.#setParent = db.prepare("UPDATE nodes SET parent_id = ? WHERE id = ?");
    this.#deleteNode = db.prepare("DELETE FROM nodes WHERE id = ?");
    this.#link = db.prepare("SELECT 1 AS one FROM links WHERE from_id = ? AND link_type = ? AND to_id = ?");
    this.#insertLink = db.prepare("INSERT INTO links (from_id, link_type, to_id, created_transaction_id) VALUES (?, ?, ?, ?)");
    this.#deleteLink = db.prepare("DELETE FROM links WHERE from_id = ? AND link_type = ? AND to_id = ?");
    this.#linksTouching = db.prepare("SELECT from_id, link_type, to_id FROM links WHERE from_id = ? OR to_id = ?");
    this.#deleteLinksTouching = db.prepare("DELETE FROM links WHERE from_id = ? OR to_id = ?");
    this.#markVisible = db.prepare("UPDATE nodes SET visible_transaction_id = ?, updated_at = ? WHERE id = ?");
  }

  node(id: string): GraphNode | undefined {
    return this.#node.get(id);
  }

  /** The parent of an existing node (null at the top level); undefined when the node does not exist. */
  parentOf(id: string): string | null | undefined {
    return this.#parent.get(id)?.parent_id;
  }

  childCount(id: string): number {
    return this.#childCount.get(id)?.n ?? 0;
  }

  insertNode(node: NewNode): void {
    this.#insertNode.run(
      node.id,
      node.kind,
      node.title,
      node.body,
      node.attributes,
      node.parentId,
      node.transactionId,
      node.transactionId,
      node.at,
      node.at,
    );
  }

  updateFields(id: string, fields: { kind: string; title: string; body: string; attributes: string }): void {
    this.#updateFields.run(fields.kind, fields.title, fields.body, fields.attributes, id);
  }

  setParent(id: string, parentId: string | null): void {
    this.#setParent.run(parentId, id);
  }

  deleteNode(id: string): void {
    this.#deleteNode.run(id);
  }

  hasLink(fromId: string, linkType: string, toId: string): boolean {
    return this.#link.get(fromId, linkType, toId) !== undefined;
  }

  insertLink(fromId: string, linkType: string, toId: string, transactionId: string): void {
    this.#insertLink.run(fromId, linkType, toId, transactionId);
  }

  deleteLink(fromId: string, linkType: string, toId: string): void {
    this.#deleteLink.run(fromId, linkType, toId);
  }

  /** Every link from or to a node. */
  linksTouching(id: string): GraphLink[] {
    return this.#linksTouching.all(id, id);
  }

  deleteLinksTouching(id: string): void {
    this.#deleteLinksTouching.run(id, id);
  }

  /** Records that a transaction changed a node. */
  markVisible(id: string, transactionId: string, at: number): void {
    this.#markVisible.run(transactionId, at, id);
  }
}
