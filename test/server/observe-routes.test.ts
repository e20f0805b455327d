import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, expect, test } from "vitest";
import { createLogger } from "../../src/log/logger.js";
import { withHttpRoutes } from "../../src/server/services/observe/http-routes.js";
import { LanewayMetrics } from "../../src/server/services/observe/metrics.js";
import { parsePrometheusText } from "../helpers/prometheus-text.js";

/**
 * The plain HTTP routes beside the RPCs, on a real node:http server: a
 * token for /metrics when LANEWAY_METRICS_TOKEN is set, the console's page
 * and its esbuild bundle, and every other path left to the RPC handler.
 */

const metricsToken = "m".repeat(40);
let server: http.Server;
let metrics: LanewayMetrics;
let base: string;
const logs: string[] = [];

beforeAll(async () => {
  metrics = new LanewayMetrics();
  const rpc = (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(299);
    res.end("rpc");
  };
  const handler = withHttpRoutes(rpc as never, { metrics, log: createLogger({ write: (l) => logs.push(l) }), metricsToken });
  server = http.createServer(handler as never);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  metrics.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

test("/metrics with LANEWAY_METRICS_TOKEN set: 401 without it or with another, the exposition with it", async () => {
  expect((await fetch(`${base}/metrics`)).status).toBe(401);
  expect((await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${"x".repeat(40)}` } })).status).toBe(401);
  const response = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } });
  expect(response.status).toBe(200);
  const families = parsePrometheusText(await response.text());
  expect(families.get("laneway_rpc_calls_total")?.type).toBe("counter");
  expect(families.get("laneway_nats_connected")?.samples[0]?.value).toBe(0);
});

test("the console's page, style and bundle; /console redirects; other paths reach the RPC handler", async () => {
  const page = await fetch(`${base}/console/`);
  expect(page.status).toBe(200);
  expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
  expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
  expect(await page.text()).toContain('<script type="module" src="app.js">');
  const bundle = await fetch(`${base}/console/app.js`);
  expect(bundle.status).toBe(200);
  expect(bundle.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
  const js = await bundle.text();
  // The page's own code, and connect-web's Connect protocol client with the generated descriptors.
  expect(js).toContain('"Ed25519"');
  expect(js.toLowerCase()).toContain("connect-protocol-version");
  expect(js.length).toBeGreaterThan(50_000);
  expect((await fetch(`${base}/console/console.css`)).status).toBe(200);
  expect((await fetch(`${base}/console/../package.json`)).status).not.toBe(200);
  const redirect = await fetch(`${base}/console`, { redirect: "manual" });
  expect(redirect.status).toBe(308);
  expect(redirect.headers.get("location")).toBe("/console/");
  expect((await fetch(`${base}/console/`, { method: "POST" })).status).toBe(405);
  for (const path of ["/laneway.lane.v1.LaneService/GetRegistry", "/grpc.health.v1.Health/Check", "/metricsx", "/consolex", "/"]) {
    const res = await fetch(`${base}${path}`, { method: "POST" });
    expect(res.status, path).toBe(299);
  }
  expect(logs).toEqual([]);
}, 60_000);
