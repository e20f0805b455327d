import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, type GroupState, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, reasonOf, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { claimOne, codeAndReason, deliveriesView, deliveryOf, groupBucketUsage, inspectGroup, publishWork, receiptOf, responseLoser, waitReleased, whenBack } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Reusable slots at the shared bucket's growth boundary: a namespace whose
 * group-ledger bucket holds 1 MiB (`ledger_bytes: 1048576`), six lanes with
 * one group each.
 *
 * - Five empty groups are polled before anything is published: each
 *   reserves one reusable slot; a sixth is refused admission
 *   (`lane_capacity`), so it cannot eat the others' growth headroom.
 * - A filler group grows until the bucket admits no further slot; from
 *   then on every group lives within the slots it has: its first claim
 *   needs no growth, a claim needing another slot is `lane_capacity`, while
 *   acks, nacks, renewals and recoveries never fail for capacity.
 * - At that boundary a slot is freed by an acknowledgement, at once (the
 *   completion moves to the completion history, where a repeat is a
 *   duplicate until ack_retention, 6 s, has passed, then stale), or by
 *   retiring an absent owner's expired delivery through recovery; a lost
 *   claim response leaves a lease that expires and is redelivered in the
 *   same slot, its receipt fenced; a retry is leased even when fresh work
 *   cannot get a slot.
 * - Slots and admissions survive a broker restart and a Laneway restart.
 * - The recovery history (64 records) is backpressure until ack_retention
 *   prunes it, also at the boundary.
 */

const LEDGER_BYTES = 1_048_576;
const ACK_RETENTION_MS = 6_000;
const tokens = generateTokens();
const lanes = ["s1", "s2", "s3", "s4", "s5", "s6"];
const config = buildLanesConfig({
  namespace: "slots",
  projects: ["atlas", "beacon"],
  lanes: lanes.map((lane, i) => ({
    id: lane,
    owner: "atlas",
    publishers: ["atlas"],
    groups: { [`g${i + 1}`]: ["atlas", "beacon"] },
    recoverers: { [`g${i + 1}`]: ["beacon"] },
  })),
  ledger_bytes: LEDGER_BYTES,
  max_ledger: 512,
  max_pending: 512,
  lease: "3s",
  retention: "15s",
  duplicate_window: "1s",
  ack_retention: "6s",
  retry_delay: "1h",
  max_retry_delay: "1h",
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;
/** Slots of every group once the bucket reached its boundary. */
let boundarySlots: number[];
/** s1-a's delivery, claimed at the boundary. */
let s1a: Work | undefined;

async function start(): Promise<void> {
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: tokens.beacon });
}

beforeAll(async () => {
  nats = await startNatsServer();
  await start();
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

const group = (n: number) => ({ lane: `s${n}`, group: `g${n}` });
const slotsOf = async (n: number) => (await inspectGroup(beacon, `s${n}`, `g${n}`)).slots;

/** The cursor a recovery must accept now: the gap boundary when unclaimed work expired, else the current cursor. */
function cursorThrough(g: GroupState): bigint {
  return g.cursor + 1n < g.firstRetained ? g.firstRetained - 1n : g.cursor;
}


test("five empty groups polled before any publication each reserve one reusable slot; a sixth group is refused admission with lane_capacity", async () => {
  for (let n = 1; n <= 5; n++) {
    expect(await claimOne(beacon, `s${n}`, `g${n}`)).toBeUndefined();
    const g = await inspectGroup(beacon, `s${n}`, `g${n}`);
    expect([g.slots, g.lastSequence, g.deliveries.length]).toEqual([1, 0n, 0]);
  }
  const refused = await expectLaneError(() => beacon.claim(group(6)), Code.ResourceExhausted, "lane_capacity");
  expect(refused.rawMessage).toContain("ledger_bytes");
  // Refused admission created nothing: the sixth group is still uninitialized.
  const sixth = await inspectGroup(beacon, "s6", "g6");
  expect([sixth.slots, sixth.revision]).toEqual([0, 0n]);
  const usage = await groupBucketUsage(nats.url, "slots", "s1", "g1");
  expect(usage.bucketMaxBytes).toBe(LEDGER_BYTES);
  expect(usage.keys).toBe(6); // five ledgers and the admissions record
});

test("a filler group grows until the bucket admits no further slot: its next slot, and any other group's, is lane_capacity; existing slots stay", async () => {
  let max = 64;
  let filled = 0;
  for (let round = 0; round < 100; round++) {
    await publishWork(atlas, "s5", Array.from({ length: max }, (_, i) => `fill-${round}-${i}`));
    let work: Work[];
    try {
      work = (await beacon.claimBatch({ ...group(5), maxRecords: max })).work;
    } catch (error) {
      const failure = ConnectError.from(error);
      expect([Code[failure.code], reasonOf(failure)]).toEqual(["ResourceExhausted", "lane_capacity"]);
      if (max === 1) break;
      max = 1;
      continue;
    }
    expect(work.length).toBeGreaterThan(0);
    filled += work.length;
    // Parked for an hour: each keeps its slot.
    const nacked = await beacon.nackBatch({ ...group(5), receipts: work.map(receiptOf) });
    expect(nacked.results.every((r) => r.outcome.case === "nacked")).toBe(true);
  }
  const g5 = await inspectGroup(beacon, "s5", "g5");
  expect(g5.slots).toBe(filled);
  expect(g5.slots).toBeGreaterThan(1);
  expect(g5.slots).toBeLessThan(512); // the bucket stopped it, not max_ledger
  boundarySlots = [await slotsOf(1), await slotsOf(2), await slotsOf(3), await slotsOf(4), g5.slots];
  expect(boundarySlots.slice(0, 4)).toEqual([1, 1, 1, 1]);

  // Any other group: its first claim uses its reserved slot; a second slot is refused.
  await publishWork(atlas, "s1", ["s1-a", "s1-b"]);
  const batch = await beacon.claimBatch({ ...group(1), maxRecords: 2 });
  expect(batch.work.map((w) => w.record!.id)).toEqual(["s1-a"]);
  s1a = batch.work[0];
  await expectLaneError(() => beacon.claim(group(1)), Code.ResourceExhausted, "lane_capacity");
  expect(await slotsOf(1)).toBe(1);
  expect(await slotsOf(5)).toBe(filled);
  const usage = await groupBucketUsage(nats.url, "slots", "s5", "g5");
  expect(usage.bucketBytes).toBeLessThanOrEqual(LEDGER_BYTES);
  expect(usage.valueBytes).toBeLessThanOrEqual(512 * 1024);
});

test("at the boundary an acknowledgement frees its slot at once: the next record reuses it without growth; a repeat of the ack is a duplicate until ack_retention passed, then stale", async () => {
  const g = await inspectGroup(beacon, "s1", "g1");
  expect(deliveriesView(g)).toEqual([[Number(s1a!.record!.sequence), "beacon", 1, g.deliveries[0]!.state === DeliveryState.LEASED ? "LEASED" : "RELEASED"]]);
  // Renew and ack never fail for capacity, even with the bucket at its boundary.
  const renewed = await beacon.renew({ ...group(1), ...receiptOf(s1a!) });
  expect(renewed.leaseExpiresAt).toBeDefined();
  const acked = await beacon.ack({ ...group(1), ...receiptOf(s1a!) });
  expect(acked.duplicate).toBe(false);
  // The completion left the only slot: s1-b takes it, without growth.
  const next = (await claimOne(beacon, "s1", "g1"))!;
  expect([next.record!.id, next.attempt]).toEqual(["s1-b", 1]);
  expect(await slotsOf(1)).toBe(1);
  const repeat = await beacon.ack({ ...group(1), ...receiptOf(s1a!) }).then(
    (r) => r,
    (error: unknown) => error,
  );
  if (repeat instanceof Error) {
    // Only possible once ack_retention had passed (a slow machine): the completion left the history.
    expect(codeAndReason(repeat)).toEqual({ code: "Aborted", reason: "lane_stale" });
    expect(Date.now() - timestampMs(acked.ackedAt!)).toBeGreaterThanOrEqual(ACK_RETENTION_MS);
  } else {
    expect((repeat as { duplicate: boolean }).duplicate).toBe(true);
  }
  // Once ack_retention has passed the completion is pruned, and the old receipt is stale.
  await waitFor(async () => (await inspectGroup(beacon, "s1", "g1")).completions.length === 0, { timeoutMs: 30_000, intervalMs: 100, what: "the ack to be pruned" });
  await expectLaneError(() => beacon.ack({ ...group(1), ...receiptOf(s1a!) }), Code.Aborted, "lane_stale");
  expect((await beacon.ack({ ...group(1), ...receiptOf(next) })).duplicate).toBe(false);
});

test("at the boundary a recoverer retires an absent foreign owner's expired delivery from the only slot, which is then reused without growth", async () => {
  const [record] = await publishWork(atlas, "s2", ["s2-absent"]);
  const owned = (await claimOne(atlas, "s2", "g2"))!;
  expect(owned.record!.sequence).toBe(record!.sequence);
  const expired = await waitFor(
    async () => {
      const g = await inspectGroup(beacon, "s2", "g2");
      const d = deliveryOf(g, record!.sequence)!;
      return g.firstRetained > record!.sequence && d.state === DeliveryState.RELEASED ? g : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "s2-absent to expire" },
  );
  const [later] = await publishWork(atlas, "s2", ["s2-later"]);
  // The waiting delivery blocks: its record is gone.
  await expectLaneError(() => beacon.claim(group(2)), Code.Aborted, "lane_cursor");
  const g = await inspectGroup(beacon, "s2", "g2");
  expect(g.revision).toBeGreaterThanOrEqual(expired.revision);
  const recovered = await beacon.recoverGroup({ ...group(2), id: "absent-at-boundary", revision: g.revision, cursorThrough: g.cursor, missing: [record!.sequence] });
  expect(recovered.result!.expirations.map((x) => [x.project, x.sequence, x.attempt])).toEqual([["atlas", record!.sequence, 1]]);
  const work = (await claimOne(beacon, "s2", "g2"))!;
  expect(work.record!.sequence).toBe(later!.sequence);
  expect(await slotsOf(2)).toBe(1);
  await expectLaneError(() => atlas.ack({ ...group(2), ...receiptOf(owned) }), Code.Aborted, "lane_stale");
  expect((await beacon.ack({ ...group(2), ...receiptOf(work) })).duplicate).toBe(false);
});

test("at the boundary a lost claim response leaves a lease that expires and is redelivered in the same slot, its receipt fenced; the retry is leased even when the fresh item's turn finds no slot", async () => {
  const [record] = await publishWork(atlas, "s3", ["s3-lost"]);
  const loser = responseLoser((method) => method === "Claim");
  const lossy = laneway.clients.client(LaneService, { token: tokens.beacon, interceptors: [loser.interceptor] });
  await expect(lossy.claim(group(3))).rejects.toThrow(/lost/);
  const lost = (loser.lost[0] as { work: Work }).work;
  expect(lost.record!.sequence).toBe(record!.sequence);
  // Fresh work needs a second slot, which the bucket cannot give.
  const [fresh] = await publishWork(atlas, "s3", ["s3-fresh"]);
  await expectLaneError(() => beacon.claim(group(3)), Code.ResourceExhausted, "lane_capacity");
  // Once the lost lease ended, its retry takes the slot again (attempt 2) and the lost receipt is dead.
  await waitReleased(beacon, "s3", "g3", record!.sequence);
  const second = (await claimOne(beacon, "s3", "g3"))!;
  expect([second.record!.sequence, second.attempt]).toEqual([record!.sequence, 2]);
  await expectLaneError(() => beacon.ack({ ...group(3), ...receiptOf(lost) }), Code.Aborted, "lane_stale");
  await expectLaneError(() => beacon.renew({ ...group(3), ...receiptOf(lost) }), Code.Aborted, "lane_stale");
  // Now it is the fresh item's turn, but it cannot get a slot: the retry is leased instead of a capacity failure.
  await waitReleased(beacon, "s3", "g3", record!.sequence);
  const third = (await claimOne(beacon, "s3", "g3"))!;
  expect([third.record!.sequence, third.attempt]).toEqual([record!.sequence, 3]);
  // Renew and nack never fail for capacity; the nack parks it for an hour in its slot.
  await beacon.renew({ ...group(3), ...receiptOf(third) });
  await beacon.nack({ ...group(3), ...receiptOf(third) });
  await expectLaneError(() => beacon.claim(group(3)), Code.ResourceExhausted, "lane_capacity");
  expect(await slotsOf(3)).toBe(1);
  const g = await inspectGroup(beacon, "s3", "g3");
  expect(deliveriesView(g)).toEqual([[Number(record!.sequence), "beacon", 3, "RETRY_SCHEDULED"]]);
  expect(g.cursor).toBeLessThan(fresh!.sequence);
});

test("slots and admissions survive a broker restart and a Laneway restart: the sixth group is still refused, and a group reuses its reserved slot without growth", async () => {
  const before = await Promise.all([1, 2, 3, 4, 5].map(slotsOf));
  await nats.restart();
  expect(await whenBack(() => Promise.all([1, 2, 3, 4, 5].map(slotsOf)))).toEqual(before);
  await expectLaneError(() => beacon.claim(group(6)), Code.ResourceExhausted, "lane_capacity");
  await laneway.stop();
  await start();
  expect(await Promise.all([1, 2, 3, 4, 5].map(slotsOf))).toEqual(before);
  expect(before).toEqual(boundarySlots);
  await expectLaneError(() => beacon.claim(group(6)), Code.ResourceExhausted, "lane_capacity");
  // g4 never claimed before: its reserved slot takes its first work; a second needs growth.
  await publishWork(atlas, "s4", ["s4-a", "s4-b"]);
  const batch = await beacon.claimBatch({ ...group(4), maxRecords: 2 });
  expect(batch.work.map((w) => w.record!.id)).toEqual(["s4-a"]);
  await expectLaneError(() => beacon.claim(group(4)), Code.ResourceExhausted, "lane_capacity");
  expect((await beacon.ack({ ...group(4), ...receiptOf(batch.work[0]!) })).duplicate).toBe(false);
  expect(await slotsOf(4)).toBe(1);
});

test("at the boundary the recovery history takes 64 records, then is backpressure (lane_capacity) until ack_retention prunes the oldest", async () => {
  let g = await inspectGroup(beacon, "s4", "g4");
  expect(g.recoveries).toBe(0);
  /** When the oldest recovery record was stored (server time). */
  let oldestAt: number | undefined;
  for (let i = 0; g.recoveries < 64; i++) {
    const { result } = await beacon.recoverGroup({ ...group(4), id: `history-${i}`, revision: g.revision, cursorThrough: cursorThrough(g) });
    oldestAt ??= timestampMs(result!.recordedAt!);
    g = await inspectGroup(beacon, "s4", "g4");
  }
  const refusal = await beacon.recoverGroup({ ...group(4), id: "history-overflow", revision: g.revision, cursorThrough: cursorThrough(g) }).then(
    (accepted) => accepted,
    (error: unknown) => ConnectError.from(error),
  );
  if (refusal instanceof ConnectError) {
    expect(codeAndReason(refusal)).toEqual({ code: "ResourceExhausted", reason: "lane_capacity" });
  } else {
    // Accepted only because the oldest record had already passed ack_retention (a slow machine) and was pruned to make room.
    expect(timestampMs(refusal.result!.recordedAt!) - oldestAt!).toBeGreaterThanOrEqual(ACK_RETENTION_MS);
  }
  const after = await waitFor(
    async () => {
      const now = await inspectGroup(beacon, "s4", "g4");
      return now.recoveries < 64 ? now : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100, what: "the recovery history to be pruned" },
  );
  const accepted = await beacon.recoverGroup({ ...group(4), id: "history-after-pruning", revision: after.revision, cursorThrough: cursorThrough(after) });
  expect(accepted.result!.id).toBe("history-after-pruning");
  const usage = await groupBucketUsage(nats.url, "slots", "s4", "g4");
  expect(usage.bucketBytes).toBeLessThanOrEqual(LEDGER_BYTES);
});
