import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { WireLimits } from "../config/index.js";

/**
 * One TCP port for HTTP/1.1 and cleartext HTTP/2 (h2c), with limits for
 * slow and hostile peers.
 *
 * `http2.createServer({ allowHTTP1: true })` only negotiates HTTP/1.1 over
 * TLS (ALPN); on cleartext an HTTP/1.1 client such as curl gets "Received
 * HTTP/0.9". So this listener reads the first bytes of each connection: the
 * HTTP/2 client preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`) selects the http2
 * server (gRPC, Connect over h2), anything else the http1 server (curl,
 * Connect JSON over HTTP/1.1, gRPC-Web).
 *
 * Because the inner servers never listen themselves, none of Node's own
 * connection timeouts would apply to the sockets handed to them. So:
 * - a connection must say which protocol it speaks within the headers
 *   timeout of being accepted (an absolute deadline, not an idle one: a
 *   peer trickling one byte at a time is cut off too);
 * - HTTP/1.1: Node's own headers and request timeouts run (the inner server
 *   is told it listens, which starts Node's connection checks); an idle
 *   keep-alive connection closes after 5 s; a response whose writes stall
 *   because the peer does not read is dropped after the idle timeout;
 * - HTTP/2: a session must open its first stream within the headers
 *   timeout; a session without open streams closes after the idle timeout
 *   (however slowly it trickles bytes); a stream must deliver its whole
 *   request within the request timeout; a stream whose response writes
 *   stall is reset after the idle timeout; a session that stays silent
 *   while streams are open is pinged, and dropped if the ping fails;
 * - at most `maxConnections` connections are open: past it the oldest
 *   connection that has not yet sent a request is dropped to make room, and
 *   when there is none the new connection is answered `503` and closed.
 *
 * Long-lived server streams stay open as long as the peer keeps reading:
 * an idle stream on which the server has nothing to send is not a slow
 * peer. The listener also tracks each connection's open requests so that
 * shutdown can close idle connections at once and busy ones right after
 * their response.
 */

const preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** How often deadlines are checked; timeouts fire within this of their value. */
const SWEEP_INTERVAL_MS = 250;

/** Idle time of an HTTP/1.1 keep-alive connection between requests (Node's default). */
export const KEEP_ALIVE_TIMEOUT_MS = 5_000;

type RequestHandler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

/** What `close` reports: whether every connection ended before the deadline. */
export interface ListenerCloseResult {
  /** True when all connections closed on their own; false when some were destroyed at the deadline. */
  readonly drained: boolean;
}

/** A connection's protocol once sniffed, and its open HTTP/1.1 requests. */
interface Connection {
  protocol: "sniffing" | "http1" | "http2";
  readonly acceptedAt: number;
  openRequests: number;
  /** Whether it ever carried a request (HTTP/1.1) or stream (HTTP/2). */
  productive: boolean;
}

/** An HTTP/2 session's streams and deadlines. */
interface Session {
  readonly startedAt: number;
  openStreams: number;
  idleSince: number;
  everStreamed: boolean;
  pinging: boolean;
}

/** An HTTP/2 stream whose request is still arriving. */
interface ArrivingStream {
  readonly stream: http2.ServerHttp2Stream;
  readonly startedAt: number;
}

/** Connections refused or dropped by the limits, for operators and tests. */
export interface ListenerCounters {
  refusedConnections: number;
  evictedConnections: number;
  timedOutConnections: number;
  timedOutStreams: number;
}

export class DualProtocolListener {
  private readonly tcp: net.Server;
  private readonly http1: http.Server;
  private readonly http2: http2.Http2Server;
  private readonly connections = new Map<net.Socket, Connection>();
  private readonly sessions = new Map<http2.ServerHttp2Session, Session>();
  private readonly arriving = new Set<ArrivingStream>();
  private readonly idleWaiters: (() => void)[] = [];
  private readonly sweep: NodeJS.Timeout;
  private closing = false;
  readonly counters: ListenerCounters = { refusedConnections: 0, evictedConnections: 0, timedOutConnections: 0, timedOutStreams: 0 };

  constructor(
    handler: RequestHandler,
    private readonly limits: WireLimits,
  ) {
    const http1Options: http.ServerOptions = {
      keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      connectionsCheckingInterval: SWEEP_INTERVAL_MS,
    };
    this.http1 = http.createServer(http1Options, (req, res) => {
      const connection = this.connections.get(req.socket);
      if (connection) {
        connection.openRequests += 1;
        connection.productive = true;
      }
      if (this.closing) res.setHeader("Connection", "close");
      res.once("close", () => {
        if (!connection) return;
        connection.openRequests -= 1;
        if (this.closing && connection.openRequests === 0) req.socket.end();
      });
      handler(req, res);
    });
    // Socket inactivity: decided below, so that an idle server stream lives on.
    this.http1.timeout = limits.idleTimeoutMs;
    this.http1.on("timeout", (socket: net.Socket) => this.onHttp1Inactive(socket));
    // The inner server never listens; telling it that it does starts Node's
    // own checks of the headers and request timeouts on the sockets it gets.
    this.http1.emit("listening");

    this.http2 = http2.createServer({}, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
    this.http2.on("session", (session) => this.onSession(session));
    this.http2.on("stream", (stream) => this.onStream(stream));

    // Node's http servers disable Nagle's algorithm on the sockets they
    // accept; sockets handed over from this listener must get the same, or
    // small responses and stream messages wait ~40 ms for delayed ACKs.
    this.tcp = net.createServer({ noDelay: true }, (socket) => this.route(socket));
    this.sweep = setInterval(() => this.checkDeadlines(), SWEEP_INTERVAL_MS);
    this.sweep.unref();
  }

  /** Open connections right now. */
  get connectionCount(): number {
    return this.connections.size;
  }

  private route(socket: net.Socket): void {
    socket.on("error", () => socket.destroy());
    if (this.connections.size >= this.limits.maxConnections && !this.evictOne()) {
      this.counters.refusedConnections += 1;
      socket.end("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 45\r\n\r\nLaneway has too many open connections; retry\n");
      socket.setTimeout(1_000, () => socket.destroy());
      return;
    }
    const connection: Connection = { protocol: "sniffing", acceptedAt: Date.now(), openRequests: 0, productive: false };
    this.connections.set(socket, connection);
    socket.once("close", () => {
      this.connections.delete(socket);
      if (this.connections.size === 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
    });
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const compared = Math.min(received.length, preface.length);
      const prefixMatches = received.subarray(0, compared).equals(preface.subarray(0, compared));
      if (prefixMatches && received.length < preface.length) return; // wait for more bytes
      socket.off("data", onData);
      socket.pause();
      socket.unshift(received);
      connection.protocol = prefixMatches ? "http2" : "http1";
      (prefixMatches ? this.http2 : this.http1).emit("connection", socket);
      process.nextTick(() => socket.resume());
    };
    socket.on("data", onData);
  }

  /**
   * Makes room for a new connection by dropping the oldest one that has
   * never carried a request (still sniffing, or an HTTP/1.1 connection that
   * sent no complete headers, or an HTTP/2 session without a stream).
   */
  private evictOne(): boolean {
    let oldest: [net.Socket, Connection] | undefined;
    for (const entry of this.connections) {
      const [, connection] = entry;
      if (connection.productive || connection.openRequests > 0) continue;
      if (oldest === undefined || connection.acceptedAt < oldest[1].acceptedAt) oldest = entry;
    }
    if (oldest === undefined) return false;
    this.counters.evictedConnections += 1;
    this.connections.delete(oldest[0]);
    oldest[0].destroy();
    return true;
  }

  /** HTTP/1.1 socket inactivity: a slow peer unless it is an idle response stream the peer keeps reading. */
  private onHttp1Inactive(socket: net.Socket): void {
    const connection = this.connections.get(socket);
    const responding = (connection?.openRequests ?? 0) > 0;
    if (responding && socket.writableLength === 0) return;
    this.counters.timedOutConnections += 1;
    socket.destroy();
  }

  private onSession(session: http2.ServerHttp2Session): void {
    const now = Date.now();
    const state: Session = { startedAt: now, openStreams: 0, idleSince: now, everStreamed: false, pinging: false };
    this.sessions.set(session, state);
    session.once("close", () => this.sessions.delete(session));
    session.on("error", () => session.destroy());
    // Silent while streams are open: ask the peer whether it is still there.
    session.setTimeout(this.limits.idleTimeoutMs, () => {
      if (state.openStreams === 0 || state.pinging) return;
      state.pinging = true;
      const sent = session.ping((error) => {
        state.pinging = false;
        if (error) session.destroy();
      });
      if (!sent) session.destroy();
    });
    if (this.closing) session.close();
  }

  private onStream(stream: http2.ServerHttp2Stream): void {
    const session = this.sessions.get(stream.session as http2.ServerHttp2Session);
    const socket = stream.session?.socket as net.Socket | undefined;
    const connection = socket ? this.connections.get(socket) : undefined;
    if (connection) connection.productive = true;
    if (session) {
      session.openStreams += 1;
      session.everStreamed = true;
    }
    const arriving: ArrivingStream = { stream, startedAt: Date.now() };
    if (!stream.readableEnded) {
      this.arriving.add(arriving);
      stream.once("end", () => this.arriving.delete(arriving));
    }
    stream.setTimeout(this.limits.idleTimeoutMs, () => {
      // The request is still arriving, or the response waits for a peer that does not read.
      const stalled = !stream.readableEnded || stream.writableLength > 0 || (stream as unknown as { bufferSize?: number }).bufferSize! > 0;
      if (!stalled) return;
      this.counters.timedOutStreams += 1;
      stream.close(http2.constants.NGHTTP2_CANCEL);
    });
    stream.once("close", () => {
      this.arriving.delete(arriving);
      if (!session) return;
      session.openStreams -= 1;
      if (session.openStreams === 0) session.idleSince = Date.now();
    });
  }

  private checkDeadlines(): void {
    const now = Date.now();
    const { headersTimeoutMs, requestTimeoutMs, idleTimeoutMs } = this.limits;
    for (const [socket, connection] of this.connections) {
      if (connection.protocol === "sniffing" && now - connection.acceptedAt > headersTimeoutMs) {
        this.counters.timedOutConnections += 1;
        socket.destroy();
      }
    }
    for (const [session, state] of this.sessions) {
      if (state.openStreams > 0) continue;
      const silentStart = !state.everStreamed && now - state.startedAt > headersTimeoutMs;
      const idle = state.everStreamed && now - state.idleSince > idleTimeoutMs;
      if (silentStart || idle) {
        this.counters.timedOutConnections += 1;
        session.destroy();
      }
    }
    for (const entry of this.arriving) {
      if (now - entry.startedAt > requestTimeoutMs) {
        this.arriving.delete(entry);
        this.counters.timedOutStreams += 1;
        entry.stream.close(http2.constants.NGHTTP2_CANCEL);
      }
    }
  }

  /** Listens on host:port (port 0 picks a free port) and returns the bound address. */
  listen(host: string, port: number): Promise<net.AddressInfo> {
    return new Promise((resolve, reject) => {
      const onError = (error: Error) => reject(error);
      this.tcp.once("error", onError);
      this.tcp.listen(port, host, () => {
        this.tcp.off("error", onError);
        resolve(this.tcp.address() as net.AddressInfo);
      });
    });
  }

  /**
   * Stops accepting connections and asks open ones to finish: idle
   * HTTP/1.1 connections (and ones that never sent a request) close at
   * once, busy ones after their last response, HTTP/2 sessions get GOAWAY
   * and end after their open streams. At the deadline it calls `onDeadline`
   * (to cancel the calls still running) and destroys whatever is still open.
   */
  async close(deadlineMs: number, onDeadline?: () => void): Promise<ListenerCloseResult> {
    this.closing = true;
    const stopped = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    for (const [socket, connection] of this.connections) {
      if (connection.protocol !== "http2" && connection.openRequests === 0) socket.end();
    }
    for (const session of this.sessions.keys()) session.close();
    const allClosed = this.connections.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<"deadline">((resolve) => {
      timer = setTimeout(() => resolve("deadline"), deadlineMs);
    });
    const outcome = await Promise.race([allClosed.then(() => "closed" as const), deadline]);
    clearTimeout(timer);
    if (outcome === "deadline") {
      onDeadline?.();
      // Give canceled handlers a moment to send their final frames.
      await new Promise((r) => setTimeout(r, 50));
      for (const session of this.sessions.keys()) session.destroy();
      for (const socket of this.connections.keys()) socket.destroy();
    }
    await stopped;
    clearInterval(this.sweep);
    this.http1.close();
    this.http2.close();
    return { drained: outcome === "closed" };
  }
}
