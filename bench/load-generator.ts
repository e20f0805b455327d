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
 * Usage (argv[2] is JSON): {url, path, protocol: "json"|"binary"|"grpc", token, body?, concurrency, seconds}
 * Prints {completed, failed, seconds}.
 */
import * as http2 from "node:http2";
import { Pool } from "undici";

interface LoadSpec {
  url: string;
  path: string;
  protocol: "json" | "binary" | "grpc";
  token: string;
  body?: string;
  concurrency: number;
  seconds: number;
}

const spec = JSON.parse(process.argv[2]!) as LoadSpec;
const deadline = Date.now() + spec.seconds * 1000;
let completed = 0;
let failed = 0;

async function http1Caller(pool: Pool, body: Buffer, contentType: string): Promise<void> {
  const headers = { "content-type": contentType, authorization: `Bearer ${spec.token}` };
  while (Date.now() < deadline) {
    try {
      const res = await pool.request({ method: "POST", path: spec.path, headers, body });
      await res.body.dump();
      if (res.statusCode === 200) completed++;
      else failed++;
    } catch {
      failed++;
    }
  }
}

async function grpcCaller(session: http2.ClientHttp2Session, frame: Buffer): Promise<void> {
  while (Date.now() < deadline) {
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

const started = Date.now();
if (spec.protocol === "grpc") {
  // A few sessions, as a gRPC client pool would open.
  const sessions = Array.from({ length: 4 }, () => http2.connect(spec.url));
  const payload = Buffer.from(spec.body ?? "", "binary");
  const frame = Buffer.alloc(5 + payload.length);
  frame.writeUInt32BE(payload.length, 1);
  payload.copy(frame, 5);
  await Promise.all(Array.from({ length: spec.concurrency }, (_, i) => grpcCaller(sessions[i % sessions.length]!, frame)));
  for (const s of sessions) s.close();
} else {
  const pool = new Pool(spec.url, { connections: spec.concurrency });
  const body = Buffer.from(spec.body ?? (spec.protocol === "json" ? "{}" : ""), "binary");
  const contentType = spec.protocol === "json" ? "application/json" : "application/proto";
  await Promise.all(Array.from({ length: spec.concurrency }, () => http1Caller(pool, body, contentType)));
  await pool.close();
}
process.stdout.write(JSON.stringify({ completed, failed, seconds: (Date.now() - started) / 1000 }) + "\n");
