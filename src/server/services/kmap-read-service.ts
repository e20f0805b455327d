import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { KmapReadService, LinkSchema, NodeSchema, TransactionSchema, type Node, type Transaction } from "../../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { KmapError, retryWhileBusy } from "../../kmap/index.js";
import type { KwebNode, KwebReader, KwebTransaction } from "../../kmap/index.js";
import { decodeIdPageToken, decodePageToken, encodePageToken, pageSize } from "../paging.js";
import { callSignal } from "./call-signal.js";

/**
 * KmapReadService: reads of the Kmap and its signed history, mapped to the
 * contract. The reader never waits for a lock on the event loop; a read that
 * meets one is retried asynchronously (retryWhileBusy).
 */

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
    async getNode(req, ctx) {
      const node = await retryWhileBusy(() => reader.getNode({ nodeId: req.nodeId }), { signal: callSignal(ctx) });
      if (!node) throw new KmapError("not_found", `node ${req.nodeId} does not exist`);
      return { node: nodeMessage(node) };
    },

    async listNodes(req, ctx) {
      const afterId = decodeIdPageToken(req.pageToken, canonicalId) || undefined;
      const page = await retryWhileBusy(() => reader.listNodes({ afterId, limit: pageSize(req.pageSize), parentId: req.parentId || undefined }), {
        signal: callSignal(ctx),
      });
      return { nodes: page.nodes.map(nodeMessage), nextPageToken: page.nextAfterId ?? "" };
    },

    async getTransaction(req, ctx) {
      const tx = await retryWhileBusy(() => reader.getTransaction({ transactionId: req.transactionId }), { signal: callSignal(ctx) });
      if (!tx) throw new KmapError("not_found", `transaction ${req.transactionId} does not exist`);
      return { transaction: transactionMessage(tx) };
    },

    async listTransactions(req, ctx) {
      const afterSequence = decodePageToken(req.pageToken);
      const page = await retryWhileBusy(
        () => reader.listTransactions({ afterSequence, limit: pageSize(req.pageSize), nodeId: req.nodeId || undefined, provenance: req.provenance || undefined }),
        { signal: callSignal(ctx) },
      );
      return {
        transactions: page.transactions.map(transactionMessage),
        nextPageToken: page.nextAfterSequence === undefined ? "" : encodePageToken(page.nextAfterSequence),
      };
    },

    async getSigningKey(_req, ctx) {
      const key = await retryWhileBusy(() => reader.signingKey(), { signal: callSignal(ctx) });
      return { algorithm: key.algorithm, publicKey: key.publicKey, publicKeyPem: key.publicKeyPem, keyId: key.keyId };
    },
  };
}
