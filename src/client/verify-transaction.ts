import { createHash, createPublicKey, verify } from "node:crypto";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { canonicalJson, type Json } from "../encoding/canonical-json.js";
import { canonicalCommand } from "../kmap/canonical-command.js";

/**
 * Client-side verification of a Kmap transaction, as a reader holding only
 * the served public key would do it: the Ed25519 signature must verify over
 * `signed_payload`, and the payload must say exactly what the message's
 * fields say (a tampered field or payload fails).
 *
 * Returns undefined when the transaction verifies, otherwise what is wrong.
 */
export function verifyTransaction(transaction: Transaction, rawPublicKey: Uint8Array): string | undefined {
  const key = createPublicKey({
    key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(rawPublicKey)]),
    format: "der",
    type: "spki",
  });
  if (!verify(null, transaction.signedPayload, key, transaction.signature)) return "the signature does not match the signed payload";
  let payload: Record<string, Json>;
  try {
    payload = JSON.parse(Buffer.from(transaction.signedPayload).toString("utf8")) as Record<string, Json>;
  } catch {
    return "the signed payload is not JSON";
  }
  const keyId = createHash("sha256").update(rawPublicKey).digest("hex").slice(0, 32);
  const expected: Record<string, Json> = {
    schema: "laneway-kmap-transaction-v1",
    id: transaction.id,
    sequence: Number(transaction.sequence),
    provenance: transaction.provenance,
    touched_node_ids: [...transaction.touchedNodeIds],
    created_node_id: transaction.createdNodeId,
    committed_at: transaction.committedAt ? new Date(timestampMs(transaction.committedAt)).toISOString() : "",
    key_id: transaction.keyId,
    previous_digest: Buffer.from(transaction.previousDigest).toString("hex"),
  };
  for (const [field, value] of Object.entries(expected)) {
    if (canonicalJson(payload[field] ?? null) !== canonicalJson(value)) return `the signed payload's ${field} differs from the transaction's`;
  }
  if (transaction.keyId !== keyId) return "the transaction was signed by another key";
  if (!transaction.command || canonicalJson(payload.command ?? null) !== canonicalCommand(transaction.command)) {
    return "the signed payload's command differs from the transaction's";
  }
  return undefined;
}
