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
 */

const preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

type RequestHandler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

/** What `close` reports: whether every connection ended before the deadline. */
export interface ListenerCloseResult {
  /** True when all connections closed on their own; false when some were destroyed at the deadline. */
  readonly drained: boolean;
}

export class DualProtocolListener {
  private readonly tcp: net.Server;
  private readonly http1: http.Server;
  private readonly http2: http2.Http2Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly idleWaiters: (() => void)[] = [];
  private closing = false;

  constructor(handler: RequestHandler) {
    this.http1 = http.createServer(handler as http.RequestListener);
    // Keep-alive connections idle longer than this are closed by the server.
    this.http1.keepAliveTimeout = 5_000;
    // A keep-alive connection that finishes a request while the listener is
    // closing becomes idle; close it then instead of at keepAliveTimeout.
    this.http1.on("request", (_req: http.IncomingMessage, res: http.ServerResponse) => {
      res.once("finish", () => {
        if (this.closing) setImmediate(() => this.http1.closeIdleConnections());
      });
    });
    this.http2 = http2.createServer({}, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
    this.http2.on("session", (session) => {
      this.sessions.add(session);
      session.once("close", () => this.sessions.delete(session));
    });
    this.tcp = net.createServer((socket) => this.route(socket));
  }

  private route(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.once("close", () => {
      this.sockets.delete(socket);
      if (this.sockets.size === 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
    });
    socket.on("error", () => socket.destroy());
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const compared = Math.min(received.length, preface.length);
      const prefixMatches = received.subarray(0, compared).equals(preface.subarray(0, compared));
      if (prefixMatches && received.length < preface.length) return; // wait for more bytes
      socket.off("data", onData);
      socket.pause();
      socket.unshift(received);
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

  /** The number of open connections (for tests and diagnostics). */
  get connections(): number {
    return this.sockets.size;
  }

  /**
   * Stops accepting connections, asks open ones to finish (idle HTTP/1.1
   * connections close at once, HTTP/2 sessions get GOAWAY and end after
   * their open streams), and at the deadline calls `onDeadline` (to cancel
   * the calls still running) and destroys whatever is still open.
   */
  async close(deadlineMs: number, onDeadline?: () => void): Promise<ListenerCloseResult> {
    this.closing = true;
    const stopped = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    this.http1.close();
    this.http1.closeIdleConnections();
    for (const session of this.sessions) session.close();
    const allClosed = this.sockets.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<"deadline">((resolve) => {
      timer = setTimeout(() => resolve("deadline"), deadlineMs);
    });
    const outcome = await Promise.race([allClosed.then(() => "closed" as const), deadline]);
    clearTimeout(timer);
    if (outcome === "deadline") {
      onDeadline?.();
      for (const session of this.sessions) session.destroy();
      for (const socket of this.sockets) socket.destroy();
    }
    await stopped;
    this.http2.close();
    return { drained: outcome === "closed" };
  }
}
