import * as http from "node:http";
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
  const agent = new http.Agent({ keepAlive: true });
  const common = { baseUrl: options.baseUrl, httpVersion, nodeOptions: { agent }, interceptors } as const;
  const transport =
    protocol === "grpc-web"
      ? createGrpcWebTransport(common)
      : createConnectTransport({ ...common, useBinaryFormat: protocol === "connect-binary" });
  return { transport, close: () => agent.destroy() };
}
