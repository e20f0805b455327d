import * as http from "node:http";
import * as https from "node:https";
import type { Socket } from "node:net";
import type { Interceptor, Transport } from "@connectrpc/connect";
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
  const common = { baseUrl: options.baseUrl, httpVersion, nodeOptions: { agent }, interceptors } as const;
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

class ShortIdleAgent extends http.Agent {
  override keepSocketAlive(socket: Socket): boolean {
    return keepShortIdle(this, http.Agent.prototype.keepSocketAlive as unknown as KeepSocketAlive, socket);
  }
}

class ShortIdleHttpsAgent extends https.Agent {
  override keepSocketAlive(socket: Socket): boolean {
    return keepShortIdle(this, https.Agent.prototype.keepSocketAlive as unknown as KeepSocketAlive, socket);
  }
}
