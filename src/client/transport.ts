import * as http from "node:http";
import * as https from "node:https";
import type { Socket } from "node:net";
import type { Interceptor, StreamRequest, Transport, UnaryRequest } from "@connectrpc/connect";
import {
  Http2SessionManager,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";

/**
 * Transports for Laneway's generated clients.
 *
 * The CLI, the examples and the tests all reach the server through the
 * client generated from proto/ and one of these transports, never through
 * hand-built HTTP calls. Each transport owns its connections and `close()`
 * releases them, so a short-lived process (or a test's afterAll) does not
 * hang on a keep-alive socket or an HTTP/2 session.
 */

/** The wire protocols Laneway serves on its one port. */
export type WireProtocol = "connect-json" | "connect-binary" | "grpc" | "grpc-web";

export const wireProtocols: readonly WireProtocol[] = ["connect-json", "connect-binary", "grpc", "grpc-web"];

export interface LanewayTransportOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:7600`. */
  readonly baseUrl: string;
  /** Default `connect-json`. */
  readonly protocol?: WireProtocol;
  /** The bearer token: a project token, the operator token or an invite secret. */
  readonly token?: string | undefined;
  /** HTTP version for the Connect and gRPC-Web protocols (gRPC always uses HTTP/2). Default "1.1". */
  readonly httpVersion?: "1.1" | "2";
  /** Extra interceptors, applied inside the bearer interceptor. */
  readonly interceptors?: readonly Interceptor[];
}

export interface LanewayTransport {
  readonly transport: Transport;
  /** Closes every connection the transport opened. */
  close(): void;
}

export function createLanewayTransport(options: LanewayTransportOptions): LanewayTransport {
  const protocol = options.protocol ?? "connect-json";
  const interceptors: Interceptor[] = [];
  if (options.token !== undefined) {
    const authorization = `Bearer ${options.token}`;
    interceptors.push((next) => (req) => {
      req.header.set("Authorization", authorization);
      return next(req);
    });
  }
  interceptors.push(...(options.interceptors ?? []));
  const httpVersion = protocol === "grpc" ? "2" : (options.httpVersion ?? "1.1");
  if (httpVersion === "2") {
    const sessionManager = new Http2SessionManager(options.baseUrl);
    const common = { baseUrl: options.baseUrl, httpVersion, sessionManager, interceptors } as const;
    const transport =
      protocol === "grpc"
        ? createGrpcTransport(common)
        : protocol === "grpc-web"
          ? createGrpcWebTransport(common)
          : createConnectTransport({ ...common, useBinaryFormat: protocol === "connect-binary" });
    return { transport, close: () => sessionManager.abort() };
  }
  const agent = keepAliveAgent(options.baseUrl);
  const common = { baseUrl: options.baseUrl, httpVersion, nodeOptions: { agent }, interceptors: [...interceptors, resendOnClosedSocket] };
  const transport =
    protocol === "grpc-web"
      ? createGrpcWebTransport(common)
      : createConnectTransport({ ...common, useBinaryFormat: protocol === "connect-binary" });
  return { transport, close: () => agent.destroy() };
}

/**
 * How long an idle keep-alive socket waits for the next request before the
 * client closes it. The server closes idle HTTP/1.1 connections after 5 s;
 * a request sent on a socket the server is closing at that moment fails
 * with ECONNRESET. Node's agent closes a free socket one second before the
 * server's announced timeout, which a busy machine's timers can eat; this
 * leaves three.
 */
export const CLIENT_IDLE_SOCKET_MS = 2_000;

/** A keep-alive agent for `baseUrl` (http or https) that closes idle sockets after CLIENT_IDLE_SOCKET_MS. */
export function keepAliveAgent(baseUrl: string): http.Agent {
  return baseUrl.startsWith("https:") ? new ShortIdleHttpsAgent({ keepAlive: true }) : new ShortIdleAgent({ keepAlive: true });
}

/** Node's keepSocketAlive returns whether the socket is kept (its typings say void). */
type KeepSocketAlive = (this: http.Agent, socket: Socket) => boolean;

function keepShortIdle(agent: http.Agent, base: KeepSocketAlive, socket: Socket): boolean {
  const keep = base.call(agent, socket);
  if (keep) socket.setTimeout(CLIENT_IDLE_SOCKET_MS);
  return keep;
}

/** Set on a request's error when it failed on a kept-alive socket before any of its answer arrived. */
const BEFORE_ANSWER_ON_REUSED = Symbol("laneway.beforeAnswerOnReusedSocket");

/** Marks the failures of a request sent on a reused socket that come before its answer (see resendOnClosedSocket). */
function markReused(request: http.ClientRequest): void {
  request.prependOnceListener("error", (error: Error) => {
    if ((request as { res?: unknown }).res === undefined || (request as { res?: unknown }).res === null) {
      (error as unknown as Record<symbol, boolean>)[BEFORE_ANSWER_ON_REUSED] = true;
    }
  });
}

class ShortIdleAgent extends http.Agent {
  override keepSocketAlive(socket: Socket): boolean {
    return keepShortIdle(this, http.Agent.prototype.keepSocketAlive as unknown as KeepSocketAlive, socket);
  }

  override reuseSocket(socket: Socket, request: http.ClientRequest): void {
    super.reuseSocket(socket, request);
    markReused(request);
  }
}

class ShortIdleHttpsAgent extends https.Agent {
  override keepSocketAlive(socket: Socket): boolean {
    return keepShortIdle(this, https.Agent.prototype.keepSocketAlive as unknown as KeepSocketAlive, socket);
  }

  override reuseSocket(socket: Socket, request: http.ClientRequest): void {
    super.reuseSocket(socket, request);
    markReused(request);
  }
}

/** How many times one call is sent at most when its writes find the server's end of a kept-alive socket closed. */
const CLOSED_SOCKET_ATTEMPTS = 3;

/**
 * HTTP/1.1 keep-alive has a race no timer closes: the server closes a
 * socket that stayed idle for its keep-alive timeout (5 s), counted from
 * when it wrote the last response; a client that reads that response late
 * (a busy process with many streams to read) takes the socket for its next
 * call at about the same moment, and the call fails on its first bytes:
 * EPIPE on a write, or a reset ("socket hang up") before any answer. As
 * Node's documentation advises (`request.reusedSocket`), such a call — on a
 * reused socket, failing before any byte of its answer — is sent again on
 * another socket, at most CLOSED_SOCKET_ATTEMPTS times in all. Only unary
 * and server-streaming calls are (Laneway has no others); the one request
 * message of a server-streaming call is kept for it. A failure on a fresh
 * socket, or after an answer began, is not sent again. Every Laneway
 * mutation is safe to repeat in the one case where the server did read
 * the call and then died before answering: publishes and commands carry
 * their idempotency id, an ack or nack answers duplicate, and a claim's
 * extra lease runs out and is delivered again.
 */
const resendOnClosedSocket: Interceptor = (next) => async (req) => {
  const kind = req.method.methodKind;
  if (kind !== "unary" && kind !== "server_streaming") return await next(req);
  let request: UnaryRequest | StreamRequest = req;
  if (req.stream) {
    const messages: unknown[] = [];
    for await (const message of req.message) messages.push(message);
    request = { ...req, message: replayable(messages) } as StreamRequest;
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return await next(request as typeof req);
    } catch (error) {
      if (attempt >= CLOSED_SOCKET_ATTEMPTS || req.signal.aborted || !socketFailure(error)) throw error;
      // A failed write reaches the call before the request's error event that marks it: let that event pass.
      await new Promise((resolve) => setImmediate(resolve));
      if (!closedBeforeAnswer(error)) throw error;
    }
  }
};

/** An async iterable that yields the same messages each time it is iterated. */
function replayable<T>(messages: readonly T[]): AsyncIterable<T> {
  return {
    async *[Symbol.asyncIterator]() {
      yield* messages;
    },
  };
}

/** A failure and its causes, outermost first. */
function causes(error: unknown): object[] {
  const chain: object[] = [];
  for (let current = error; chain.length < 8 && typeof current === "object" && current !== null; current = (current as { cause?: unknown }).cause) chain.push(current);
  return chain;
}

/** Whether a failure (or one of its causes) is an EPIPE or a reset. */
function socketFailure(error: unknown): boolean {
  return causes(error).some((e) => (e as { code?: unknown }).code === "EPIPE" || (e as { code?: unknown }).code === "ECONNRESET");
}

/** Whether a failure is a reused socket's EPIPE or reset before any answer arrived (the mark is on the error the request emitted, or on a cause). */
function closedBeforeAnswer(error: unknown): boolean {
  return socketFailure(error) && causes(error).some((e) => (e as Record<symbol, unknown>)[BEFORE_ANSWER_ON_REUSED] === true);
}
