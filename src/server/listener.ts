import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";

/**
 * One TCP port for HTTP/1.1 and cleartext HTTP/2 (h2c).
 *
 * `http2.createServer({ allowHTTP1: true })` only negotiates HTTP/1.1 over
 * TLS (ALPN); on cleartext an HTTP/1.1 client such as curl gets "Received
 * HTTP/0.9". So this listener reads the first bytes of each connection: the
 * HTTP/2 client preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`) selects the http2
 * server (gRPC, Connect over h2), anything else the http1 server (curl,
 * Connect JSON over HTTP/1.1, gRPC-Web).
 *
 * Because the http1 and http2 servers never listen themselves, Node's own
 * connection tracking (`closeIdleConnections`) does not apply; the listener
 * tracks each connection's protocol and open requests so that shutdown can
 * close idle connections at once and busy ones right after their response.
 */

const preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** How long a new connection may stay silent before its protocol is known. */
const SNIFF_TIMEOUT_MS = 30_000;

type RequestHandler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

/** What `close` reports: whether every connection ended before the deadline. */
export interface ListenerCloseResult {
  /** True when all connections closed on their own; false when some were destroyed at the deadline. */
  readonly drained: boolean;
}

/** A connection's protocol once sniffed, and its open HTTP/1.1 requests. */
interface Connection {
  protocol: "sniffing" | "http1" | "http2";
  openRequests: number;
}

export class DualProtocolListener {
  private readonly tcp: net.Server;
  private readonly http1: http.Server;
  private readonly http2: http2.Http2Server;
  private readonly connections = new Map<net.Socket, Connection>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly idleWaiters: (() => void)[] = [];
  private closing = false;

  constructor(handler: RequestHandler) {
    this.http1 = http.createServer((req, res) => {
      const connection = this.connections.get(req.socket);
      if (connection) connection.openRequests += 1;
      if (this.closing) res.setHeader("Connection", "close");
      res.once("close", () => {
        if (!connection) return;
        connection.openRequests -= 1;
        if (this.closing && connection.openRequests === 0) req.socket.end();
      });
      handler(req, res);
    });
    this.http1.keepAliveTimeout = 5_000;
    this.http2 = http2.createServer({}, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
    this.http2.on("session", (session) => {
      this.sessions.add(session);
      session.once("close", () => this.sessions.delete(session));
      if (this.closing) session.close();
    });
    // Node's http servers disable Nagle's algorithm on the sockets they
    // accept; sockets handed over from this listener must get the same, or
    // small responses and stream messages wait ~40 ms for delayed ACKs.
    this.tcp = net.createServer({ noDelay: true }, (socket) => this.route(socket));
  }

  private route(socket: net.Socket): void {
    const connection: Connection = { protocol: "sniffing", openRequests: 0 };
    this.connections.set(socket, connection);
    socket.once("close", () => {
      this.connections.delete(socket);
      if (this.connections.size === 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
    });
    socket.on("error", () => socket.destroy());
    // A peer that opens a connection and never says which protocol it
    // speaks must not hold it forever.
    socket.setTimeout(SNIFF_TIMEOUT_MS, () => socket.destroy());
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const compared = Math.min(received.length, preface.length);
      const prefixMatches = received.subarray(0, compared).equals(preface.subarray(0, compared));
      if (prefixMatches && received.length < preface.length) return; // wait for more bytes
      socket.off("data", onData);
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(received);
      connection.protocol = prefixMatches ? "http2" : "http1";
      (prefixMatches ? this.http2 : this.http1).emit("connection", socket);
      process.nextTick(() => socket.resume());
    };
    socket.on("data", onData);
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
    for (const session of this.sessions) session.close();
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
      for (const session of this.sessions) session.destroy();
      for (const socket of this.connections.keys()) socket.destroy();
    }
    await stopped;
    this.http1.close();
    this.http2.close();
    return { drained: outcome === "closed" };
  }
}
