import { randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { MAX_EVENTS } from "../../src/lanes/index.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { eventOn, expectLaneError, failure, firstFollowMessage, reasonOf, replayAll, type LaneClient } from "../helpers/lanes.js";
import { startNatsProxy, type NatsProxy } from "../helpers/nats-proxy.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { receiptOf, whenBack, workOn } from "../helpers/work.js";

/**
 * Replay and Follow read over a broker connection of their own
 * (`laneway-lanes-readers`); publication, reservations, claims and acks use
 * the lanes' connection (`laneway`). A proxy in front of a real nats-server
 * cuts one of them and keeps it cut: the other goes on working, and the cut
 * one's calls fail with lane_unavailable until it is back. Pages of large
 * records read about 512 KiB each, and still return every event once, in
 * order, with the cursor rules intact.
 */

const READERS = "laneway-lanes-readers";
const WRITERS = "laneway";

let nats: NatsServerHandle;
let proxy: NatsProxy;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  proxy = await startNatsProxy(nats.url);
  const config = exampleLanesConfig({ namespace: "split" });
  (config.lanes as unknown[]).push({ id: "large", owner: "atlas", publishers: ["atlas"], subscribers: ["beacon"] });
  laneway = await startLanewayInProcess({ natsUrl: proxy.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, protocol: "connect-binary" });
  await waitFor(() => proxy.names().includes(READERS) && proxy.names().includes(WRITERS), { what: "both of Laneway's broker connections" });
});

afterAll(async () => {
  await laneway?.stop();
  await proxy?.close();
  await nats?.remove();
});

describe("the readers' connection and the writers' connection do not share a fate", () => {
  test("with the readers' connection cut, publications, batches, claims and acks all succeed while Replay and Follow answer lane_unavailable; once it is back they read everything", async () => {
    await atlas.publish(eventOn("before-readers-cut", { n: 0 }));
    proxy.hold(READERS);
    try {
      await waitFor(() => !proxy.names().includes(READERS), { what: "the readers' connection to be cut" });
      await waitFor(async () => reasonOf(await failure(() => beacon.replay({ lane: "measurements", cursor: 0n }))) === "lane_unavailable", { what: "Laneway to see its readers' connection gone" });
      await expectLaneError(() => beacon.replay({ lane: "measurements", cursor: 0n }), Code.Unavailable, "lane_unavailable");
      await expectLaneError(() => firstFollowMessage(beacon, "measurements", 0n, new AbortController()), Code.Unavailable, "lane_unavailable");

      for (let i = 0; i < 16; i++) await atlas.publish(eventOn(`while-readers-cut-${i}`, { i }));
      const batch = await atlas.publishBatch({
        lane: "measurements",
        records: Array.from({ length: 16 }, (_, i) => ({ id: `batch-while-readers-cut-${i}`, kind: RecordKind.EVENT, schema: "temperature-v1", payload: Buffer.from(`{"i":${i}}`) })),
      });
      expect(batch.results.every((r) => r.outcome.case === "published")).toBe(true);
      await atlas.publish(workOn("measurements", "work-while-readers-cut"));
      const claimed = await beacon.claim({ lane: "measurements", group: "summarizers" });
      expect(claimed.work?.record?.id).toBe("work-while-readers-cut");
      const acked = await beacon.ack({ lane: "measurements", group: "summarizers", ...receiptOf(claimed.work!) });
      expect(acked.duplicate).toBe(false);
      // Still cut: the readers have not come back by themselves.
      await expectLaneError(() => beacon.replay({ lane: "measurements", cursor: 0n }), Code.Unavailable, "lane_unavailable");
    } finally {
      proxy.release(READERS);
    }
    await whenBack(() => beacon.replay({ lane: "measurements", cursor: 0n }));
    const ids = (await replayAll(beacon, "measurements")).events.map((e) => e.id);
    expect(ids).toEqual(["before-readers-cut", ...Array.from({ length: 16 }, (_, i) => `while-readers-cut-${i}`), ...Array.from({ length: 16 }, (_, i) => `batch-while-readers-cut-${i}`)]);
    expect(laneway.logs.some((line) => line.includes("the lane readers' NATS connection is not available"))).toBe(true);
  });

  test("with the writers' connection cut, Replay and Follow go on reading while publications answer lane_unavailable", async () => {
    const before = (await replayAll(beacon, "measurements")).events.map((e) => e.id);
    proxy.hold(WRITERS);
    try {
      await waitFor(() => !proxy.names().includes(WRITERS), { what: "the writers' connection to be cut" });
      await waitFor(async () => reasonOf(await failure(() => atlas.publish(eventOn("while-writers-cut", {})))) === "lane_unavailable", { what: "Laneway to see its writers' connection gone" });
      await expectLaneError(() => atlas.publish(eventOn("while-writers-cut", {})), Code.Unavailable, "lane_unavailable");
      expect((await replayAll(beacon, "measurements")).events.map((e) => e.id)).toEqual(before);
      const abort = new AbortController();
      const first = await firstFollowMessage(beacon, "measurements", 0n, abort);
      expect(first.events.map((e) => e.id)).toEqual(before.slice(0, first.events.length));
      abort.abort();
    } finally {
      proxy.release(WRITERS);
    }
    await whenBack(() => atlas.publish(eventOn("after-writers-cut", {})));
  });
});

describe("pages of large records", () => {
  test("read about 512 KiB each: fewer than 128 events a page, every event once and in order, max_events still honored", async () => {
    const payloads = Array.from({ length: 40 }, () => randomBytes(60_000));
    const answer = await atlas.publishBatch({
      lane: "large",
      records: payloads.map((payload, i) => ({ id: `large-${i}`, kind: i % 5 === 4 ? RecordKind.WORK : RecordKind.EVENT, schema: "blob-v1", payload })),
    });
    expect(answer.results.every((r) => r.outcome.case === "published")).toBe(true);
    const events = payloads.map((payload, i) => ({ id: `large-${i}`, payload })).filter((_, i) => i % 5 !== 4);

    const all = await replayAll(beacon, "large");
    expect(all.events.map((e) => e.id)).toEqual(events.map((e) => e.id));
    expect(all.events.map((e) => Buffer.from(e.payload).equals(events.find((x) => x.id === e.id)!.payload))).toEqual(events.map(() => true));
    // 40 records of about 80 KiB stored: more than one page, none of them empty, none of 128 events.
    expect(all.pages.length).toBeGreaterThan(1);
    expect(all.pages.every((p) => p.events > 0 && p.events < MAX_EVENTS)).toBe(true);
    expect(all.lastSequence).toBe(40n);

    const two = await beacon.replay({ lane: "large", cursor: 0n, maxEvents: 2 });
    expect(two.events.map((e) => e.id)).toEqual(["large-0", "large-1"]);
    expect(two.cursor).toBe(2n);
    // The cursor rules are those of small records: beyond the end is lane_cursor.
    await expectLaneError(() => beacon.replay({ lane: "large", cursor: 41n }), Code.Aborted, "lane_cursor");

    // Follow from 0 sends the same events in pages of the same size.
    const followed: string[] = [];
    const abort = new AbortController();
    for await (const page of beacon.follow({ lane: "large", cursor: 0n }, { signal: abort.signal })) {
      expect(page.events.length).toBeLessThan(MAX_EVENTS);
      followed.push(...page.events.map((e) => e.id));
      if (page.cursor >= 40n) break;
    }
    abort.abort();
    expect(followed).toEqual(events.map((e) => e.id));
  });
});
