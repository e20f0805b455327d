import { readFile, writeFile } from "node:fs/promises";
import * as http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { envelope, rawCall, type RawAnswer, type RawProtocol } from "../helpers/raw-rpc.js";

/**
 * JSON bodies meant to cost the server time and memory, sent to a
 * `laneway serve` child process: deep arrays and objects, wide objects, the
 * 14.6 KB gzip body that inflates to 15 MB of `[` (sent to health without a
 * token), duplicate keys, on every way a JSON message arrives (Connect
 * unary and streaming, gRPC and gRPC-Web with JSON, a Connect GET query,
 * health, reflection, unknown fields); and the largest valid message, a
 * PublishBatch of 128 × 64 KiB records, alone and four at once.
 *
 * For each case the test prints the server's memory (VmRSS before and
 * after, and VmHWM, the peak, reset before the case through
 * /proc/<pid>/clear_refs) and the slowest answer of a health check it calls
 * over and over meanwhile (bodies are built before the clock starts, so the
 * test's own work does not count). It asserts generous bounds only: every hostile
 * body gets invalid_argument with an ErrorDetail and a message Laneway
 * wrote, the peak grows by at most a few times --max-request-bytes, health
 * keeps answering well within the request timeout, and afterwards a normal
 * call works.
 */

const MiB = 1024 * 1024;
/** A hostile body may cost a few times the 16 MiB read limit at its peak. */
const HOSTILE_PEAK_GROWTH = 96 * MiB;
/** The largest valid message (11 MB of JSON): its answer is as large again. */
const BATCH_PEAK_GROWTH = 160 * MiB;
/** Four of them at once. */
const BATCHES_PEAK_GROWTH = 400 * MiB;
/** Half the default request timeout (30 s): health must answer well within it. */
const HEALTH_BOUND_MS = 15_000;

let laneway: ChildLaneway;
let canResetPeak = true;

beforeAll(async () => {
  laneway = await startLanewayProcess();
});

afterAll(async () => {
  await laneway?.remove();
});

interface Memory {
  readonly rss: number;
  readonly peak: number;
}

async function memory(): Promise<Memory> {
  const status = await readFile(`/proc/${laneway.pid}/status`, "utf8");
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kib("VmRSS"), peak: kib("VmHWM") };
}

/** Resets VmHWM to the current RSS (Linux 4.0+), so the peak seen next is this case's own. */
async function resetPeak(): Promise<void> {
  if (!canResetPeak) return;
  await writeFile(`/proc/${laneway.pid}/clear_refs`, "5").catch(() => (canResetPeak = false));
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(0)} MiB`;

/**
 * Runs `work` while calling health over and over; reports the server's
 * memory and the slowest health answer, and checks the bounds.
 */
async function measured<T>(name: string, peakGrowthBound: number, work: () => Promise<T>): Promise<T> {
  const health = laneway.clients.client(Health);
  await resetPeak();
  const before = await memory();
  let done = false;
  let slowest = 0;
  let checks = 0;
  const probing = (async () => {
    while (!done) {
      const start = performance.now();
      const answer = await health.check({ service: "" });
      slowest = Math.max(slowest, performance.now() - start);
      checks += 1;
      expect(answer.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      // Pacing only: no assertion depends on it.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  const started = performance.now();
  let result: T;
  try {
    result = await work();
  } finally {
    done = true;
    await probing;
  }
  const took = performance.now() - started;
  const after = await memory();
  const growth = after.peak - (canResetPeak ? before.rss : before.peak);
  console.log(
    `${name}: server RSS ${mib(before.rss)} -> ${mib(after.rss)}, peak ${mib(after.peak)} (${canResetPeak ? "this case" : "process lifetime"}, +${mib(growth)}); ` +
      `request ${took.toFixed(0)} ms; slowest of ${checks} health checks meanwhile ${slowest.toFixed(0)} ms`,
  );
  expect(growth).toBeLessThan(peakGrowthBound);
  expect(slowest).toBeLessThan(HEALTH_BOUND_MS);
  return result;
}

/** A normal call after each case: health and a Publish through the generated clients. */
async function expectNormalCallsWork(): Promise<void> {
  expect((await laneway.clients.client(Health).check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  const lanes = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const published = await lanes.publish({ lane: "measurements", id: `after-${Math.random().toString(36).slice(2)}`, kind: RecordKind.EVENT, schema: "reading", payload: new Uint8Array([1, 2, 3]) });
  expect(published.record?.lane).toBe("measurements");
}

const text = (s: string) => Buffer.from(s, "utf8");
const deepArrays = (levels: number) => `{"service":"","unknownField":${"[".repeat(levels)}${"]".repeat(levels)}}`;
const deepObjects = (levels: number) => `{"lane":"measurements","unknownField":${'{"a":'.repeat(levels)}1${"}".repeat(levels)}}`;
const wideObject = (keys: number) => {
  const members: string[] = [];
  for (let i = 0; i < keys; i++) members.push(`"k${i}":1`);
  return `{"lane":"measurements","unknownField":{${members.join(",")}}}`;
};

const tooDeep = "the request body nests JSON objects and arrays more than 64 levels deep";
const tooWide = "a JSON object or array in the request body has more than 10000 members";
const duplicate = "a JSON object in the request body names the same key twice";

function expectRefused(answer: RawAnswer, message: string, reason: string, domain: string): void {
  expect(answer.error, `HTTP ${answer.status}: ${answer.body.toString("utf8").slice(0, 200)}`).toBeDefined();
  expect(Code[answer.error!.code]).toBe(Code[Code.InvalidArgument]);
  expect({ reason: answer.reason, domain: answer.domain }).toEqual({ reason, domain });
  expect(answer.error!.rawMessage).toBe(message);
}

interface Route {
  readonly name: string;
  readonly protocol: RawProtocol;
  readonly contentType: string;
  readonly enveloped: boolean;
}

const connectUnary: Route = { name: "Connect JSON", protocol: "connect", contentType: "application/json", enveloped: false };
const grpcJson: Route = { name: "gRPC with JSON", protocol: "grpc", contentType: "application/grpc+json", enveloped: true };
const grpcWebJson: Route = { name: "gRPC-Web with JSON", protocol: "grpc-web", contentType: "application/grpc-web+json", enveloped: true };

async function send(route: Route, path: string, body: Uint8Array, options: { token?: string; gzip?: boolean } = {}): Promise<RawAnswer> {
  const headers: Record<string, string> = {};
  if (options.gzip) headers[route.protocol === "connect" && !route.enveloped ? "content-encoding" : route.protocol === "connect" ? "connect-content-encoding" : "grpc-encoding"] = "gzip";
  const session = route.protocol === "grpc" ? http2.connect(laneway.url) : undefined;
  try {
    return await rawCall({
      baseUrl: laneway.url,
      protocol: route.protocol,
      path,
      contentType: route.contentType,
      body: route.enveloped ? envelope(body, options.gzip ? 1 : 0) : body,
      token: options.token,
      headers,
      ...(session ? { session } : {}),
    });
  } finally {
    session?.close();
  }
}

describe("the gzip bomb: 15 MB of [ in an unknown field of grpc.health.v1.Health/Check, without a token", () => {
  const bomb = gzipSync(text(`{"service":"","unknownField":${"[".repeat(15_000_000)}}`), { level: 9 });

  test("is about 15 KB on the wire", () => {
    expect(bomb.byteLength).toBeLessThan(20_000);
  });

  test.each([connectUnary, grpcJson])("over $name: invalid_argument before JSON.parse, memory and health unharmed", async (route) => {
    const answer = await measured(`gzip bomb over ${route.name}`, HOSTILE_PEAK_GROWTH, () => send(route, "/grpc.health.v1.Health/Check", bomb, { gzip: true }));
    expectRefused(answer, tooDeep, "invalid_argument", "server");
    await expectNormalCallsWork();
  });
});

describe("deep arrays (7,000,000 levels, 14 MB uncompressed) on every way a JSON message arrives", () => {
  const body = text(deepArrays(7_000_000));

  test.each([connectUnary, grpcJson, grpcWebJson])("Health/Check over $name without a token", async (route) => {
    const answer = await measured(`deep arrays to Health/Check over ${route.name}`, HOSTILE_PEAK_GROWTH, () => send(route, "/grpc.health.v1.Health/Check", body));
    expectRefused(answer, tooDeep, "invalid_argument", "server");
    await expectNormalCallsWork();
  });

  test("Health/Watch, an enveloped Connect stream message", async () => {
    const route: Route = { name: "Connect streaming JSON", protocol: "connect", contentType: "application/connect+json", enveloped: true };
    const answer = await measured("deep arrays to Health/Watch over Connect streaming JSON", HOSTILE_PEAK_GROWTH, () => send(route, "/grpc.health.v1.Health/Watch", body));
    expectRefused(answer, tooDeep, "invalid_argument", "server");
    await expectNormalCallsWork();
  });

  test("gRPC reflection (a bidirectional stream) over gRPC with JSON", async () => {
    const reflectionBody = text(`{"listServices":"","unknownField":${"[".repeat(7_000_000)}}`);
    const answer = await measured("deep arrays to ServerReflectionInfo over gRPC with JSON", HOSTILE_PEAK_GROWTH, () =>
      send(grpcJson, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", reflectionBody),
    );
    expectRefused(answer, tooDeep, "invalid_argument", "server");
    await expectNormalCallsWork();
  });

  test("a Connect GET query (GetRegistry, with a token): the query is bounded like a body", async () => {
    // 2,000 levels: the query must fit Node's 16 KiB limit on request headers.
    const query = new URLSearchParams({ encoding: "json", message: `{"unknownField":${"[".repeat(2_000)}${"]".repeat(2_000)}}` });
    const answer = await measured("deep arrays in a Connect GET query", HOSTILE_PEAK_GROWTH, () =>
      fetch(new URL(`/laneway.lane.v1.LaneService/GetRegistry?${query.toString()}`, laneway.url), { headers: { authorization: `Bearer ${laneway.tokens.atlas}` } }),
    );
    expect(answer.status).toBe(400);
    const error = (await answer.json()) as { code: string; message: string; details: { debug: { reason: string; domain: string } }[] };
    expect(error).toMatchObject({ code: "invalid_argument", message: tooDeep });
    expect(error.details[0]!.debug).toEqual({ reason: "lane_invalid", domain: "lanes" });
    await expectNormalCallsWork();
  });
});

describe("authenticated Publish bodies", () => {
  test.each([connectUnary, grpcJson])("deep objects (2,000,000 levels in an unknown field) over $name", async (route) => {
    const body = text(deepObjects(2_000_000));
    const answer = await measured(`deep objects in Publish over ${route.name}`, HOSTILE_PEAK_GROWTH, () =>
      send(route, "/laneway.lane.v1.LaneService/Publish", body, { token: laneway.tokens.atlas }),
    );
    expectRefused(answer, tooDeep, "lane_invalid", "lanes");
    await expectNormalCallsWork();
  });

  test.each([connectUnary, grpcJson])("a wide object (1,000,000 keys in an unknown field) over $name", async (route) => {
    const body = text(wideObject(1_000_000));
    expect(body.byteLength).toBeLessThan(16 * MiB);
    const answer = await measured(`1M keys in Publish over ${route.name}`, HOSTILE_PEAK_GROWTH, () =>
      send(route, "/laneway.lane.v1.LaneService/Publish", body, { token: laneway.tokens.atlas }),
    );
    expectRefused(answer, tooWide, "lane_invalid", "lanes");
    await expectNormalCallsWork();
  });

  test.each([connectUnary, grpcJson])("duplicate keys over $name: the same typed error as any malformed body, the key not quoted", async (route) => {
    const answer = await measured(`duplicate keys in Publish over ${route.name}`, HOSTILE_PEAK_GROWTH, () =>
      send(route, "/laneway.lane.v1.LaneService/Publish", text('{"idempotencyId":"a","idempotencyId":"b"}'), { token: laneway.tokens.atlas }),
    );
    expectRefused(answer, duplicate, "lane_invalid", "lanes");
    expect(answer.error!.rawMessage).not.toContain("idempotencyId");
    await expectNormalCallsWork();
  });
});

describe("the largest valid message: PublishBatch of 128 records of 64 KiB (11 MB of JSON)", () => {
  let batches = 0;
  const batch = () => {
    const payload = Buffer.alloc(64 * 1024, 0x5a).toString("base64");
    batches += 1;
    const records = Array.from({ length: 128 }, (_, i) => ({ id: `b${batches}-${i}`, kind: "RECORD_KIND_EVENT", schema: "reading", payload }));
    return text(JSON.stringify({ lane: "measurements", records }));
  };

  function expectPublished(answer: RawAnswer, route: Route): void {
    expect(answer.error, answer.error?.rawMessage).toBeUndefined();
    // gRPC: one message frame (a 5-byte prefix, then the JSON).
    const json = route.enveloped ? answer.body.subarray(5, 5 + answer.body.readUInt32BE(1)) : answer.body;
    const results = (JSON.parse(json.toString("utf8")) as { results: { published?: { record: { payload: string } } }[] }).results;
    expect(results).toHaveLength(128);
    expect(results.every((r) => r.published?.record.payload.length === 87_384)).toBe(true);
  }

  test.each([connectUnary, grpcJson])("alone, over $name", async (route) => {
    const body = batch();
    expect(body.byteLength).toBeGreaterThan(11_000_000);
    const answer = await measured(`one 11 MB PublishBatch over ${route.name}`, BATCH_PEAK_GROWTH, () => send(route, "/laneway.lane.v1.LaneService/PublishBatch", body, { token: laneway.tokens.atlas }));
    expectPublished(answer, route);
    await expectNormalCallsWork();
  });

  test.each([connectUnary, grpcJson])("four at once, over $name", async (route) => {
    const bodies = [batch(), batch(), batch(), batch()];
    const answers = await measured(`four 11 MB PublishBatches at once over ${route.name}`, BATCHES_PEAK_GROWTH, () =>
      Promise.all(bodies.map((body) => send(route, "/laneway.lane.v1.LaneService/PublishBatch", body, { token: laneway.tokens.atlas }))),
    );
    for (const answer of answers) expectPublished(answer, route);
    await expectNormalCallsWork();
  });
});
