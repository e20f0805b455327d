/**
 * Raw RPC requests for tests that play a hostile or broken client: any body
 * bytes, any content type, over each protocol's own transport (HTTP/1.1 for
 * Connect and gRPC-Web, HTTP/2 for gRPC), and the answer decoded the way a
 * conforming client would: its code, message and Laneway ErrorDetail.
 *
 * The generated clients cannot send malformed bodies, so these tests talk
 * HTTP directly; everything else in the suite uses the generated clients.
 */
import * as http from "node:http";
import * as http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorFromJsonBytes, endStreamFromJson } from "@connectrpc/connect/protocol-connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { trailerParse } from "@connectrpc/connect/protocol-grpc-web";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";

export type RawProtocol = "connect" | "grpc" | "grpc-web";

export interface RawRequest {
  readonly baseUrl: string;
  readonly protocol: RawProtocol;
  /** `/package.Service/Method`. */
  readonly path: string;
  readonly contentType: string | undefined;
  readonly body: Uint8Array;
  readonly token?: string | undefined;
  /** Extra request headers (content encodings, …). */
  readonly headers?: Readonly<Record<string, string>>;
  /** A reusable HTTP/2 session for gRPC; a new one per call when absent. */
  readonly session?: http2.ClientHttp2Session;
}

/** What came back: the HTTP status, the decoded outcome, and the raw answer for anything else. */
export interface RawAnswer {
  readonly status: number;
  /** The error, or undefined for a success. */
  readonly error: ConnectError | undefined;
  readonly reason: string | undefined;
  readonly domain: string | undefined;
  readonly body: Buffer;
}

/** The 5-byte envelope of gRPC, gRPC-Web and Connect streaming. */
export function envelope(message: Uint8Array, flags = 0): Uint8Array {
  const out = Buffer.alloc(5 + message.byteLength);
  out[0] = flags;
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}

export async function rawCall(request: RawRequest): Promise<RawAnswer> {
  const headers: Record<string, string> = { ...(request.headers ?? {}) };
  if (request.contentType !== undefined) headers["content-type"] = request.contentType;
  if (request.token !== undefined) headers.authorization = `Bearer ${request.token}`;
  if (request.protocol === "grpc") {
    headers.te = "trailers";
    return grpcCall(request, headers);
  }
  const url = new URL(request.path, request.baseUrl);
  const { status, header, body } = await new Promise<{ status: number; header: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers: { ...headers, "content-length": String(request.body.byteLength), connection: "close" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, header: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(request.body);
  });
  let error: ConnectError | undefined;
  if (request.protocol === "grpc-web") {
    error = findTrailerError(toHeaders(header)) ?? grpcWebTrailerError(body);
  } else if (String(header["content-type"] ?? "").startsWith("application/connect+")) {
    error = connectStreamError(body);
  } else if (status !== 200) {
    error = errorFromJsonBytes(body, new Headers(), new ConnectError(`HTTP ${status}`, Code.Unknown));
  }
  return answer(status, error, body);
}

function grpcCall(request: RawRequest, headers: Record<string, string>): Promise<RawAnswer> {
  const session = request.session ?? http2.connect(request.baseUrl);
  return new Promise<RawAnswer>((resolve, reject) => {
    session.once("error", reject);
    const stream = session.request({ ":method": "POST", ":path": request.path, ...headers });
    let responseHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => (responseHeaders = h));
    stream.on("trailers", (t) => (trailers = t));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", reject);
    stream.on("close", () => {
      if (request.session === undefined) session.close();
      const status = Number(responseHeaders[":status"] ?? 0);
      const error = findTrailerError(toHeaders({ ...responseHeaders, ...trailers }));
      resolve(answer(status, error, Buffer.concat(chunks)));
    });
    stream.end(request.body);
  });
}

function answer(status: number, error: ConnectError | undefined, body: Buffer): RawAnswer {
  const [detail] = error?.findDetails(ErrorDetailSchema) ?? [];
  return { status, error, reason: detail?.reason, domain: detail?.domain, body };
}

function toHeaders(header: http.IncomingHttpHeaders | http2.IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(header)) {
    if (name.startsWith(":") || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [String(value)]) out.append(name, v);
  }
  return out;
}

/** Walks the frames of a body: data frames, and the trailer frame (flag 0x80) of gRPC-Web or end-stream frame (0x02) of Connect. */
function* frames(body: Buffer): Generator<{ flags: number; data: Buffer }> {
  let offset = 0;
  while (offset + 5 <= body.byteLength) {
    const flags = body[offset]!;
    const length = body.readUInt32BE(offset + 1);
    yield { flags, data: body.subarray(offset + 5, offset + 5 + length) };
    offset += 5 + length;
  }
}

function grpcWebTrailerError(body: Buffer): ConnectError | undefined {
  for (const frame of frames(body)) {
    if ((frame.flags & 0x80) !== 0) return findTrailerError(trailerParse(frame.data));
  }
  return undefined;
}

function connectStreamError(body: Buffer): ConnectError | undefined {
  for (const frame of frames(body)) {
    if ((frame.flags & 0x02) !== 0) return endStreamFromJson(frame.data).error;
  }
  return undefined;
}
