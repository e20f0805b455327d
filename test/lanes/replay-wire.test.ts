import { create, fromJson, toBinary, type JsonValue } from "@bufbuild/protobuf";
import { afterAll, beforeAll, expect, test } from "vitest";
import {
  LaneService,
  RecordKind,
  ReplayRequestSchema,
  ReplayResponseSchema,
  type ReplayResponse,
} from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { wireProtocols } from "../../src/client/transport.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { firstFollowMessage, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { envelope, rawCall } from "../helpers/raw-rpc.js";

/**
 * Replay and Follow answer the same page in every protocol and codec:
 * Connect JSON (POST and GET) and binary, gRPC and gRPC-Web. The binary
 * answers copy each record's fields from its stored envelope; they must be
 * byte for byte the generated encoder's encoding of the page the JSON
 * answer describes, so that any conforming Protobuf client (other
 * languages included) reads exactly the records that were published.
 */

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
const lane = "measurements";
const path = "/laneway.lane.v1.LaneService/Replay";

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig() });
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const answer = await atlas.publishBatch({
    lane,
    records: [
      { id: "plain", kind: RecordKind.EVENT, schema: "temperature-v1", payload: new TextEncoder().encode('{"celsius":21}') },
      { id: "work-one", kind: RecordKind.WORK, schema: "summary-v1", payload: new Uint8Array([1, 2]) },
      { id: "with-provenance", kind: RecordKind.EVENT, schema: "temperature-v1", payload: new Uint8Array(0), provenance: "https://example.net/sensor/1?at=2026" },
      { id: "large", kind: RecordKind.EVENT, schema: "blob-v1", payload: new Uint8Array(40_000).fill(0xa5) },
    ],
  });
  expect(answer.results.every((r) => r.outcome.case === "published")).toBe(true);
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

/** The canonical binary encoding of a page. */
const canonical = (page: ReplayResponse) => Buffer.from(toBinary(ReplayResponseSchema, page));

test("every protocol answers the same replay page, and its binary form is the generated encoding of that page", async () => {
  const token = laneway.tokens.beacon;
  const pages = new Map<string, ReplayResponse>();
  for (const protocol of wireProtocols) {
    const client: LaneClient = laneway.clients.client(LaneService, { token, protocol });
    pages.set(protocol, await client.replay({ lane, cursor: 0n }));
  }
  const json = pages.get("connect-json")!;
  expect(json.events.map((e) => e.id)).toEqual(["plain", "with-provenance", "large"]);
  expect(json.events[1]).toMatchObject({ provenance: "https://example.net/sensor/1?at=2026", project: "atlas", lane, kind: RecordKind.EVENT });
  expect(json.events[2]!.payload).toEqual(new Uint8Array(40_000).fill(0xa5));
  expect(json.cursor).toBe(4n);
  for (const [protocol, page] of pages) expect(page, protocol).toEqual(json);

  // The bytes themselves, as each binary protocol sends them.
  const request = toBinary(ReplayRequestSchema, create(ReplayRequestSchema, { lane, cursor: 0n }));
  const connect = await rawCall({ baseUrl: laneway.url, protocol: "connect", path, contentType: "application/proto", body: request, token });
  expect(connect.status).toBe(200);
  expect(connect.body.equals(canonical(json))).toBe(true);
  for (const [protocol, contentType] of [
    ["grpc", "application/grpc"],
    ["grpc-web", "application/grpc-web+proto"],
  ] as const) {
    const answer = await rawCall({ baseUrl: laneway.url, protocol, path, contentType, body: envelope(request), token });
    expect(answer.error, protocol).toBeUndefined();
    // The first frame: flags 0, a 4-byte length, the message.
    const length = answer.body.readUInt32BE(1);
    expect(answer.body[0]).toBe(0);
    expect(answer.body.subarray(5, 5 + length).equals(canonical(json)), protocol).toBe(true);
  }

  // Connect GET (Replay has no side effects), in JSON.
  const message = JSON.stringify({ lane, cursor: "0" });
  const response = await fetch(`${laneway.url}${path}?connect=v1&encoding=json&message=${encodeURIComponent(message)}`, { headers: { authorization: `Bearer ${token}` } });
  expect(response.status).toBe(200);
  expect(fromJson(ReplayResponseSchema, (await response.json()) as JsonValue)).toEqual(json);
  // Connect GET in binary: answered in binary, with the same bytes as the POST.
  const binaryGet = await fetch(`${laneway.url}${path}?connect=v1&encoding=proto&base64=1&message=${Buffer.from(request).toString("base64url")}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(binaryGet.status).toBe(200);
  expect(binaryGet.headers.get("content-type")).toBe("application/proto");
  expect(Buffer.from(await binaryGet.arrayBuffer()).equals(canonical(json))).toBe(true);
});

test("every protocol follows with the same first page", async () => {
  const firsts = [];
  for (const protocol of wireProtocols) {
    const client: LaneClient = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol });
    const abort = new AbortController();
    try {
      const first = await firstFollowMessage(client, lane, 0n, abort);
      firsts.push({ events: first.events, cursor: first.cursor });
    } finally {
      abort.abort();
    }
  }
  expect(firsts[0]!.events.map((e) => e.id)).toEqual(["plain", "with-provenance", "large"]);
  expect(firsts[0]!.cursor).toBe(4n);
  for (const first of firsts) expect(first).toEqual(firsts[0]);
});
