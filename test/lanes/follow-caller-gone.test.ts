import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import type { WireProtocol } from "../../src/client/transport.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { jsonPayload } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * A follower that stops reading and closes its stream while the server is
 * writing pages to it (each page about 256 KiB here, so the server is
 * usually mid-write when the connection goes) is a caller going away, not
 * a failure of the server: the server logs nothing at warn or error level,
 * and the stream's place among the project's 32 Follow streams is freed
 * (40 such followers, then one more that reads to the end).
 */

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
const RECORDS = 1_000;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig() });
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "connect-binary" });
  for (let batch = 0; batch < RECORDS / 100; batch++) {
    await atlas.publishBatch({
      lane: "measurements",
      records: Array.from({ length: 100 }, (_, i) => ({ id: `reading-${batch}-${i}`, kind: RecordKind.EVENT, schema: "reading", payload: jsonPayload({ text: "x".repeat(2_000) }) })),
    });
  }
}, 120_000);

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

test("followers that close their streams mid-write are callers gone: nothing logged above debug, and their streams are freed", async () => {
  const protocols: WireProtocol[] = ["connect-binary", "connect-json", "grpc", "grpc-web"];
  for (let round = 0; round < 40; round++) {
    const client = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: protocols[round % protocols.length]! });
    const abort = new AbortController();
    let pages = 0;
    try {
      for await (const page of client.follow({ lane: "measurements", cursor: 0n }, { signal: abort.signal })) {
        expect(page.events.length).toBeGreaterThan(0);
        pages += 1;
        break;
      }
    } finally {
      abort.abort();
    }
    expect(pages).toBe(1);
  }
  // One more reads the whole lane: the 40 closed streams hold none of the project's 32.
  const reader = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "connect-binary" });
  const abort = new AbortController();
  let read = 0;
  try {
    for await (const page of reader.follow({ lane: "measurements", cursor: 0n }, { signal: abort.signal })) {
      read += page.events.length;
      if (page.cursor >= BigInt(RECORDS)) break;
    }
  } finally {
    abort.abort();
  }
  expect(read).toBe(RECORDS);
  const loud = laneway.logs.filter((line) => {
    const level = (JSON.parse(line) as { level?: string }).level;
    return level === "warn" || level === "error";
  });
  expect(loud).toEqual([]);
}, 120_000);
