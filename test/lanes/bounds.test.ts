import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { eventOn, expectLaneError, jsonPayload, published, recordFields, replayAll, text, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * The bounds of publication, on a namespace configured small: payloads at
 * and over max_payload (and over the contract's 1 MiB), provenance (length,
 * absolute URI, inline credentials), identifiers, batch sizes, and a full
 * stream under DiscardNew, which refuses new records as unavailable and
 * never evicts accepted ones.
 */

const MAX_PAYLOAD = 1024;
const MAX_RECORDS = 200;

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  const config = exampleLanesConfig({ namespace: "bounds", max_payload: MAX_PAYLOAD, max_records: MAX_RECORDS });
  (config.lanes as unknown[]).push({ id: "full", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"] });
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "connect-binary" });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

const bytes = (n: number) => new Uint8Array(n).fill(0x61);

describe("payload", () => {
  test("a payload of exactly max_payload bytes is accepted and read back byte for byte", async () => {
    const response = await atlas.publish(eventOn("at-max", null, { payload: bytes(MAX_PAYLOAD) }));
    expect(response.record?.payload).toEqual(bytes(MAX_PAYLOAD));
    const stored = (await replayAll(atlas, "measurements")).events.find((e) => e.id === "at-max");
    expect(stored?.payload).toEqual(bytes(MAX_PAYLOAD));
  });

  test("an empty payload is a payload like any other", async () => {
    const response = await atlas.publish(eventOn("empty", null, { payload: new Uint8Array() }));
    expect(response.record?.payload).toEqual(new Uint8Array());
  });

  test("one byte over max_payload fails with lane_invalid and reserves nothing: the id stays free", async () => {
    const error = await expectLaneError(
      () => atlas.publish(eventOn("over-max", null, { payload: bytes(MAX_PAYLOAD + 1) })),
      Code.InvalidArgument,
      "lane_invalid",
    );
    expect(error.rawMessage).toContain(`${MAX_PAYLOAD}`);
    // Nothing was reserved for the refused payload: other content may use the id.
    const later = await atlas.publish(eventOn("over-max", { small: true }));
    expect(later.duplicate).toBe(false);
    expect(text(later.record?.payload)).toBe('{"small":true}');
  });

  test("a payload over the contract's 1 MiB is refused before the core", async () => {
    await expectLaneError(() => atlas.publish(eventOn("huge", null, { payload: bytes(1_048_577) })), Code.InvalidArgument, "lane_invalid");
  });

  test("in a batch, an oversized payload fails only its own record", async () => {
    const response = await atlas.publishBatch({
      lane: "measurements",
      records: [
        { id: "batch-ok", kind: RecordKind.EVENT, schema: "s-v1", payload: bytes(MAX_PAYLOAD) },
        { id: "batch-over", kind: RecordKind.EVENT, schema: "s-v1", payload: bytes(MAX_PAYLOAD + 1) },
      ],
    });
    const [ok, over] = response.results.map((r) => r.outcome);
    expect(ok?.case).toBe("published");
    expect(over?.case === "error" && { code: over.value.code, reason: over.value.reason }).toEqual({ code: "invalid_argument", reason: "lane_invalid" });
  });
});

describe("provenance", () => {
  const uriOf = (length: number) => {
    const base = "https://sensors.example.net/";
    return base + "p".repeat(length - base.length);
  };

  test("an absolute URI of 2,048 bytes is kept as given", async () => {
    const provenance = uriOf(2048);
    const response = await atlas.publish(eventOn("prov-max", { n: 1 }, { provenance }));
    expect(response.record?.provenance).toBe(provenance);
  });

  test.each([
    ["2,049 bytes", uriOf(2049)],
    ["inline user:pass@ credentials", "https://user:pass@sensors.example.net/a"],
    ["an inline user@", "nats://user@broker.example.net:4222"],
    ["a relative reference", "/sensors/a"],
    ["not a URI", "not a uri at all"],
  ])("provenance with %s is refused with lane_invalid", async (_what, provenance) => {
    const error = await expectLaneError(() => atlas.publish(eventOn("prov-bad", { n: 1 }, { provenance })), Code.InvalidArgument, "lane_invalid");
    expect(error.rawMessage).not.toContain("pass@");
  });

  test("a batch record with inline credentials in its provenance refuses the whole batch", async () => {
    await expectLaneError(
      () =>
        atlas.publishBatch({
          lane: "measurements",
          records: [
            { id: "cred-a", kind: RecordKind.EVENT, schema: "s-v1", payload: bytes(1) },
            { id: "cred-b", kind: RecordKind.EVENT, schema: "s-v1", payload: bytes(1), provenance: "https://user:pass@example.net/" },
          ],
        }),
      Code.InvalidArgument,
      "lane_invalid",
    );
    // Neither record was published: the first id is still free for any content.
    const free = await atlas.publish(eventOn("cred-a", { other: 1 }));
    expect(free.duplicate).toBe(false);
  });
});

describe("identifiers", () => {
  const longest = "i" + "d".repeat(63);

  test("a 64-character identifier is accepted for lane-scoped ids and schemas", async () => {
    const response = await atlas.publish(eventOn(longest, { n: 1 }, { schema: longest }));
    expect(published(response)).toMatchObject({ id: longest, schema: longest });
  });

  test.each([
    ["id", { id: "i" + "d".repeat(64) }],
    ["id", { id: "Reading" }],
    ["id", { id: "1reading" }],
    ["id", { id: "reading.one" }],
    ["id", { id: "reading>" }],
    ["id", { id: "" }],
    ["schema", { schema: "Temperature" }],
    ["schema", { schema: "" }],
    ["lane", { lane: "Measurements" }],
    ["lane", { lane: "measurements.*" }],
    ["kind", { kind: RecordKind.UNSPECIFIED }],
  ])("a bad %s (%j) is refused with lane_invalid", async (_field, change) => {
    await expectLaneError(() => atlas.publish({ ...eventOn("ident-ok", { n: 1 }), ...change }), Code.InvalidArgument, "lane_invalid");
  });

  test("replay and follow refuse a bad lane identifier", async () => {
    await expectLaneError(() => atlas.replay({ lane: "Bad.Lane" }), Code.InvalidArgument, "lane_invalid");
    await expectLaneError(async () => {
      for await (const page of atlas.follow({ lane: "bad lane" })) void page;
    }, Code.InvalidArgument, "lane_invalid");
    await expectLaneError(() => atlas.replay({ lane: "measurements", maxEvents: 129 }), Code.InvalidArgument, "lane_invalid");
  });
});

describe("batch size", () => {
  const records = (n: number, prefix: string) =>
    Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}`, kind: i % 3 === 0 ? RecordKind.WORK : RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({ i }) }));

  test("a batch of 129 records is invalid_argument and publishes nothing", async () => {
    const before = await atlas.replay({ lane: "measurements", cursor: 0n });
    await expectLaneError(() => atlas.publishBatch({ lane: "measurements", records: records(129, "b129") }), Code.InvalidArgument, "lane_invalid");
    const after = await atlas.replay({ lane: "measurements", cursor: 0n });
    expect(after.lastSequence).toBe(before.lastSequence);
  });

  test("an empty batch and a batch repeating an id are invalid_argument", async () => {
    await expectLaneError(() => atlas.publishBatch({ lane: "measurements", records: [] }), Code.InvalidArgument, "lane_invalid");
    const twice = [...records(2, "twice"), records(1, "twice")[0]!];
    await expectLaneError(() => atlas.publishBatch({ lane: "measurements", records: twice }), Code.InvalidArgument, "lane_invalid");
    // Neither call reserved the ids.
    const fresh = await atlas.publish(eventOn("twice-0", { fresh: true }));
    expect(fresh.duplicate).toBe(false);
  });

  test("a batch of 128 records publishes every one, each with its own sequence", async () => {
    const response = await atlas.publishBatch({ lane: "measurements", records: records(128, "b128") });
    expect(response.results).toHaveLength(128);
    const ids = response.results.map((r) => (r.outcome.case === "published" ? r.outcome.value.record?.id : r.outcome.value?.reason));
    expect(ids).toEqual(records(128, "b128").map((r) => r.id));
    const sequences = new Set(response.results.map((r) => (r.outcome.case === "published" ? r.outcome.value.record?.sequence : undefined)));
    expect(sequences.size).toBe(128);
  });
});

describe("a full stream (DiscardNew)", () => {
  test("publishing past max_records fails with lane_unavailable, and nothing accepted earlier is evicted", async () => {
    const lane = "full";
    const accepted: ReturnType<typeof recordFields>[] = [];
    for (let start = 0; start < MAX_RECORDS; start += 128) {
      const n = Math.min(128, MAX_RECORDS - start);
      const response = await atlas.publishBatch({
        lane,
        records: Array.from({ length: n }, (_, i) => ({ id: `fill-${start + i}`, kind: RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({ i: start + i }) })),
      });
      for (const result of response.results) {
        if (result.outcome.case !== "published") throw new Error(`not published: ${result.outcome.value?.reason}`);
        accepted.push(recordFields(result.outcome.value.record));
      }
    }
    accepted.sort((a, b) => Number(a.sequence - b.sequence));

    const error = await expectLaneError(() => atlas.publish(eventOn("one-too-many", { late: true }, { lane })), Code.Unavailable, "lane_unavailable");
    expect(error.rawMessage).not.toMatch(/10077|maximum messages/i);
    // A retry of the same key is refused the same way: capacity is never a success.
    await expectLaneError(() => atlas.publish(eventOn("one-too-many", { late: true }, { lane })), Code.Unavailable, "lane_unavailable");
    // In a batch, each record past capacity carries its own unavailable result.
    const batch = await atlas.publishBatch({ lane, records: [{ id: "batch-too-many", kind: RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({}) }] });
    const outcome = batch.results[0]!.outcome;
    expect(outcome.case === "error" && [outcome.value.code, outcome.value.reason]).toEqual(["unavailable", "lane_unavailable"]);
    // Already accepted records stay duplicates of themselves, not failures.
    const again = await atlas.publish(eventOn("fill-0", { i: 0 }, { lane, schema: "s-v1" }));
    expect(again.duplicate).toBe(true);

    const stored = await replayAll(atlas, lane);
    expect(stored.firstRetained).toBe(1n);
    expect(stored.lastSequence).toBe(BigInt(MAX_RECORDS));
    expect(stored.events.map(recordFields)).toEqual(accepted);
    expect(stored.events.map((e) => e.id)).not.toContain("one-too-many");
  });
});
