/**
 * The second baseline of the server-overhead benchmark: connect-node with
 * Laneway's GetRegistry handler and its token check, but none of Laneway's
 * layers (no request gate, no validation or error-mapping interceptors, no
 * one-port listener). Laneway's rows divided by this one are the cost of
 * those layers; this row divided by the raw handler is Connect's own cost.
 *
 * Serves Connect on HTTP/1.1 and gRPC on h2c, on two ports, and prints
 * "listening on <http1 url> <h2c url>".
 */
import * as http from "node:http";
import * as http2 from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { LaneService } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { LaneRegistry, loadLanesConfig, type LanesCore } from "../src/lanes/index.js";
import { silentLogger } from "../src/log/logger.js";
import { Authenticator, principalKey, secretAuthenticator } from "../src/server/auth.js";
import { laneServiceImpl } from "../src/server/services/lane-service.js";
import { lanesBinding } from "../src/server/cores/lanes.js";

const config = await loadLanesConfig(process.argv[2]!, process.env);
const authenticator = new Authenticator({ authenticators: [secretAuthenticator("project", config.tokens)] });
// Only GetRegistry is measured: the core needs nothing but its registry.
const registryOnly = { registry: new LaneRegistry(config) } as unknown as LanesCore;
const impl = laneServiceImpl(registryOnly, new AbortController().signal, silentLogger, lanesBinding.errors);
const handler = connectNodeAdapter({
  routes: (router) =>
    router.service(LaneService, {
      ...impl,
      async getRegistry(req, ctx) {
        const principal = await authenticator.resolveToken((ctx.requestHeader.get("authorization") ?? "").replace(/^Bearer /, ""));
        if (principal === undefined) throw new ConnectError("unknown bearer token", Code.Unauthenticated);
        ctx.values.set(principalKey, principal);
        return impl.getRegistry(req, ctx);
      },
    }),
});
const h1 = http.createServer(handler);
h1.keepAliveTimeout = 5_000;
const h2 = http2.createServer(handler);
const listen = (server: http.Server | http2.Http2Server) =>
  new Promise<number>((resolve) => server.listen(0, "127.0.0.1", () => resolve((server.address() as { port: number }).port)));
const [p1, p2] = await Promise.all([listen(h1), listen(h2)]);
process.stdout.write(`listening on http://127.0.0.1:${p1} http://127.0.0.1:${p2}\n`);
process.once("SIGTERM", () => process.exit(0));
