import * as http2 from "node:http2";
import * as net from "node:net";
import { readFile } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { envelope, rawCall } from "../helpers/raw-rpc.js";

/**
 * Bodies meant to make the server hold memory, sent without any token to
 * the public health service: a gzip bomb (255 KB that inflates to 256 MiB)
 * over Connect and gRPC, and a plain 100 MB body. Each is refused at the
 * read limit (16 MiB by default) while the server's peak memory (VmHWM of
 * `laneway serve`) grows by less than the documented bound of
 * docs/operations.md: a few times the read limit, here checked against
 * 160 MiB, a generous margin for a noisy machine.
 */

const LIMIT = 16 * 1024 * 1024;
const PEAK_GROWTH_BOUND = 160 * 1024 * 1024;
let laneway: ChildLaneway;

beforeAll(async () => {
  laneway = await startLanewayProcess({ lanesConfig: false });
});

afterAll(async () => {
  await laneway?.remove();
});

async function memory(pid: number): Promise<{ peak: number; rss: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { peak: kib("VmHWM"), rss: kib("VmRSS") };
}

const bomb = gzipSync(Buffer.alloc(256 * 1024 * 1024));

async function expectServing(): Promise<void> {
  const health = laneway.clients.client(Health);
  expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
}

test("the gzip bomb is small on the wire", () => {
  expect(bomb.byteLength).toBeLessThan(300_000);
});

test("a gzip bomb over Connect is refused at the limit and the server's memory stays bounded", async () => {
  const before = await memory(laneway.pid);
  const result = await rawCall({
    baseUrl: laneway.url,
    protocol: "connect",
    path: "/grpc.health.v1.Health/Check",
    contentType: "application/proto",
    headers: { "content-encoding": "gzip" },
    body: bomb,
  });
  expect(result.error?.rawMessage).toBe(`the request message is larger than the server's limit of ${LIMIT} bytes`);
  expect({ reason: result.reason, domain: result.domain }).toEqual({ reason: "message_too_large", domain: "server" });
  const after = await memory(laneway.pid);
  expect(after.peak - before.peak).toBeLessThan(PEAK_GROWTH_BOUND);
  await expectServing();
});

test("a gzip bomb over gRPC is refused at the limit and the server's memory stays bounded", async () => {
  const before = await memory(laneway.pid);
  const session = http2.connect(laneway.url);
  try {
    const result = await rawCall({
      baseUrl: laneway.url,
      protocol: "grpc",
      path: "/grpc.health.v1.Health/Check",
      contentType: "application/grpc",
      headers: { "grpc-encoding": "gzip" },
      body: envelope(bomb, 1),
      session,
    });
    expect(result.error?.code).toBe(8); // resource_exhausted
    expect(result.reason).toBe("message_too_large");
  } finally {
    session.close();
  }
  const after = await memory(laneway.pid);
  expect(after.peak - before.peak).toBeLessThan(PEAK_GROWTH_BOUND);
  await expectServing();
});

test("a plain 100 MB body is not read past the limit: the answer comes first and the server's memory stays bounded", async () => {
  const before = await memory(laneway.pid);
  const { hostname, port } = new URL(laneway.url);
  const socket = net.connect({ host: hostname, port: Number(port) });
  socket.on("error", () => {});
  const total = 100 * 1024 * 1024;
  let answer = "";
  socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  socket.write(`POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: laneway\r\nContent-Type: application/proto\r\nContent-Length: ${total}\r\n\r\n`);
  const chunk = Buffer.alloc(1024 * 1024, 0x41);
  let sent = 0;
  while (sent < total && !socket.destroyed && !answer.includes("\r\n\r\n")) {
    if (!socket.write(chunk)) await new Promise<void>((resolve) => socket.once("drain", () => resolve()).once("close", () => resolve()));
    sent += chunk.byteLength;
  }
  await closed;
  expect(answer).toMatch(/^HTTP\/1\.1 429 /);
  expect(answer).toContain(`the request message is larger than the server's limit of ${LIMIT} bytes`);
  expect(sent).toBeLessThan(total);
  const after = await memory(laneway.pid);
  expect(after.peak - before.peak).toBeLessThan(PEAK_GROWTH_BOUND);
  await expectServing();
});
