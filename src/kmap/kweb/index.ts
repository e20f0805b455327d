/**
 * The embedded Kweb: Laneway's default KwebManager and the reads and
 * verification the server and clients need. See DESIGN.md, "The Kweb
 * behind the Kmap command lane".
 *
 * - EmbeddedKwebManager applies commands from a worker thread.
 * - KwebReader reads nodes and history on the main thread.
 * - verifyTransaction / verifyHistoryChain check signed history with the
 *   public key alone.
 */
export { EmbeddedKwebManager, type EmbeddedKwebManagerOptions } from "./embedded-kweb-manager.js";
export type { KwebWorkerData } from "./kweb-worker-protocol.js";
export {
  KwebReader,
  type KwebReaderOptions,
  type ListNodesOptions,
  type ListTransactionsOptions,
  type NodePage,
  type TransactionPage,
} from "./kweb-reader.js";
export type { KwebLink, KwebNode } from "./kweb-node.js";
export { KwebWriter, DEFAULT_BUSY_TIMEOUT_MS, type KwebWriterOptions } from "./kweb-writer.js";
export { KwebFailureError, type KwebFailureReason } from "./kweb-failure-error.js";
export { KWEB_SCHEMA_VERSION } from "./kweb-schema.js";
export { MAX_ATTRIBUTES } from "./kweb-operations.js";
export {
  TRANSACTION_PAYLOAD_SCHEMA,
  ZERO_DIGEST,
  transactionPayload,
  verifyTransaction,
  type KwebTransaction,
  type TransactionPayloadFields,
  type Verification,
} from "./signed-transaction.js";
export { payloadDigest, verifyHistoryChain, type ChainLink } from "./history-chain.js";
export {
  loadOrCreateSigningKey,
  publicSigningKey,
  signingKeyId,
  type KwebSigningKey,
  type PublicSigningKey,
} from "./signing-key.js";
export { isCanonicalKwebId } from "./kweb-ids.js";
