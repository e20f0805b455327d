import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { verifyTransaction as verifyKwebTransaction } from "../kmap/signature.js";

/**
 * Client-side verification of a Kmap transaction as returned by
 * KmapReadService, with only the served public key: the Ed25519 signature
 * must verify over `signed_payload`, and the payload must say exactly what
 * the message's fields say (a tampered field or payload fails).
 *
 * Returns undefined when the transaction verifies, otherwise what is wrong.
 */
export function verifyTransaction(transaction: Transaction, rawPublicKey: Uint8Array): string | undefined {
  if (!transaction.command || !transaction.committedAt) return "the transaction has no command or commit time";
  const result = verifyKwebTransaction(
    {
      id: transaction.id,
      sequence: Number(transaction.sequence),
      provenance: transaction.provenance,
      command: transaction.command,
      touchedNodeIds: transaction.touchedNodeIds,
      createdNodeId: transaction.createdNodeId || undefined,
      committedAt: timestampMs(transaction.committedAt),
      signedPayload: transaction.signedPayload,
      signature: transaction.signature,
      keyId: transaction.keyId,
      previousDigest: Buffer.from(transaction.previousDigest).toString("hex"),
    },
    rawPublicKey,
  );
  return result.valid ? undefined : result.reason;
}
