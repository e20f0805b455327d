import { verify, type KeyObject } from "node:crypto";
import type { Command } from "../../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalJson, type Json } from "../../encoding/canonical-json.js";
import { canonicalCommand } from "../canonical-command.js";
import { ed25519PublicKey, signingKeyId, type PublicSigningKey } from "./signing-key.js";

/**
 * A signed Kweb transaction: one applied command.
 *
 * What is signed is `signed_payload`, the canonical JSON of the
 * transaction's fields (see `transactionPayload`), stored byte for byte.
 * Storing the bytes rather than re-deriving them means a verifier never
 * depends on this code serialising the same way in a later version; it
 * checks the signature over the stored bytes and that those bytes say what
 * the transaction's fields say.
 */

/** The `schema` value inside every signed payload. */
export const TRANSACTION_PAYLOAD_SCHEMA = "laneway-kmap-transaction-v1";

/** The previous digest of the first transaction: 32 zero bytes, in hex. */
export const ZERO_DIGEST = "0".repeat(64);

/** One transaction of Kweb history. */
export interface KwebTransaction {
  /** 32 lowercase hex characters. */
  readonly id: string;
  /** Commit order, starting at 1. */
  readonly sequence: number;
  /** The command's idempotency id. */
  readonly provenance: string;
  /** The applied command. */
  readonly command: Command;
  /** Every node the command changed, sorted. */
  readonly touchedNodeIds: readonly string[];
  /** The node a create_node command created. */
  readonly createdNodeId: string | undefined;
  /** When it committed, epoch milliseconds. */
  readonly committedAt: number;
  /** The exact bytes that were signed. */
  readonly signedPayload: Uint8Array;
  /** The Ed25519 signature of signedPayload (64 bytes). */
  readonly signature: Uint8Array;
  /** The signing key's id. */
  readonly keyId: string;
  /** Hex SHA-256 of the previous transaction's signed payload (ZERO_DIGEST for the first). */
  readonly previousDigest: string;
}

/** The fields a signed payload carries. */
export interface TransactionPayloadFields {
  readonly id: string;
  readonly sequence: number;
  readonly provenance: string;
  /** The command's canonical text (`canonicalCommand`). */
  readonly canonicalCommand: string;
  readonly touchedNodeIds: readonly string[];
  readonly createdNodeId: string | undefined;
  readonly committedAt: number;
  readonly keyId: string;
  readonly previousDigest: string;
}

/** The UTF-8 canonical JSON bytes that get signed. */
export function transactionPayload(fields: TransactionPayloadFields): Uint8Array {
  const payload: Json = {
    schema: TRANSACTION_PAYLOAD_SCHEMA,
    id: fields.id,
    sequence: fields.sequence,
    provenance: fields.provenance,
    command: JSON.parse(fields.canonicalCommand) as Json,
    touched_node_ids: [...fields.touchedNodeIds].sort(),
    created_node_id: fields.createdNodeId ?? "",
    committed_at: new Date(fields.committedAt).toISOString(),
    key_id: fields.keyId,
    previous_digest: fields.previousDigest,
  };
  return new Uint8Array(Buffer.from(canonicalJson(payload), "utf8"));
}

/** The result of a verification; `reason` says what did not hold. */
export type Verification = { readonly valid: true } | { readonly valid: false; readonly reason: string };

const payloadKeys = [
  "command",
  "committed_at",
  "created_node_id",
  "id",
  "key_id",
  "previous_digest",
  "provenance",
  "schema",
  "sequence",
  "touched_node_ids",
].join(",");

function invalid(reason: string): Verification {
  return { valid: false, reason };
}

function publicKeyObject(key: Uint8Array | string | PublicSigningKey): { object: KeyObject; keyId: string } | undefined {
  try {
    if (typeof key === "object" && "publicKey" in key) key = key.publicKey;
    const object = ed25519PublicKey(key);
    const x = object.export({ format: "jwk" }).x;
    if (typeof x !== "string") return undefined;
    return { object, keyId: signingKeyId(Buffer.from(x, "base64url")) };
  } catch {
    return undefined;
  }
}

function decodePayload(bytes: Uint8Array): Record<string, Json> | undefined {
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    const value = JSON.parse(text) as Json;
    if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
    // Only the canonical form is accepted, so a payload has one spelling.
    if (canonicalJson(value) !== text) return undefined;
    return value as Record<string, Json>;
  } catch {
    return undefined;
  }
}

/**
 * Checks a transaction against a public key (raw 32 bytes, SPKI PEM or the
 * published key): the key id matches, the signature over `signedPayload`
 * holds, and the payload's fields equal the transaction's fields. Any
 * altered field, payload byte or signature byte makes it invalid.
 */
export function verifyTransaction(transaction: KwebTransaction, publicKey: Uint8Array | string | PublicSigningKey): Verification {
  const key = publicKeyObject(publicKey);
  if (key === undefined) return invalid("the public key is not an Ed25519 public key");
  if (transaction.keyId !== key.keyId) return invalid(`transaction ${transaction.id} was signed by key ${transaction.keyId}, not by key ${key.keyId}`);
  const signatureHolds =
    transaction.signature.length === 64 && verify(null, transaction.signedPayload, key.object, transaction.signature);
  if (!signatureHolds) return invalid(`the signature of transaction ${transaction.id} does not match its signed payload`);

  const payload = decodePayload(transaction.signedPayload);
  if (payload === undefined) return invalid(`the signed payload of transaction ${transaction.id} is not canonical JSON`);
  if (Object.keys(payload).sort().join(",") !== payloadKeys) {
    return invalid(`the signed payload of transaction ${transaction.id} does not have exactly the transaction fields`);
  }

  let command: string;
  try {
    command = canonicalCommand(transaction.command);
  } catch {
    return invalid(`the command of transaction ${transaction.id} cannot be serialised`);
  }
  const touched = [...transaction.touchedNodeIds];
  const expected: ReadonlyArray<readonly [string, Json, Json]> = [
    ["schema", TRANSACTION_PAYLOAD_SCHEMA, payload["schema"] ?? null],
    ["id", transaction.id, payload["id"] ?? null],
    ["sequence", transaction.sequence, payload["sequence"] ?? null],
    ["provenance", transaction.provenance, payload["provenance"] ?? null],
    ["command", command, canonicalJson(payload["command"] ?? null)],
    ["touched_node_ids", canonicalJson([...touched].sort()), canonicalJson(payload["touched_node_ids"] ?? null)],
    ["created_node_id", transaction.createdNodeId ?? "", payload["created_node_id"] ?? null],
    ["committed_at", Number.isFinite(transaction.committedAt) ? new Date(transaction.committedAt).toISOString() : "", payload["committed_at"] ?? null],
    ["key_id", transaction.keyId, payload["key_id"] ?? null],
    ["previous_digest", transaction.previousDigest, payload["previous_digest"] ?? null],
  ];
  for (const [field, ours, signed] of expected) {
    if (ours !== signed) return invalid(`the ${field} of transaction ${transaction.id} differs from its signed payload`);
  }
  if (canonicalJson(touched) !== canonicalJson([...touched].sort())) {
    return invalid(`the touched node ids of transaction ${transaction.id} are not sorted`);
  }
  return { valid: true };
}
