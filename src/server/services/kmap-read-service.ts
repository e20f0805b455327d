import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { KmapReadService, LinkSchema, NodeSchema, TransactionSchema, type Node, type Transaction } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { KmapError } from "../../kmap/index.js";
import type { KwebNode, KwebReader, KwebTransaction } from "../../kmap/index.js";
import { decodeIdPageToken, decodePageToken, encodePageToken, pageSize } from "../paging.js";

/** KmapReadService: reads of the Kmap and its signed history, mapped to the contract. */

function nodeMessage(node: KwebNode): Node {
  return create(NodeSchema, {
    id: node.id,
    kind: node.kind,
    title: node.title,
    body: node.body,
    attributes: { ...node.attributes },
    parentId: node.parentId ?? "",
    links: node.links.map((link) => create(LinkSchema, link)),
    visibleTransactionId: node.visibleTransactionId,
    createdTransactionId: node.createdTransactionId,
    createdAt: timestampFromMs(node.createdAt),
    updatedAt: timestampFromMs(node.updatedAt),
  });
}

function transactionMessage(tx: KwebTransaction): Transaction {
  return create(TransactionSchema, {
    id: tx.id,
    sequence: BigInt(tx.sequence),
    provenance: tx.provenance,
    command: tx.command,
    touchedNodeIds: [...tx.touchedNodeIds],
    createdNodeId: tx.createdNodeId ?? "",
    committedAt: timestampFromMs(tx.committedAt),
    signedPayload: tx.signedPayload,
    signature: tx.signature,
    keyId: tx.keyId,
    previousDigest: Buffer.from(tx.previousDigest, "hex"),
  });
}

const canonicalId = /^[0-9a-f]{32}$/;

export function kmapReadServiceImpl(reader: KwebReader): ServiceImpl<typeof KmapReadService> {
  return {
    getNode(req) {
      const node = reader.getNode(req.nodeId);
      if (!node) throw new KmapError("not_found", `node ${req.nodeId} does not exist`);
      return { node: nodeMessage(node) };
    },

    listNodes(req) {
      const page = reader.listNodes({
        afterId: decodeIdPageToken(req.pageToken, canonicalId) || undefined,
        limit: pageSize(req.pageSize),
        parentId: req.parentId || undefined,
      });
      return { nodes: page.nodes.map(nodeMessage), nextPageToken: page.nextAfterId ?? "" };
    },

    getTransaction(req) {
      const tx = reader.getTransaction(req.transactionId);
      if (!tx) throw new KmapError("not_found", `transaction ${req.transactionId} does not exist`);
      return { transaction: transactionMessage(tx) };
    },

    listTransactions(req) {
      const page = reader.listTransactions({
        afterSequence: decodePageToken(req.pageToken),
        limit: pageSize(req.pageSize),
        nodeId: req.nodeId || undefined,
        provenance: req.provenance || undefined,
      });
      return {
        transactions: page.transactions.map(transactionMessage),
        nextPageToken: page.nextAfterSequence === undefined ? "" : encodePageToken(page.nextAfterSequence),
      };
    },

    getSigningKey() {
      const key = reader.signingKey();
      return { algorithm: key.algorithm, publicKey: key.publicKey, publicKeyPem: key.publicKeyPem, keyId: key.keyId };
    },
  };
}
