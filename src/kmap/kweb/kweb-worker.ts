import { parentPort, workerData } from "node:worker_threads";
import { parseCanonicalCommand } from "../canonical-command.js";
import { WriterUnavailableError } from "../kweb-manager.js";
import { KwebFailureError } from "./kweb-failure-error.js";
import type { FromWorker, KwebWorkerData, ToWorker, WireCause, WireError } from "./kweb-worker-protocol.js";
import { KwebWriter } from "./kweb-writer.js";
import { loadOrCreateSigningKey } from "./signing-key.js";

/**
 * The Kweb worker thread: owns the KwebWriter so SQLite's synchronous work
 * (fsyncs under synchronous=FULL, busy waits on a held lock, signing)
 * never blocks the server's event loop. Messages are handled one at a time
 * in arrival order; the manager sends the next apply only after the
 * previous one answered.
 *
 * Started through kweb-worker-boot.mjs, which registers tsx first.
 */

function causeOf(error: unknown): WireCause | undefined {
  if (!(error instanceof Error)) return undefined;
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, ...(typeof code === "string" ? { code } : {}) };
}

function toWire(error: unknown, fallback: string): WireError {
  if (error instanceof WriterUnavailableError) return { kind: "writer_unavailable", message: error.message };
  if (error instanceof KwebFailureError) {
    const cause = causeOf(error.cause);
    return { kind: "kweb_failure", reason: error.failure, message: error.message, ...(cause ? { cause } : {}) };
  }
  const cause = causeOf(error);
  return { kind: "kweb_failure", reason: "storage_failed", message: fallback, ...(cause ? { cause } : {}) };
}

const port = parentPort;
if (port === null) throw new Error("kweb-worker.ts must run as a worker thread");
const post = (message: FromWorker): void => port.postMessage(message);
const data = workerData as KwebWorkerData;

let writer: KwebWriter | undefined;
try {
  const signingKey = loadOrCreateSigningKey(data.signingKeyPath);
  writer = KwebWriter.open({ databasePath: data.databasePath, signingKey, busyTimeoutMs: data.busyTimeoutMs });
  post({
    type: "ready",
    signingKey: {
      algorithm: signingKey.algorithm,
      publicKey: signingKey.publicKey,
      publicKeyPem: signingKey.publicKeyPem,
      keyId: signingKey.keyId,
    },
  });
} catch (error) {
  post({ type: "start_failed", error: toWire(error, "the Kweb writer could not start") });
}

port.on("message", (message: ToWorker) => {
  if (message.type === "close") {
    writer?.close();
    writer = undefined;
    post({ type: "closed" });
    return;
  }
  if (writer === undefined) {
    post({
      type: "apply_failed",
      id: message.id,
      error: { kind: "kweb_failure", reason: "worker_stopped", message: "the Kweb writer is not open" },
    });
    return;
  }
  try {
    const command = parseCanonicalCommand(message.canonicalCommand);
    const outcome = writer.apply({
      idempotencyId: message.idempotencyId,
      command,
      expectedTransactionIds: message.expectedTransactionIds,
    });
    post({ type: "applied", id: message.id, outcome });
  } catch (error) {
    post({ type: "apply_failed", id: message.id, error: toWire(error, "the Kweb writer failed while applying a command") });
  }
});
