import { createHash, timingSafeEqual } from "node:crypto";
import type * as http from "node:http";
import type * as http2 from "node:http2";
import type { Logger } from "../../../log/logger.js";
import { safeErrorFields } from "../../../log/logger.js";
import { consoleAssets, type ConsoleAssets } from "../../console/assets.js";
import type { LanewayMetrics } from "./metrics.js";

/**
 * The two plain HTTP routes beside the RPCs, on the same port:
 *
 * - `GET /metrics`: the Prometheus exposition. Open by default, like
 *   nats-server's monitoring port: it carries no token, receipt, payload
 *   or free text, only counts labelled with contract names, codes and
 *   the lane and group identifiers of the configuration. Set
 *   `LANEWAY_METRICS_TOKEN` to require `Authorization: Bearer <it>`
 *   (Prometheus `authorization: {credentials_file: ...}`) where even those
 *   names must not be readable from the network.
 * - `GET /console/...`: the operator console's page and script, built from
 *   `console/` with esbuild the first time they are asked for. The console
 *   holds no secret itself: it calls the RPCs with the token typed into it.
 *
 * Every other path goes to the RPC handler.
 */

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;
type Handler = (req: NodeRequest, res: NodeResponse) => void;

export interface HttpRoutesOptions {
  readonly metrics: LanewayMetrics;
  readonly log: Logger;
  /** Required bearer token for /metrics (`LANEWAY_METRICS_TOKEN`); undefined: open. */
  readonly metricsToken?: string | undefined;
  /** The console's assets; default built from console/ on first use. */
  readonly console?: ConsoleAssets;
}

export function withHttpRoutes(rpc: Handler, options: HttpRoutesOptions): Handler {
  const { metrics, log } = options;
  const assets = options.console ?? consoleAssets();
  const tokenDigest = options.metricsToken ? createHash("sha256").update(options.metricsToken).digest() : undefined;
  return (req, res) => {
    const url = req.url ?? "";
    // RPC paths all start with "/laneway." or "/grpc.": the common case costs one comparison.
    if (url.charCodeAt(1) !== 109 /* m */ && url.charCodeAt(1) !== 99 /* c */) return rpc(req, res);
    const path = url.split("?", 1)[0]!;
    if (path === "/metrics") {
      if (req.method !== "GET" && req.method !== "HEAD") return plain(res, 405, "use GET\n");
      if (tokenDigest !== undefined) {
        const match = /^Bearer +(\S+)$/i.exec(String(req.headers.authorization ?? ""));
        const digest = createHash("sha256").update(match?.[1] ?? "").digest();
        if (!timingSafeEqual(digest, tokenDigest)) return plain(res, 401, "/metrics needs Authorization: Bearer <LANEWAY_METRICS_TOKEN>\n");
      }
      metrics.render().then(
        (body) => {
          res.writeHead(200, { "content-type": metrics.contentType, "cache-control": "no-store" });
          res.end(body);
        },
        (error: unknown) => {
          log.warn("the metrics could not be collected", safeErrorFields(error));
          plain(res, 500, "the metrics could not be collected\n");
        },
      );
      return;
    }
    if (path === "/console") {
      res.writeHead(308, { location: "/console/" });
      res.end();
      return;
    }
    if (path.startsWith("/console/")) {
      if (req.method !== "GET" && req.method !== "HEAD") return plain(res, 405, "use GET\n");
      assets.get(path.slice("/console/".length)).then(
        (asset) => {
          if (asset === undefined) return plain(res, 404, "no such console asset\n");
          res.writeHead(200, {
            "content-type": asset.contentType,
            "cache-control": "no-store",
            // The page loads only its own script and talks only to this server.
            "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
          });
          res.end(asset.body);
        },
        (error: unknown) => {
          log.error("the console could not be built", safeErrorFields(error));
          plain(res, 500, "the console could not be built: see the server log\n");
        },
      );
      return;
    }
    rpc(req, res);
  };
}

function plain(res: NodeResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
  res.end(body);
}
