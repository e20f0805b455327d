/**
 * The Kmap signature check with nothing of storage behind it: what a
 * client needs to verify a signed transaction with the served public key
 * alone. It loads no SQLite (the `better-sqlite3` addon stays out of every
 * client process); the core's index exports the same function for the
 * server.
 */
export { verifyTransaction, type KwebTransaction, type Verification } from "./kweb/signed-transaction.js";
