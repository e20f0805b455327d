/**
 * A closed-loop load generator run as its own process (so its CPU is not
 * charged to the server under test): `concurrency` callers each send the
 * next request as soon as the previous answer arrived, for `seconds`.
 *
 * It speaks raw HTTP on purpose: the generated Connect client costs about
 * 330 µs of CPU per call, which would measure the client rather than the
 * server. HTTP/1.1 goes through undici (node:http's client is slower than
 * the servers it would measure); gRPC through node:http2, because undici 7
 * returns no HTTP/2 trailers. Every answer is checked (HTTP 200 and, for
 * gRPC, grpc-status 0).
 *
 * Optional, for calls that need a unique value per request (such as an
 * idempotency id): `bodyTemplate` is sent instead of `body`, with every
 * `idPlaceholder` (default "{{id}}") replaced by a fresh 32-lowercase-hex id
 * per request. For binary and gRPC the placeholder must itself be 32
 * bytes so that the Protobuf lengths stay right. `rate` paces the callers
 * to that many requests per second in total (open loop, at most
 * `concurrency` in flight) instead of sending as fast as answers come back.
 *
 * Usage (argv[2] is JSON): {url, path, protocol: "json"|"binary"|"grpc", token, body?, bodyTemplate?, idPlaceholder?, rate?, concurrency, seconds}
 * Prints {completed, failed, seconds, startedAt} (startedAt: epoch ms).
 */
import { randomBytes } from "node:crypto";
import * as http2 from "node:http2";
import { setTimeout as sleep } from "node:timers/promises";
import { Pool } from "undici";

interface LoadSpec {
  url: string;
  path: string;
  protocol: "json" | "binary" | "grpc";
  token: string;
  body?: string;
  bodyTemplate?: string;
  idPlaceholder?: string;
  rate?: number;
  concurrency: number;
  seconds: number;
}

const spec = JSON.parse(process.argv[2]!) as LoadSpec;
const startedAt = Date.now();
const deadline = startedAt + spec.seconds * 1000;
let completed = 0;
let failed = 0;
let issued = 0;

/** The next request's body: the fixed one, or the template with a fresh id. */
function nextBody(fixed: Buffer): Buffer {
  if (spec.bodyTemplate === undefined) return fixed;
  return Buffer.from(spec.bodyTemplate.replaceAll(spec.idPlaceholder ?? "{{id}}", randomBytes(16).toString("hex")), "binary");
}

/** Waits for the next request's turn; false once the run is over. */
async function nextTurn(): Promise<boolean> {
  if (spec.rate === undefined) return Date.now() < deadline;
  const due = startedAt + (issued++ * 1000) / spec.rate;
  if (due >= deadline) return false;
  const wait = due - Date.now();
  if (wait > 0) await sleep(wait);
  return true;
}

async function http1Caller(pool: Pool, fixedBody: Buffer, contentType: string): Promise<void> {
  const headers = { "content-type": contentType, authorization: `Bearer ${spec.token}` };
  while (await nextTurn()) {
    try {
      const res = await pool.request({ method: "POST", path: spec.path, headers, body: nextBody(fixedBody) });
      await res.body.dump();
      if (res.statusCode === 200) completed++;
      else failed++;
    } catch {
      failed++;
    }
  }
}

function grpcFrame(payload: Buffer): Buffer {
  const frame = Buffer.alloc(5 + payload.length);
  frame.writeUInt32BE(payload.length, 1);
  payload.copy(frame, 5);
  return frame;
}

async function grpcCaller(session: http2.ClientHttp2Session, fixedPayload: Buffer): Promise<void> {
  const fixedFrame = grpcFrame(fixedPayload);
  while (await nextTurn()) {
    const frame = spec.bodyTemplate === undefined ? fixedFrame : grpcFrame(nextBody(fixedPayload));
    const ok = await new Promise<boolean>((resolve) => {
      const stream = session.request({
        ":method": "POST",
        ":path": spec.path,
        "content-type": "application/grpc",
        te: "trailers",
        authorization: `Bearer ${spec.token}`,
      });
      let status: string | undefined;
      stream.on("trailers", (trailers) => (status = String(trailers["grpc-status"])));
      stream.on("response", (headers) => {
        if (headers["grpc-status"] !== undefined) status = String(headers["grpc-status"]);
      });
      stream.on("data", () => {});
      stream.on("end", () => resolve(status === "0"));
      stream.on("error", () => resolve(false));
      stream.end(frame);
    });
    if (ok) completed++;
    else failed++;
  }
}

if (spec.protocol === "grpc") {
  // A few sessions, as a gRPC client pool would open.
  const sessions = Array.from({ length: 4 }, () => http2.connect(spec.url));
  const payload = Buffer.from(spec.body ?? "", "binary");
  await Promise.all(Array.from({ length: spec.concurrency }, (_, i) => grpcCaller(sessions[i % sessions.length]!, payload)));
  for (const s of sessions) s.close();
} else {
  const pool = new Pool(spec.url, { connections: spec.concurrency });
  const body = Buffer.from(spec.body ?? (spec.protocol === "json" ? "{}" : ""), "binary");
  const contentType = spec.protocol === "json" ? "application/json" : "application/proto";
  await Promise.all(Array.from({ length: spec.concurrency }, () => http1Caller(pool, body, contentType)));
  await pool.close();
}
process.stdout.write(JSON.stringify({ completed, failed, seconds: (Date.now() - startedAt) / 1000, startedAt }) + "\n");
