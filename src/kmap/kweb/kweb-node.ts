/**
 * The Kmap graph as readers see it: plain values, so the server can map
 * them to its Protobuf messages and tests can compare them directly.
 */

/** A typed, directed link between two nodes. */
export interface KwebLink {
  readonly fromId: string;
  readonly toId: string;
  readonly linkType: string;
}

/** One node as of the latest transaction. */
export interface KwebNode {
  /** The canonical id: 32 lowercase hex characters. */
  readonly id: string;
  readonly kind: string;
  readonly title: string;
  readonly body: string;
  readonly attributes: Readonly<Record<string, string>>;
  /** The parent's id; undefined for a top-level node. */
  readonly parentId: string | undefined;
  /** Outgoing links, ordered by type then target. */
  readonly links: readonly KwebLink[];
  /** The last transaction that changed the node: what commands must expect. */
  readonly visibleTransactionId: string;
  /** The transaction that created the node. */
  readonly createdTransactionId: string;
  /** Epoch milliseconds. */
  readonly createdAt: number;
  /** Epoch milliseconds of the last change (the visible transaction's commit). */
  readonly updatedAt: number;
}
