import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService, RecordKind, type LaneRecord } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { MAX_EVENTS, MAX_EXAMINED, MAX_FOLLOWERS_PER_PROJECT, streamName } from "../../src/lanes/index.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import {
  brokerSnapshot,
  eventOn,
  expectLaneError,
  failure,
  firstFollowMessage,
  jsonPayload,
  published,
  reasonOf,
  recordFields,
  replayAll,
  text,
  type LaneClient,
} from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { rawCall } from "../helpers/raw-rpc.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Publication and reading on one shared broker and one Laneway: the
 * specification's forge-free two-project exchange, fan-out to independent
 * cursors, idempotent publication and its conflicts, batch publication,
 * bounded replay pages over a lane that mixes work and events, and Follow.
 *
 * Each concern has its own lane of the registry (the example's
 * `measurements`, plus `paging` and `tail`), so tests sharing the server
 * do not see each other's records.
 */

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  const config = exampleLanesConfig();
  (config.lanes as unknown[]).push(
    { id: "paging", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"] },
    { id: "tail", owner: "atlas", publishers: ["atlas", "beacon"], subscribers: ["atlas", "beacon"] },
    { id: "window", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"] },
    { id: "growing", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"] },
  );
  // A short broker duplicate window, so that a test can repeat a publication outside it.
  config.duplicate_window = "1s";
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, protocol: "grpc" });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

describe("two projects exchange records through a lane", () => {
  test("atlas publishes; beacon and atlas replay independently from their own cursors, work records advancing the cursor", async () => {
    // The specification's example: a temperature reading (event) and a
    // summary request (work) from atlas.
    const reading = await atlas.publish(eventOn("reading-one", { celsius: 21 }));
    expect(reading.duplicate).toBe(false);
    expect(published(reading)).toMatchObject({ lane: "measurements", project: "atlas", id: "reading-one", kind: RecordKind.EVENT, schema: "temperature-v1" });
    expect(text(reading.record?.payload)).toBe('{"celsius":21}');
    expect(reading.record?.createdAt).toBeDefined();
    const work = await atlas.publish(eventOn("summarize-one", { values: [21, 22] }, { kind: RecordKind.WORK, schema: "summary-v1" }));
    expect(work.record?.sequence).toBe(reading.record!.sequence + 1n);

    // beacon reads from cursor 0: the event, not the work record, and a
    // cursor that counts the work record it skipped.
    const beaconFirst = await beacon.replay({ lane: "measurements", cursor: 0n });
    expect(beaconFirst.events.map(recordFields)).toEqual([published(reading)]);
    expect(beaconFirst.cursor).toBe(work.record!.sequence);
    expect(beaconFirst.lastSequence).toBe(work.record!.sequence);
    expect(beaconFirst.firstRetained).toBe(1n);
    const beaconCursor = beaconFirst.cursor;

    // beacon publishes too; the envelope names the authenticated project.
    const reply = await beacon.publish(eventOn("reading-two", { celsius: 22 }));
    expect(reply.record?.project).toBe("beacon");
    const more = await atlas.publish(eventOn("reading-three", { celsius: 23 }));

    // beacon resumes from its saved cursor and sees only what is new.
    const beaconNext = await beacon.replay({ lane: "measurements", cursor: beaconCursor });
    expect(beaconNext.events.map(recordFields)).toEqual([published(reply), published(more)]);
    expect(beaconNext.cursor).toBe(more.record!.sequence);

    // atlas's own cursor is independent of beacon's: it reads everything.
    const atlasAll = await atlas.replay({ lane: "measurements", cursor: 0n });
    expect(atlasAll.events.map((e) => e.id)).toEqual(["reading-one", "reading-two", "reading-three"]);
    expect(atlasAll.events.map((e) => e.project)).toEqual(["atlas", "beacon", "atlas"]);
    // A page that reached the end repeats nothing when read again from its cursor.
    const caughtUp = await atlas.replay({ lane: "measurements", cursor: atlasAll.cursor });
    expect(caughtUp.events).toEqual([]);
    expect(caughtUp.cursor).toBe(atlasAll.cursor);

    // max_events bounds a page; the cursor stops at the last event returned.
    const one = await beacon.replay({ lane: "measurements", cursor: 0n, maxEvents: 1 });
    expect(one.events.map((e) => e.id)).toEqual(["reading-one"]);
    expect(one.cursor).toBe(reading.record!.sequence);
  });
});

describe("idempotent publication", () => {
  test("repeating a publication returns the original record with duplicate set, and the lane holds it once", async () => {
    const request = eventOn("dup-one", { celsius: 30 }, { provenance: "https://sensors.example.net/atlas/7" });
    const first = await atlas.publish(request);
    expect(first.duplicate).toBe(false);
    const again = await atlas.publish(request);
    expect(again.duplicate).toBe(true);
    expect(published(again)).toEqual(published(first));
    // Over another protocol, too: the key is (lane, project, id), not the connection.
    const binary = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "connect-binary" });
    const third = await binary.publish(request);
    expect(third.duplicate).toBe(true);
    expect(published(third)).toEqual(published(first));
    const copies = (await replayAll(atlas, "measurements")).events.filter((e) => e.id === "dup-one");
    expect(copies.map(recordFields)).toEqual([published(first)]);
  });

  test.each([
    ["payload", { payload: jsonPayload({ celsius: 31 }) }],
    ["kind", { kind: RecordKind.WORK }],
    ["schema", { schema: "temperature-v2" }],
    ["provenance", { provenance: "https://sensors.example.net/atlas/8" }],
  ] as const)("the same id with a different %s fails with lane_conflict and keeps the original", async (field, change) => {
    const id = `mismatch-${field}`;
    const original = await atlas.publish(eventOn(id, { celsius: 30 }, { provenance: "https://sensors.example.net/atlas/7" }));
    const error = await expectLaneError(
      () => atlas.publish({ ...eventOn(id, { celsius: 30 }, { provenance: "https://sensors.example.net/atlas/7" }), ...change }),
      Code.Aborted,
      "lane_conflict",
    );
    expect(error.rawMessage).toContain(id);
    // The conflict left the original alone, and it is still a duplicate of itself.
    const again = await atlas.publish(eventOn(id, { celsius: 30 }, { provenance: "https://sensors.example.net/atlas/7" }));
    expect(again.duplicate).toBe(true);
    expect(published(again)).toEqual(published(original));
    const copies = (await replayAll(atlas, "measurements")).events.filter((e) => e.id === id);
    expect(copies.map(recordFields)).toEqual([published(original)]);
  });

  test("a repeat outside the broker's duplicate window still returns the original record, not a second one", async () => {
    const ns = "commons";
    const lane = "window";
    const original = await atlas.publish(eventOn("windowed", { n: 1 }, { lane }));
    // The broker forgets message ids after its duplicate window. Probe it on
    // a subject of the same stream that no Laneway key uses: once a message
    // id published after the original's is forgotten, so is the original's.
    const probeSubject = `laneway.${ns}.${lane}.rec.probe.window`;
    const nc = await connect({ servers: nats.url, reconnect: false });
    try {
      const js = jetstream(nc);
      await js.publish(probeSubject, new Uint8Array(), { msgID: "window-probe" });
      await waitFor(async () => !(await js.publish(probeSubject, new Uint8Array(), { msgID: "window-probe" })).duplicate, {
        intervalMs: 100,
        what: "the broker's duplicate window to pass",
      });
    } finally {
      await nc.close();
    }
    const before = (await brokerSnapshot(nats.url)).streams[streamName(ns, lane)]!.messages;

    // Only the subject's expected-sequence check can tell now: the same record, reported as a duplicate.
    const again = await atlas.publish(eventOn("windowed", { n: 1 }, { lane }));
    expect(again.duplicate).toBe(true);
    expect(published(again)).toEqual(published(original));
    // Other content is still a conflict.
    await expectLaneError(() => atlas.publish(eventOn("windowed", { n: 2 }, { lane })), Code.Aborted, "lane_conflict");
    // Nothing was appended by either.
    expect((await brokerSnapshot(nats.url)).streams[streamName(ns, lane)]!.messages).toBe(before);
  });

  test("the idempotency key is per project: another project may use the same id with other content", async () => {
    const mine = await atlas.publish(eventOn("shared-id", { from: "atlas" }));
    const theirs = await beacon.publish(eventOn("shared-id", { from: "beacon" }));
    expect(theirs.duplicate).toBe(false);
    expect(theirs.record?.sequence).not.toBe(mine.record?.sequence);
    const both = (await replayAll(beacon, "measurements")).events.filter((e) => e.id === "shared-id");
    expect(both.map((e) => [e.project, text(e.payload)])).toEqual([
      ["atlas", '{"from":"atlas"}'],
      ["beacon", '{"from":"beacon"}'],
    ]);
  });

  test("a batch gives each record its own result in request order: new, duplicate and conflicting records side by side", async () => {
    const earlier = await atlas.publish(eventOn("batch-existing", { n: 0 }));
    const response = await atlas.publishBatch({
      lane: "measurements",
      records: [
        { id: "batch-new-a", kind: RecordKind.EVENT, schema: "temperature-v1", payload: jsonPayload({ n: 1 }) },
        { id: "batch-existing", kind: RecordKind.EVENT, schema: "temperature-v1", payload: jsonPayload({ n: 0 }) },
        { id: "batch-new-b", kind: RecordKind.WORK, schema: "summary-v1", payload: jsonPayload({ n: 2 }) },
        { id: "dup-one", kind: RecordKind.EVENT, schema: "temperature-v1", payload: jsonPayload({ other: true }) },
      ],
    });
    const results = response.results.map((r) =>
      r.outcome.case === "published"
        ? { id: r.outcome.value.record?.id, duplicate: r.outcome.value.duplicate }
        : { code: r.outcome.value?.code, reason: r.outcome.value?.reason },
    );
    expect(results).toEqual([
      { id: "batch-new-a", duplicate: false },
      { id: "batch-existing", duplicate: true },
      { id: "batch-new-b", duplicate: false },
      { code: "aborted", reason: "lane_conflict" },
    ]);
    const existing = response.results[1]!.outcome;
    expect(existing.case === "published" && published(existing.value)).toEqual(published(earlier));
    // A repeated batch is all duplicates of the same records (the conflict stays a conflict).
    const repeat = await atlas.publishBatch({
      lane: "measurements",
      records: [
        { id: "batch-new-a", kind: RecordKind.EVENT, schema: "temperature-v1", payload: jsonPayload({ n: 1 }) },
        { id: "batch-new-b", kind: RecordKind.WORK, schema: "summary-v1", payload: jsonPayload({ n: 2 }) },
      ],
    });
    const first = response.results[0]!.outcome;
    const repeated = repeat.results[0]!.outcome;
    expect(repeated.case === "published" && repeated.value.duplicate).toBe(true);
    expect(repeated.case === "published" && published(repeated.value)).toEqual(first.case === "published" && published(first.value));
  });
});

describe("replay pages and cursors", () => {
  test("a page read after more records arrived reads them and reports the present last sequence, not the one earlier pages saw", async () => {
    const lane = "growing";
    const before = (await atlas.replay({ lane, cursor: 0n })).lastSequence;
    const first = published(await atlas.publish(eventOn("window-a", { n: 1 }, { lane })));
    const second = published(await atlas.publish(eventOn("window-b", { n: 2 }, { lane })));
    // Pages read up to the lane's end: this Laneway now knows its range.
    const seen = await atlas.replay({ lane, cursor: before });
    expect(seen.events.map((e) => e.id)).toEqual(["window-a", "window-b"]);
    expect(seen.lastSequence).toBe(second.sequence);
    const third = published(await atlas.publish(eventOn("window-c", { n: 3 }, { lane })));
    // From the start, and from before the first: each page reaches the new record and its sequence.
    for (const cursor of [0n, first.sequence - 1n]) {
      const page = await atlas.replay({ lane, cursor });
      expect(page.events.map((e) => e.id).slice(-3), `cursor ${cursor}`).toEqual(["window-a", "window-b", "window-c"]);
      expect(page.cursor, `cursor ${cursor}`).toBe(third.sequence);
      expect(page.lastSequence, `cursor ${cursor}`).toBe(third.sequence);
    }
  });

  test("a cursor beyond the end of the lane fails with lane_cursor", async () => {
    const page = await atlas.replay({ lane: "measurements", cursor: 0n });
    const error = await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: page.lastSequence + 1n }), Code.Aborted, "lane_cursor");
    expect(error.rawMessage).toContain("beyond the end");
    await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: 2n ** 64n - 1n }), Code.Aborted, "lane_cursor");
    // A uint64 above 2^53 reaches the core exactly and is quoted as it was sent.
    const huge = await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: 2n ** 63n }), Code.Aborted, "lane_cursor");
    expect(huge.rawMessage).toContain(`cursor ${2n ** 63n} is beyond the end`);
    const odd = await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: 2n ** 53n + 1n }), Code.Aborted, "lane_cursor");
    expect(odd.rawMessage).toContain("cursor 9007199254740993 is beyond the end");
    const follow = await expectLaneError(async () => {
      for await (const page of atlas.follow({ lane: "measurements", cursor: 2n ** 63n + 1n })) throw new Error(`unexpected page at ${page.cursor}`);
    }, Code.Aborted, "lane_cursor");
    expect(follow.rawMessage).toContain("cursor 9223372036854775809 is beyond the end");
    // JSON on the wire: quoted (proto3's form) or a bare number literal, every digit arrives.
    for (const cursor of ['"9223372036854775807"', "9223372036854775807"]) {
      const answer = await rawCall({
        baseUrl: laneway.url,
        protocol: "connect",
        path: "/laneway.lane.v1.LaneService/Replay",
        contentType: "application/json",
        token: laneway.tokens.atlas,
        body: Buffer.from(`{"lane":"measurements","cursor":${cursor}}`),
      });
      expect(answer.reason).toBe("lane_cursor");
      expect(answer.error?.rawMessage).toContain("cursor 9223372036854775807 is beyond the end");
    }
    // The cursor at the end itself is valid: an empty page.
    const atEnd = await atlas.replay({ lane: "measurements", cursor: page.lastSequence });
    expect(atEnd.events).toEqual([]);
  });

  test("pages examine at most 512 records and return at most 128 events on a lane mixing work and events", async () => {
    expect([MAX_EXAMINED, MAX_EVENTS]).toEqual([512, 128]);
    const lane = "paging";
    // 4 batches of work (512 records), one batch alternating event and
    // work, one batch of events: 768 records, 128 + 64 events.
    const batches: { kind: RecordKind; n: number }[][] = [
      ...Array.from({ length: 4 }, () => Array.from({ length: 128 }, () => ({ kind: RecordKind.WORK, n: 0 }))),
      Array.from({ length: 128 }, (_, i) => ({ kind: i % 2 === 0 ? RecordKind.EVENT : RecordKind.WORK, n: 0 })),
      Array.from({ length: 128 }, () => ({ kind: RecordKind.EVENT, n: 0 })),
    ];
    const all: LaneRecord[] = [];
    for (const [b, batch] of batches.entries()) {
      const response = await atlas.publishBatch({
        lane,
        records: batch.map((r, i) => ({ id: `r-${b}-${i}`, kind: r.kind, schema: "mixed-v1", payload: jsonPayload({ b, i }) })),
      });
      for (const result of response.results) {
        if (result.outcome.case !== "published") throw new Error(`record not published: ${result.outcome.value?.reason}`);
        all.push(result.outcome.value.record!);
      }
    }
    expect(all).toHaveLength(768);
    all.sort((x, y) => Number(x.sequence - y.sequence));
    expect(all.map((r) => r.sequence)).toEqual(Array.from({ length: 768 }, (_, i) => BigInt(i + 1)));
    const events = all.filter((r) => r.kind === RecordKind.EVENT);
    expect(events).toHaveLength(192);

    // Page 1: 512 work records examined, no event, cursor at 512.
    const p1 = await atlas.replay({ lane, cursor: 0n });
    expect(p1.events).toEqual([]);
    expect(p1.cursor).toBe(512n);
    expect(p1.lastSequence).toBe(768n);
    // Page 2: stops at the 128th event (64 from the mixed batch, 64 from the last).
    const p2 = await atlas.replay({ lane, cursor: p1.cursor });
    expect(p2.events.map(recordFields)).toEqual(events.slice(0, 128).map(recordFields));
    expect(p2.cursor).toBe(events[127]!.sequence);
    expect(p2.cursor).toBe(704n);
    // Page 3: the remaining 64 events, to the end.
    const p3 = await atlas.replay({ lane, cursor: p2.cursor });
    expect(p3.events.map(recordFields)).toEqual(events.slice(128).map(recordFields));
    expect(p3.cursor).toBe(768n);
    // Work records never appear in replay, and payloads round-trip.
    const whole = await replayAll(atlas, lane);
    expect(whole.events.map((e) => e.id)).toEqual(events.map((e) => e.id));
    expect(whole.pages.map((p) => p.events)).toEqual([0, 128, 64]);
  });
});

describe("follow", () => {
  test("a follower gets the retained events, then records published after it started, with the cursor on each message", async () => {
    const lane = "tail";
    const first = await atlas.publish(eventOn("before-follow", { n: 1 }, { lane }));
    const abort = new AbortController();
    try {
      const start = await firstFollowMessage(beacon, lane, 0n, abort);
      expect(start.events.map(recordFields)).toEqual([published(first)]);
      expect(start.cursor).toBe(first.record!.sequence);

      // Published after the follower caught up: it wakes and delivers it.
      const later = await atlas.publish(eventOn("after-follow", { n: 2 }, { lane }));
      const next = await start.rest.next();
      expect(next.done).toBe(false);
      expect(next.value!.events.map(recordFields)).toEqual([published(later)]);
      expect(next.value!.cursor).toBe(later.record!.sequence);

      // A work record advances the cursor with no event in the message.
      const work = await beacon.publish(eventOn("follow-work", { n: 3 }, { lane, kind: RecordKind.WORK }));
      const skipped = await start.rest.next();
      expect(skipped.value!.events).toEqual([]);
      expect(skipped.value!.cursor).toBe(work.record!.sequence);

      // Then another event, from the other project.
      const third = await beacon.publish(eventOn("after-work", { n: 4 }, { lane }));
      const last = await start.rest.next();
      expect(last.value!.events.map(recordFields)).toEqual([published(third)]);
      expect(last.value!.cursor).toBe(third.record!.sequence);

      // A second follower from the first one's saved cursor sees only what came after it.
      const resumeAbort = new AbortController();
      try {
        const resumed = await firstFollowMessage(atlas, lane, next.value!.cursor, resumeAbort);
        expect(resumed.cursor).toBeGreaterThan(next.value!.cursor);
        expect(resumed.events.map((e) => e.id)).toEqual(["after-work"]);
      } finally {
        resumeAbort.abort();
      }
    } finally {
      abort.abort();
    }
  });

  test("a follower behind a future cursor fails with lane_cursor", async () => {
    const page = await atlas.replay({ lane: "tail", cursor: 0n });
    await expectLaneError(() => firstFollowMessage(atlas, "tail", page.lastSequence + 10n, new AbortController()), Code.Aborted, "lane_cursor");
  });

  test(`a project holds at most ${MAX_FOLLOWERS_PER_PROJECT} followers at once: the next fails with lane_capacity, other projects are unaffected`, async () => {
    expect(MAX_FOLLOWERS_PER_PROJECT).toBe(32);
    const lane = "tail";
    const latest = await atlas.replay({ lane, cursor: 0n });
    expect(latest.lastSequence).toBeGreaterThan(0n);
    // Each follower starts one record before the end, so its first message
    // (which proves the server counted it) arrives at once.
    const from = latest.lastSequence - 1n;
    const follower = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "grpc" });
    const aborts = Array.from({ length: MAX_FOLLOWERS_PER_PROJECT }, () => new AbortController());
    const other = new AbortController();
    try {
      const opened = await Promise.all(aborts.map((abort) => firstFollowMessage(follower, lane, from, abort)));
      expect(opened.every((o) => o.cursor === latest.lastSequence)).toBe(true);

      const refused = await failure(() => firstFollowMessage(follower, lane, from, new AbortController()));
      expect({ code: Code[refused.code], reason: reasonOf(refused) }).toEqual({ code: Code[Code.ResourceExhausted], reason: "lane_capacity" });

      // The bound is per project: beacon may still follow.
      const beaconFollow = await firstFollowMessage(beacon, lane, from, other);
      expect(beaconFollow.cursor).toBe(latest.lastSequence);

      // Closing one frees its place (the server notices the cancellation).
      aborts.pop()!.abort();
      const again = new AbortController();
      aborts.push(again);
      await waitFor(
        async () => {
          try {
            await firstFollowMessage(follower, lane, from, again);
            return true;
          } catch (error) {
            expect(reasonOf(ConnectError.from(error))).toBe("lane_capacity");
            return false;
          }
        },
        { what: "a follower place to be released" },
      );
    } finally {
      for (const abort of aborts) abort.abort();
      other.abort();
    }
  });
});
