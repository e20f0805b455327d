import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { eventOn, expectLaneError, firstFollowMessage, jsonPayload, reasonOf, recordFields, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Retention and cursors on a namespace whose records (and publish
 * reservations) are retained for a few seconds: once a prefix of the lane
 * has expired, a nonzero cursor behind it fails with `lane_cursor` instead
 * of silently skipping, cursor 0 starts at the first retained record, the
 * boundary cursor (first retained - 1) accepts the gap explicitly, and a
 * key is reusable once both its reservation and its record have expired.
 *
 * The tests wait for expiry as a condition (the broker's own clock); what
 * they assert right after a publication does not depend on how long the
 * wait took, only on happening well within the retention period.
 */

const RETENTION = "5s";

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig({ namespace: "short", retention: RETENTION }) });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

async function publishAll(prefix: string, kinds: RecordKind[]) {
  const response = await atlas.publishBatch({
    lane: "measurements",
    records: kinds.map((kind, i) => ({ id: `${prefix}-${i}`, kind, schema: "s-v1", payload: jsonPayload({ prefix, i }) })),
  });
  return response.results
    .map((r) => {
      if (r.outcome.case !== "published") throw new Error(`not published: ${r.outcome.value?.reason}`);
      return r.outcome.value.record!;
    })
    .sort((a, b) => Number(a.sequence - b.sequence));
}

test("after the records before a cursor expire, the cursor fails with lane_cursor, cursor 0 starts at the first retained record, and the boundary cursor accepts the gap", async () => {
  const { EVENT, WORK } = RecordKind;
  const first = await publishAll("first", [EVENT, EVENT, WORK, EVENT, EVENT, WORK]);
  expect(first.map((r) => r.sequence)).toEqual([1n, 2n, 3n, 4n, 5n, 6n]);
  const saved = 3n;
  const before = await atlas.replay({ lane: "measurements", cursor: saved });
  expect(before.events.map(recordFields)).toEqual(first.filter((r) => r.kind === EVENT && r.sequence > saved).map(recordFields));

  // Everything published so far expires.
  const expired = await waitFor(
    async () => {
      const page = await atlas.replay({ lane: "measurements", cursor: 0n });
      return page.firstRetained === 0n ? page : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "the first records to expire" },
  );
  expect(expired.events).toEqual([]);
  expect(expired.lastSequence).toBe(6n);
  expect(expired.cursor).toBe(0n);
  // A saved cursor behind the expired records cannot go on silently.
  const behind = await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: saved }), Code.Aborted, "lane_cursor");
  expect(behind.rawMessage).toContain("cursor 0");
  // A cursor at the end of the lane is still valid: nothing after it expired.
  expect((await atlas.replay({ lane: "measurements", cursor: 6n })).events).toEqual([]);
  // A future cursor stays a future cursor.
  await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: 7n }), Code.Aborted, "lane_cursor");

  // New records after the gap.
  const second = await publishAll("second", [WORK, EVENT, EVENT, WORK, EVENT]);
  expect(second.map((r) => r.sequence)).toEqual([7n, 8n, 9n, 10n, 11n]);
  const secondEvents = second.filter((r) => r.kind === EVENT).map(recordFields);

  // Cursor 0 starts at the first retained record.
  const fromZero = await atlas.replay({ lane: "measurements", cursor: 0n });
  expect(fromZero.firstRetained).toBe(7n);
  expect(fromZero.events.map(recordFields)).toEqual(secondEvents);
  expect(fromZero.cursor).toBe(11n);
  // Nonzero cursors inside the expired prefix fail, both for replay and follow.
  for (const cursor of [1n, saved, 5n]) {
    await expectLaneError(() => atlas.replay({ lane: "measurements", cursor }), Code.Aborted, "lane_cursor");
  }
  await expectLaneError(() => firstFollowMessage(atlas, "measurements", saved, new AbortController()), Code.Aborted, "lane_cursor");
  // first_retained - 1 accepts the gap explicitly.
  const boundary = await atlas.replay({ lane: "measurements", cursor: fromZero.firstRetained - 1n });
  expect(boundary.events.map(recordFields)).toEqual(secondEvents);
  // A follower from cursor 0 also starts at the first retained record.
  const abort = new AbortController();
  try {
    const followed = await firstFollowMessage(atlas, "measurements", 0n, abort);
    expect(followed.events.map(recordFields)).toEqual(secondEvents);
    expect(followed.cursor).toBe(11n);
  } finally {
    abort.abort();
  }
});

test("a key is reusable with other content once its reservation and its record have both expired, and only then", async () => {
  const original = await atlas.publish(eventOn("reusable", { version: 1 }));
  // While retained, other content conflicts.
  await expectLaneError(() => atlas.publish(eventOn("reusable", { version: 2 })), Code.Aborted, "lane_conflict");
  // Wait for expiry by retrying: every refusal meanwhile is an explicit conflict.
  const reasons = new Set<string>();
  const reused = await waitFor(
    async () => {
      try {
        return await atlas.publish(eventOn("reusable", { version: 2 }));
      } catch (error) {
        reasons.add(reasonOf(ConnectError.from(error)) ?? "none");
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 200, what: "the key to become reusable" },
  );
  expect([...reasons]).toEqual(["lane_conflict"]);
  expect(reused.duplicate).toBe(false);
  expect(reused.record!.sequence).toBeGreaterThan(original.record!.sequence);
  expect(Buffer.from(reused.record!.payload).toString()).toBe('{"version":2}');
  // The new record now holds the key: the old content conflicts in turn.
  await expectLaneError(() => atlas.publish(eventOn("reusable", { version: 1 })), Code.Aborted, "lane_conflict");
  const page = await atlas.replay({ lane: "measurements", cursor: 0n });
  expect(page.events.filter((e) => e.id === "reusable").map(recordFields)).toEqual([recordFields(reused.record)]);
});
