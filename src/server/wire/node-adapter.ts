import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { Readable } from "node:stream";
import type { DescMethod } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createConnectRouter, createContextValues, type ConnectRouter, type ConnectRouterOptions, type Interceptor } from "@connectrpc/connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { errorToJsonBytes, parseContentType as parseConnectContentType } from "@connectrpc/connect/protocol-connect";
import { parseContentType as parseGrpcContentType, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { parseContentType as parseGrpcWebContentType } from "@connectrpc/connect/protocol-grpc-web";
import { ErrorDetailSchema } from "../../../gen/laneway/errors/v1/errors_pb.js";
import type { WireLimits } from "../../config/index.js";
import type { ErrorDomain } from "../../errors/core-error.js";
import type { Logger } from "../../log/logger.js";
import {
  checkedRequestBody,
  emptyBody,
  ParsedMessages,
  parsedMessagesKey,
  parseMessage,
  RequestProblemError,
  requestProblemKey,
  type Framing,
  type RequestProblem,
} from "./request-body.js";

/**
 * Laneway's Node.js request handler in front of Connect's router: it does
 * what `connectNodeAdapter` does (find the RPC by path, run Connect's
 * protocol handler, write the answer), plus what a server facing any client
 * on the network needs:
 *
 * - an RPC that does not exist answers `unimplemented` in each protocol's own
 *   form: gRPC and gRPC-Web get a trailers-only response with `grpc-status:
 *   12` and the error detail, Connect gets HTTP 404 with a JSON error;
 * - a content type or HTTP method no protocol accepts answers 415 or 405
 *   with a Connect JSON error carrying an ErrorDetail;
 * - the request body is read within the size limit and parsed before
 *   Connect sees it (request-body.ts), so malformed, oversized, truncated
 *   or wrongly encoded input becomes a typed error after authentication;
 *   Connect parses only an empty stand-in, and this adapter's interceptor,
 *   the outermost, gives the service the message parsed here, so no
 *   message is parsed twice;
 * - a failed write to a client that went away ends quietly (a debug line,
 *   never a stack trace).
 */

export interface LanewayAdapterOptions extends ConnectRouterOptions {
  readonly routes: (router: ConnectRouter) => void;
  readonly limits: WireLimits;
  readonly log: Logger;
  /** The error domain of a service, for refusals made before Connect runs. */
  readonly domainOf: (typeName: string) => AdapterDomain;
  /** Sees each call's Node request before Connect runs (the call observer notes the peer and request size). */
  readonly observeRequest?: (req: NodeRequest, values: ReturnType<typeof createContextValues>) => void;
}

/** A service's error domain and its reason for invalid requests. */
export interface AdapterDomain {
  readonly domain: ErrorDomain;
  readonly invalidReason: string;
}

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/** The protocol a request speaks, from its content type and HTTP method. */
type Protocol = "connect" | "grpc" | "grpc-web";

export function lanewayNodeAdapter(options: LanewayAdapterOptions): (req: NodeRequest, res: NodeResponse) => void {
  // Connect decompresses nothing itself: request bodies arrive here
  // already checked and inflated, and answers are small.
  const router = createConnectRouter({
    ...options,
    interceptors: [parsedRequestInterceptor(options.domainOf), ...(options.interceptors ?? [])],
    acceptCompression: [],
    readMaxBytes: options.limits.maxRequestBytes,
  });
  options.routes(router);
  const paths = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));
  const { limits, log } = options;

  return function lanewayRequestHandler(req, res) {
    const path = (req.url ?? "").split("?", 2)[0] ?? "";
    const contentType = headerValue(req, "content-type");
    const protocol = protocolOf(contentType);
    const handler = paths.get(path);
    if (handler === undefined) {
      refuse(res, protocol, new ConnectError("no such RPC: check the service and method name (laneway lists its services through gRPC reflection)", Code.Unimplemented), "unimplemented", "server", 404);
      return;
    }
    const domain = options.domainOf(handler.service.typeName);
    const method = handler.method;
    const framing = framingOf(req.method ?? "", contentType, protocol, method, req);
    if ("refusal" in framing) {
      refuse(res, "connect", new ConnectError(framing.refusal, Code.InvalidArgument), domain.invalidReason, domain.domain, framing.status);
      return;
    }
    const contextValues = createContextValues();
    const parsed = new ParsedMessages();
    contextValues.set(parsedMessagesKey, parsed);
    options.observeRequest?.(req, contextValues);
    let uReq: UniversalServerRequest;
    try {
      if (framing.get) req.url = checkedGetUrl(req.url ?? "", method, contextValues, parsed);
      uReq = "stream" in req ? universalRequestFromNodeRequest(req, res as http2.Http2ServerResponse, undefined, contextValues) : http1Request(req, res as http.ServerResponse, contextValues, !framing.get);
    } catch {
      refuse(res, protocol, new ConnectError("the request has no authority (Host) header", Code.InvalidArgument), domain.invalidReason, domain.domain, 400);
      return;
    }
    if (!framing.get) {
      // HTTP/1.1 requests come without the encoding headers already (http1Request).
      uReq = { ...uReq, header: "stream" in req ? withoutEncoding(uReq.header) : uReq.header, body: checkedBody(req, method, framing.framing, limits.maxRequestBytes, domain, parsed) };
    }
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // The client went away or reset the stream: nothing to answer.
        log.debug("a response could not be written", { rpc: path, code: Code[ConnectError.from(reason).code] });
      });
  };
}

function headerValue(req: NodeRequest, name: string): string {
  const value = req.headers[name];
  return (Array.isArray(value) ? value[0] : value) ?? "";
}

function protocolOf(contentType: string): Protocol {
  if (/^application\/grpc-web/i.test(contentType)) return "grpc-web";
  if (/^application\/grpc/i.test(contentType)) return "grpc";
  return "connect";
}

type FramingChoice = { framing: Framing; get: false } | { get: true } | { refusal: string; status: number };

const acceptedTypes =
  "use application/json or application/proto (Connect unary), application/connect+json or application/connect+proto (Connect streaming), application/grpc[+json] or application/grpc-web[+json]";

function framingOf(httpMethod: string, contentType: string, protocol: Protocol, method: DescMethod, req: NodeRequest): FramingChoice {
  if (httpMethod === "GET") {
    if (method.methodKind === "unary" && method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS) return { get: true };
    return { refusal: `${method.parent.typeName}/${method.name} accepts POST only`, status: 405 };
  }
  if (httpMethod !== "POST") return { refusal: `RPCs are called with POST (or GET for methods without side effects)`, status: 405 };
  const streaming = method.methodKind !== "unary";
  if (protocol === "grpc" || protocol === "grpc-web") {
    const type = protocol === "grpc" ? parseGrpcContentType(contentType) : parseGrpcWebContentType(contentType);
    if (type === undefined || ("text" in type && type.text)) return { refusal: `unsupported content type: ${acceptedTypes}`, status: 415 };
    return { framing: { enveloped: true, binary: type.binary, encoding: encodingOf(headerValue(req, "grpc-encoding")) }, get: false };
  }
  const type = parseConnectContentType(contentType);
  if (type === undefined || type.stream !== streaming) {
    return { refusal: `unsupported content type for this ${streaming ? "streaming" : "unary"} method: ${acceptedTypes}`, status: 415 };
  }
  const encoding = encodingOf(headerValue(req, streaming ? "connect-content-encoding" : "content-encoding"));
  return { framing: { enveloped: streaming, binary: type.binary, encoding }, get: false };
}

function encodingOf(header: string): string | undefined {
  const value = header.trim().toLowerCase();
  return value === "" || value === "identity" ? undefined : value;
}

/** The request headers that describe a body Connect no longer reads as the client sent it (see withoutEncoding). */
const encodingHeaders: ReadonlySet<string> = new Set(["content-length", "content-encoding", "connect-content-encoding", "grpc-encoding"]);

/** The headers Connect sees: the body it reads is already checked and uncompressed, so its length and encodings are no longer the client's. */
function withoutEncoding(header: Headers): Headers {
  const copy = new Headers(header);
  for (const name of encodingHeaders) copy.delete(name);
  return copy;
}

/**
 * An HTTP/1.1 request as Connect's handlers take it: what connect-node's
 * `universalRequestFromNodeRequest` builds, with two differences on the
 * path every call takes.
 *
 * - The headers are converted once, leaving out the encoding headers when
 *   the body is replaced by the checked one (`dropEncoding`).
 * - The request's signal aborts when the client goes away (the request
 *   fails, or the connection closes before the answer was written in
 *   full), as there; but a call answered in full is not aborted when its
 *   response closes. Nothing listens then (Connect ends each call's own
 *   signal when the call ends), and an abort without a reason builds a
 *   DOMException with a stack on every call.
 */
function http1Request(req: http.IncomingMessage, res: http.ServerResponse, contextValues: ReturnType<typeof createContextValues>, dropEncoding: boolean): UniversalServerRequest {
  const authority = req.headers.host;
  if (authority === undefined) throw new ConnectError("unable to determine request authority from Node.js server request", Code.Internal);
  const controller = new AbortController();
  const onError = (error: Error) => {
    req.off("error", onError);
    res.off("close", onClose);
    controller.abort(connectErrorFromNodeReason(error));
  };
  // Node emits close on the request as soon as its body is read: the response's close is the end of the call.
  const onClose = () => {
    req.off("error", onError);
    res.off("close", onClose);
    if (req.errored) controller.abort(connectErrorFromNodeReason(req.errored));
    else if (!res.writableFinished) controller.abort();
  };
  req.once("error", onError);
  res.once("close", onClose);
  // As connect-node converts them (Node's own merging of repeated headers included).
  const header = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || (dropEncoding && encodingHeaders.has(name))) continue;
    if (typeof value === "string") header.append(name, value);
    else for (const each of value) header.append(name, each);
  }
  return {
    httpVersion: req.httpVersion,
    method: req.method ?? "",
    url: new URL(req.url ?? "", `http://${authority}`).toString(),
    header,
    // Replaced by the checked body for every call that has one; a GET reads none.
    body: req.iterator({ destroyOnReturn: false }),
    signal: controller.signal,
    contextValues,
  };
}

/**
 * A failure of the client's connection as a ConnectError, as connect-node
 * reports it to a handler: a reset or destroyed stream is `aborted`, an
 * unreachable peer `unavailable`, anything else `internal`.
 */
function connectErrorFromNodeReason(reason: unknown): ConnectError {
  const codes: string[] = [];
  for (let at: unknown = reason, depth = 0; at instanceof Error && depth < 16; at = at.cause, depth++) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === "string") codes.push(code);
  }
  const code = codes.some((c) => c === "ERR_STREAM_WRITE_AFTER_END" || c === "ERR_STREAM_DESTROYED" || c === "ERR_HTTP2_INVALID_STREAM" || c === "ECONNRESET")
    ? Code.Aborted
    : codes.some((c) => c === "ETIMEDOUT" || c === "ENOTFOUND" || c === "EAI_AGAIN" || c === "ECONNREFUSED")
      ? Code.Unavailable
      : Code.Internal;
  const error = ConnectError.from(reason, code);
  if (error !== reason) error.cause = reason;
  return error;
}

/** The request body as Connect will read it: checked as it streams; a problem becomes the domain's typed error. */
function checkedBody(req: NodeRequest, method: DescMethod, framing: Framing, maxBytes: number, domain: AdapterDomain, parsed: ParsedMessages): AsyncIterable<Uint8Array> {
  return {
    async *[Symbol.asyncIterator]() {
      // Not destroyed when reading stops early: the answer still has to go out.
      const source = (req as unknown as Readable).iterator({ destroyOnReturn: false });
      const single = method.methodKind === "unary" || method.methodKind === "server_streaming";
      try {
        yield* checkedRequestBody(source, method.input, framing, maxBytes, single, parsed);
      } catch (error) {
        if (error instanceof RequestProblemError) throw problemError(error.problem, domain);
        throw error;
      }
    },
  };
}

/** A refused request body as the Connect error a client receives. */
export function problemError(problem: RequestProblem, domain: AdapterDomain): ConnectError {
  const [reason, code] =
    problem.kind === "too_large"
      ? ["message_too_large", Code.ResourceExhausted]
      : problem.kind === "unsupported_encoding"
        ? ["unimplemented", Code.Unimplemented]
        : [domain.invalidReason, Code.InvalidArgument];
  return new ConnectError(problem.message, code, undefined, [{ desc: ErrorDetailSchema, value: { reason, domain: domain.domain } }]);
}

/**
 * A Connect GET request carries its message in the query. It is parsed
 * here like a body, and Connect gets an empty JSON message in the query
 * instead; a query that does not parse records its problem in the call's
 * context, raised by the interceptor after authentication.
 */
function checkedGetUrl(url: string, method: DescMethod, contextValues: ReturnType<typeof createContextValues>, parsed: ParsedMessages): string {
  const [path, query = ""] = url.split("?", 2);
  const params = new URLSearchParams(query);
  const message = params.get("message") ?? "";
  const binary = params.get("encoding") === "proto";
  let problem: RequestProblem | undefined;
  if (params.get("compression") !== null && params.get("compression") !== "identity") {
    problem = { kind: "unsupported_encoding", message: "the request's content encoding is not supported: send it uncompressed" };
  } else if (params.get("encoding") !== "json" && !binary) {
    problem = { kind: "malformed", message: "a GET request needs encoding=json or encoding=proto" };
  } else {
    const bytes = params.get("base64") === "1" ? Buffer.from(message, "base64url") : Buffer.from(message, "utf8");
    const result = parseMessage(method.input, bytes, binary);
    if ("problem" in result) problem = { kind: "malformed", message: result.problem };
    else parsed.push(result.message);
  }
  if (problem !== undefined) contextValues.set(requestProblemKey, problem);
  // Connect answers a GET in the encoding its query names: the stand-in keeps
  // it (an empty message in either), so a binary GET is answered in binary.
  const connect = params.get("connect") ?? "v1";
  if (binary) return `${path}?${new URLSearchParams({ connect, encoding: "proto", base64: "1", message: "" }).toString()}`;
  const empty = Buffer.from(emptyBody({ enveloped: false, binary: false })).toString("utf8");
  return `${path}?${new URLSearchParams({ connect, encoding: "json", message: empty }).toString()}`;
}

/**
 * The outermost interceptor: raises a GET query's problem, and hands the
 * interceptors inside it and the service the request message parsed by
 * this adapter in place of the empty stand-in Connect parsed. A call
 * without its parsed message cannot happen; it fails as `internal` rather
 * than reach the service with an empty request.
 */
function parsedRequestInterceptor(domainOf: (typeName: string) => AdapterDomain): Interceptor {
  return (next) => async (req) => {
    const domain = domainOf(req.service.typeName);
    const problem = req.contextValues.get(requestProblemKey);
    if (problem !== undefined) throw problemError(problem, domain);
    const parsed = req.contextValues.get(parsedMessagesKey);
    const take = () => {
      const message = parsed?.take();
      if (message === undefined) {
        throw new ConnectError("internal error", Code.Internal, undefined, [{ desc: ErrorDetailSchema, value: { reason: "internal", domain: domain.domain } }]);
      }
      return message;
    };
    if (!req.stream) return next({ ...req, message: take() });
    const source = req.message;
    return next({
      ...req,
      message: (async function* () {
        for await (const _standIn of source) yield take();
      })(),
    });
  };
}

/** Answers a request that never reaches Connect, in its protocol's own error form. */
function refuse(res: NodeResponse, protocol: Protocol, error: ConnectError, reason: string, domain: ErrorDomain, connectStatus: number): void {
  error.details.push({ desc: ErrorDetailSchema, value: { reason, domain } });
  if (protocol === "connect") {
    const body = errorToJsonBytes(error, {});
    res.writeHead(connectStatus, {
      "content-type": "application/json",
      "content-length": String(body.byteLength),
    });
    res.end(body);
    return;
  }
  // gRPC and gRPC-Web: a trailers-only response, the status in the headers.
  const headers: Record<string, string> = { "content-type": protocol === "grpc" ? "application/grpc" : "application/grpc-web+proto" };
  setTrailerStatus(new Headers(), error).forEach((value, key) => (headers[key] = value));
  if ("stream" in res) {
    respondTrailersOnly(res, headers);
    return;
  }
  res.writeHead(200, headers);
  res.end();
}

/**
 * The trailers-only form gRPC clients expect on HTTP/2: one HEADERS frame
 * that carries the status and ends the stream. (The compatibility API's
 * `writeHead` + `end` sends the headers without END_STREAM and ends the
 * stream with an empty DATA frame; grpcio then reads no status at all and
 * reports `UNKNOWN: Stream removed`.) The rest of the request, if the
 * client is still sending, is read and dropped, so the stream closes
 * normally instead of being reset; the listener's request timeout bounds a
 * client that never stops.
 */
function respondTrailersOnly(res: http2.Http2ServerResponse, headers: Record<string, string>): void {
  const { stream } = res;
  if (stream.destroyed || stream.headersSent) return;
  stream.respond({ ":status": 200, ...headers }, { endStream: true });
  if (!res.req.readableEnded) res.req.resume();
}
