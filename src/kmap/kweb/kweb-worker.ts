import { parentPort, workerData } from "node:worker_threads";
import { parseCanonicalCommand } from "../canonical-command.js";
import { WriterUnavailableError } from "../kweb-manager.js";
import { LaneHost } from "../lane-host.js";
import { isLaneMessage, type LaneFromWorker, type LaneToWorker } from "../worker-lane-protocol.js";
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
 * When asked (`lane_open`), it also hosts the command lane next to the
 * writer (LaneHost): the lane's SQLite writer, its runtime and its
 * submissions' group commits then run here too.
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
const post = (message: FromWorker | LaneFromWorker): void => port.postMessage(message);
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

let lane: LaneHost | undefined;

port.on("message", (message: ToWorker | LaneToWorker) => {
  if (isLaneMessage(message)) {
    const laneMessage = message as LaneToWorker;
    if (laneMessage.type === "lane_open") {
      if (writer === undefined || lane !== undefined) {
        post({ type: "lane_open_failed", error: [{ name: "KmapError", reason: "internal", message: "the Kweb writer is not open" }] });
        return;
      }
      lane = LaneHost.open(post, writer, laneMessage);
      return;
    }
    if (lane === undefined) {
      if (laneMessage.type === "lane_stop") post({ type: "lane_stopped" });
      else if (laneMessage.type === "lane_close") post({ type: "lane_closed" });
      else if (laneMessage.type === "lane_submit") {
        post({ type: "lane_submit_failed", id: laneMessage.id, error: [{ name: "KmapError", reason: "internal", message: "the command lane is not open" }] });
      }
      return;
    }
    lane.handle(laneMessage);
    return;
  }
  const kwebMessage = message as ToWorker;
  if (kwebMessage.type === "close") {
    lane?.close();
    lane = undefined;
    writer?.close();
    writer = undefined;
    post({ type: "closed" });
    return;
  }
  if (writer === undefined) {
    post({
      type: "apply_failed",
      id: kwebMessage.id,
      error: { kind: "kweb_failure", reason: "worker_stopped", message: "the Kweb writer is not open" },
    });
    return;
  }
  try {
    const command = parseCanonicalCommand(kwebMessage.canonicalCommand);
    const outcome = writer.apply({
      idempotencyId: kwebMessage.idempotencyId,
      command,
      expectedTransactionIds: kwebMessage.expectedTransactionIds,
    });
    post({ type: "applied", id: kwebMessage.id, outcome });
  } catch (error) {
    post({ type: "apply_failed", id: kwebMessage.id, error: toWire(error, "the Kweb writer failed while applying a command") });
  }
});
