/**
 * The Kmap signature check with nothing of storage behind it: what a
 * client needs to verify signed history with the served public key alone.
 * It loads no SQLite (the `better-sqlite3` addon stays out of every client
 * process); the core's index re-exports the same functions for the server.
 */
export {
  TRANSACTION_PAYLOAD_SCHEMA,
  transactionPayload,
  verifyTransaction,
  type KwebTransaction,
  type TransactionPayloadFields,
  type Verification,
} from "./kweb/signed-transaction.js";
export { payloadDigest, verifyHistoryChain, type ChainLink } from "./kweb/history-chain.js";
