import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, type GroupState, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { worstCaseLedgerBytes } from "../../../src/lanes/ledger-capacity.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, newToken, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { claimOne, completionOf, deliveryOf, groupBucketUsage, inspectGroup, publishWork, receiptOf, storedLedgerMessage, waitReleased } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * A group ledger at its byte and delivery bounds, in its maximum shape:
 * identifiers of 64 characters (the holder's project, the lane, the group),
 * max_ledger 512 unfinished deliveries, a completion history, a recovery
 * history of 64 records of (nearly all) 16 retirements each, real
 * millisecond timestamps.
 *
 * - Filled to its bound (512 unfinished deliveries, 16 of them nacked and
 *   parked for an hour, so that max_pending is not what stops it): the next
 *   slot is `lane_capacity` naming max_ledger, while renew, nack, the retry
 *   of an expired lease, and acks (new and duplicate) still work; an ack
 *   frees its slot at once, and the waiting fresh record takes it.
 * - Its records expire: history gaps at the bound are recovered in batches
 *   of 16, freeing slots without pruning the unexpired acknowledgement
 *   history, and later work resumes in the freed slots.
 * - Twice, until the recovery history is full: the 65th recovery is
 *   `lane_capacity`; with every slot leased and the history full, the
 *   stored value stays within 512 KiB and the bucket within its bytes, and
 *   ack, nack and renew still work.
 */

const long = (prefix: string) => `${prefix}${"x".repeat(64 - prefix.length)}`;
const NAMESPACE = long("bounds");
const PROJECT = long("worker");
const LANE = long("lane");
const GROUP = long("group");
const MAX_LEDGER = 512;
const longToken = newToken();

const config = buildLanesConfig({
  namespace: NAMESPACE,
  projects: ["atlas", { project: PROJECT, token_env: "LONG_LANE_TOKEN" }],
  lanes: [{ id: LANE, owner: "atlas", publishers: ["atlas"], groups: { [GROUP]: [PROJECT] }, recoverers: { [GROUP]: [PROJECT] } }],
  max_ledger: MAX_LEDGER,
  max_pending: 512,
  lease: "5s",
  retention: "12s",
  duplicate_window: "1s",
  // A nack parks its delivery for an hour: it keeps its slot without a live lease.
  retry_delay: "1h",
  max_retry_delay: "1h",
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let worker: LaneClient;
/** The acknowledgement history: work and its first ack time. */
const history: { work: Work; ackedAt: number }[] = [];
let serial = 0;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, env: { LONG_LANE_TOKEN: longToken } });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  worker = laneway.clients.client(LaneService, { token: longToken });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

const where = { lane: LANE, group: GROUP };
const inspect = () => inspectGroup(worker, LANE, GROUP);
const publish = (n: number) => publishWork(atlas, LANE, Array.from({ length: n }, () => `w-${serial++}`), { parallel: 4 });

/** Claims exactly `n` records in batches of up to 64. */
async function claimExactly(n: number): Promise<Work[]> {
  const all: Work[] = [];
  while (all.length < n) {
    const { work } = await worker.claimBatch({ ...where, maxRecords: Math.min(64, n - all.length) });
    if (work.length === 0) throw new Error(`only ${all.length} of ${n} could be claimed`);
    all.push(...work);
  }
  return all;
}

/** The cursor a recovery must accept now: the gap boundary, or the current cursor. */
function cursorThrough(g: GroupState): bigint {
  return g.cursor + 1n < g.firstRetained ? g.firstRetained - 1n : g.cursor;
}

/** Waits until every record claimed so far left retention and no lease in `works` is live. */
async function waitAllExpired(works: readonly Work[]): Promise<GroupState> {
  const last = works.reduce((m, w) => (w.record!.sequence > m ? w.record!.sequence : m), 0n);
  return waitFor(
    async () => {
      const g = await inspect();
      if (g.firstRetained <= last) return undefined;
      return works.some((w) => deliveryOf(g, w.record!.sequence)?.state === DeliveryState.LEASED) ? undefined : g;
    },
    { timeoutMs: 90_000, intervalMs: 200, what: "the claimed records and their leases to expire" },
  );
}

/** Retires every delivery without a live lease (released, or parked for a retry) in recoveries of 16 (the first by their receipts, the rest without); returns how many recoveries it made. */
async function retireReleased(byReceipt: ReadonlyMap<bigint, Work>): Promise<number> {
  let recoveries = 0;
  for (let first = true; ; first = false) {
    const g = await inspect();
    const released = g.deliveries.filter((d) => d.state !== DeliveryState.LEASED).map((d) => d.sequence);
    if (released.length === 0) return recoveries;
    const batch = released.slice(0, 16);
    const result = await worker.recoverGroup({
      ...where,
      id: `retire-${serial++}`,
      revision: g.revision,
      cursorThrough: cursorThrough(g),
      ...(first ? { expired: batch.map((s) => ({ sequence: s, receipt: byReceipt.get(s)!.receipt })) } : { missing: batch }),
    });
    expect(result.result!.expirations.map((x) => [x.project, x.sequence])).toEqual(batch.map((s) => [PROJECT, s]));
    recoveries += 1;
  }
}

/** The default ack_retention (24 h): a duplicate answers its history bucket's last ack time, at most 1/16 of it after the original. */
const BUCKET_MS = (24 * 3_600_000) / 16;

async function expectHistoryIntact(): Promise<void> {
  const repeats = await worker.ackBatch({ ...where, receipts: history.map((h) => receiptOf(h.work)) });
  expect(
    repeats.results.map((r, i) => {
      if (r.outcome.case !== "acked") return r.outcome.value?.reason;
      const late = timestampMs(r.outcome.value.ackedAt!) - history[i]!.ackedAt;
      return [r.outcome.value.duplicate, late >= 0 && late <= BUCKET_MS];
    }),
  ).toEqual(history.map(() => [true, true]));
}

async function expectWithinBytes(): Promise<number> {
  const usage = await groupBucketUsage(nats.url, NAMESPACE, LANE, GROUP);
  expect(usage.valueBytes).toBeDefined();
  expect(usage.valueBytes!).toBeLessThanOrEqual(512 * 1024);
  expect(usage.bucketBytes).toBeLessThanOrEqual(usage.bucketMaxBytes);
  // Never beyond the worst case the group's slots were admitted for — the
  // whole stored record: subject, headers (the compare-and-set's decimal
  // expected-revision header grows with the revision) and value.
  const g = await inspect();
  const stored = await storedLedgerMessage(nats.url, NAMESPACE, LANE, GROUP);
  expect(stored.valueBytes).toBe(usage.valueBytes);
  expect(stored.recordBytes).toBeLessThanOrEqual(worstCaseLedgerBytes(g.slots));
  // What the worst case allows around the value (1,024 bytes) covers the widest subject and headers, at any revision.
  expect(stored.recordBytes - stored.valueBytes + String(Number.MAX_SAFE_INTEGER).length - String(g.revision).length).toBeLessThanOrEqual(1_024);
  console.log(`[bounds] the stored ledger at revision ${g.revision}: ${stored.valueBytes} bytes of value, ${stored.recordBytes} bytes stored (headers ${stored.headers.join("; ") || "none"})`);
  return usage.valueBytes!;
}

let leased: Work[] = [];

test("a ledger at max_ledger unfinished deliveries: the next slot is lane_capacity naming max_ledger, while renew, nack, an expired lease's retry and acks still work; an ack frees its slot for the waiting record", async () => {
  await publish(16);
  for (const work of await claimExactly(16)) {
    const acked = await worker.ack({ ...where, ...receiptOf(work) });
    history.push({ work, ackedAt: timestampMs(acked.ackedAt!) });
  }
  // The 16 completions left their slots: the next deliveries reuse them and grow the rest, up to max_ledger.
  await publish(MAX_LEDGER);
  leased = await claimExactly(MAX_LEDGER);
  // All 512 are live (max_pending 512): park 16 for an hour, so that they keep their slots without a live lease.
  const parked = leased.slice(0, 16);
  const nacked = await worker.nackBatch({ ...where, receipts: parked.map(receiptOf) });
  expect(nacked.results.every((r) => r.outcome.case === "nacked")).toBe(true);
  const full = await inspect();
  expect([full.slots, full.deliveries.length, full.liveLeases]).toEqual([MAX_LEDGER, MAX_LEDGER, MAX_LEDGER - 16]);
  expect(history.map((h) => completionOf(full, h.work.record!.sequence)?.attempt)).toEqual(history.map(() => 1));
  // At the bound: renew, nack (done above), the retry of an expired lease (no new slot), acks and duplicates.
  const live = leased.slice(16);
  const lapsing = live[live.length - 1]!;
  let kept = live.slice(0, -1);
  const renewed = await worker.renew({ ...where, ...receiptOf(kept[0]!) });
  expect(timestampMs(renewed.leaseExpiresAt!)).toBeGreaterThanOrEqual(timestampMs(kept[0]!.leaseExpiresAt!));
  // Keep the other leases alive until `lapsing`'s has ended (a lease that ended before its renewal, on a slow machine, lapses too).
  await waitFor(
    async () => {
      const still: Work[] = [];
      for (let i = 0; i < kept.length; i += 64) {
        const chunk = kept.slice(i, i + 64);
        const answer = await worker.renewBatch({ ...where, receipts: chunk.map(receiptOf) });
        answer.results.forEach((r, j) => (r.outcome.case === "renewed" ? still.push(chunk[j]!) : expect(r.outcome.value?.reason).toBe("lane_stale")));
      }
      kept = still;
      return deliveryOf(await inspect(), lapsing.record!.sequence)?.state === DeliveryState.RELEASED;
    },
    { timeoutMs: 60_000, intervalMs: 250, what: "one lease to end while the others are renewed" },
  );
  const lapsed = live.filter((w) => !kept.includes(w));
  // No fresh work waits: the retry takes the slot it already holds, as attempt 2.
  const retried = (await claimOne(worker, LANE, GROUP))!;
  expect(lapsed.map((w) => w.record!.sequence)).toContain(retried.record!.sequence);
  expect(retried.attempt).toBe(2);
  // Every other lapsed lease is claimed again too, so that nothing is eligible while the waiting record asks for a slot.
  const others: Work[] = [];
  while (others.length < lapsed.length - 1) others.push(...(await worker.claimBatch({ ...where, maxRecords: 64 })).work);
  const [waiting] = await publish(1);
  const before = await inspect();
  expect([before.slots, before.deliveries.length]).toEqual([MAX_LEDGER, MAX_LEDGER]);
  const refused = await expectLaneError(() => worker.claim(where), Code.ResourceExhausted, "lane_capacity");
  expect(refused.rawMessage).toContain("max_ledger");
  expect((await inspect()).revision).toBe(before.revision);
  await expectWithinBytes();
  const acked = await worker.ack({ ...where, ...receiptOf(retried) });
  history.push({ work: retried, ackedAt: timestampMs(acked.ackedAt!) });
  await expectHistoryIntact();
  // The ack freed its slot at once: the waiting record takes it, without growth.
  const next = (await claimOne(worker, LANE, GROUP))!;
  expect([next.record!.sequence, next.attempt]).toEqual([waiting!.sequence, 1]);
  leased = [...parked, ...kept, ...others, next];
  const after = await inspect();
  expect([after.slots, after.deliveries.length]).toEqual([MAX_LEDGER, MAX_LEDGER]);
  expect(completionOf(after, retried.record!.sequence)?.attempt).toBe(2);
}, 180_000);

test("at the bound, expired history gaps are recovered in batches of 16, freeing slots without pruning unexpired acknowledgements; later work resumes in the freed slots", async () => {
  const expired = await waitAllExpired(leased);
  expect(expired.slots).toBe(MAX_LEDGER);
  await expectLaneError(() => worker.claim(where), Code.Aborted, "lane_cursor");
  const made = await retireReleased(new Map(leased.map((w) => [w.record!.sequence, w])));
  expect(made).toBe(Math.ceil(expired.deliveries.length / 16));
  const after = await inspect();
  expect(after.deliveries).toEqual([]);
  expect(history.map((h) => completionOf(after, h.work.record!.sequence) !== undefined)).toEqual(history.map(() => true));
  expect([after.slots, after.recoveries]).toEqual([MAX_LEDGER, made]);
  await expectHistoryIntact();
  // The retired receipts are dead.
  await expectLaneError(() => worker.ack({ ...where, ...receiptOf(leased[5]!) }), Code.Aborted, "lane_stale");
  // Later work fills the freed slots again, without growth (the record that waited may have expired meanwhile: accept that gap first).
  const g = await inspect();
  if (cursorThrough(g) !== g.cursor) await worker.recoverGroup({ ...where, id: `gap-${serial++}`, revision: g.revision, cursorThrough: cursorThrough(g) });
  await publish(MAX_LEDGER);
  leased = await claimExactly(MAX_LEDGER);
  const refilled = await inspect();
  expect([refilled.slots, refilled.deliveries.length]).toEqual([MAX_LEDGER, MAX_LEDGER]);
  await expectWithinBytes();
}, 120_000);

test("with every slot leased and a full recovery history (64 records, nearly all of 16 retirements) the value stays within 512 KiB; the 65th recovery is lane_capacity; ack, nack and renew still work", async () => {
  await waitAllExpired(leased);
  await retireReleased(new Map(leased.map((w) => [w.record!.sequence, w])));
  // Fill the history to 64 records.
  for (let g = await inspect(); g.recoveries < 64; g = await inspect()) {
    await worker.recoverGroup({ ...where, id: `fill-${serial++}`, revision: g.revision, cursorThrough: cursorThrough(g) });
  }
  const full = await inspect();
  expect(full.recoveries).toBe(64);
  await expectLaneError(
    () => worker.recoverGroup({ ...where, id: "one-too-many", revision: full.revision, cursorThrough: cursorThrough(full) }),
    Code.ResourceExhausted,
    "lane_capacity",
  );
  // Every slot leased again: the maximum shape. (Everything was claimed before it expired: no gap to accept.)
  expect(cursorThrough(full)).toBe(full.cursor);
  await publish(MAX_LEDGER);
  leased = await claimExactly(MAX_LEDGER);
  const shape = await inspect();
  expect([shape.slots, shape.deliveries.length, shape.recoveries]).toEqual([MAX_LEDGER, MAX_LEDGER, 64]);
  const bytes = await expectWithinBytes();
  console.log(`[bounds] a ledger of ${MAX_LEDGER} deliveries and 64 recovery records with 64-character identifiers is ${bytes} bytes`);
  await worker.renew({ ...where, ...receiptOf(leased[0]!) });
  expect((await worker.nack({ ...where, ...receiptOf(leased[1]!) })).attempt).toBe(1);
  expect((await worker.ack({ ...where, ...receiptOf(leased[2]!) })).duplicate).toBe(false);
  await expectHistoryIntact();
}, 180_000);
