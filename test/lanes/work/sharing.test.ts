import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind, type ClaimResponse } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { laneSubjects } from "../../../src/lanes/names.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { completionOf, inspectGroup, publishWork, receiptOf, waitOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";
import { freePort } from "../../helpers/free-port.js";

/**
 * What one Laneway process shares between the callers of one lane or group:
 *
 * - Waiting claims share one watcher per lane: however many claimers wait
 *   for a lane's next work, Laneway holds one NATS subscription to the
 *   lane's subjects, and no broker request or subscription per waiting
 *   client. The broker's own monitoring endpoint (connz) is the witness: it
 *   lists every subscription of Laneway's connection.
 * - Concurrent operations on one group are combined into one
 *   compare-and-set: many single acks arriving together cost fewer ledger
 *   writes than acks. The group's revision (the bucket's sequence, written
 *   by nothing else meanwhile) counts the writes.
 */

const WAITERS = 24;
const config = buildLanesConfig({
  namespace: "watchers",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "wake", owner: "atlas", publishers: ["atlas"], groups: { waiters: ["beacon"] } },
    { id: "other", owner: "atlas", publishers: ["atlas"], groups: { waiters: ["beacon"] } },
    { id: "many", owner: "atlas", publishers: ["atlas"], groups: { ackers: ["beacon"] } },
    { id: "mixed", owner: "atlas", publishers: ["atlas"], groups: { takers: ["beacon"] } },
  ],
  lease: "30s",
});

let nats: NatsServerHandle;
let monitorUrl: string;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  const port = await freePort();
  nats = await startNatsServer({ extraConfig: { http: `127.0.0.1:${port}` } });
  monitorUrl = `http://127.0.0.1:${port}`;
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

/** Laneway's connection as the broker lists it: its subscriptions. */
async function lanewaySubscriptions(): Promise<string[]> {
  const response = await fetch(`${monitorUrl}/connz?subs=1`, { signal: AbortSignal.timeout(5_000) });
  const body = (await response.json()) as { connections?: { name?: string; subscriptions_list?: string[] }[] };
  const mine = (body.connections ?? []).filter((c) => c.name === "laneway");
  expect(mine).toHaveLength(1);
  return mine[0]!.subscriptions_list ?? [];
}

const laneSubscriptions = (subs: readonly string[], lane: string) => subs.filter((s) => s === laneSubjects("watchers", lane)).length;

test(`${WAITERS} claimers waiting on one lane share one subscription and hold no broker request each; publications wake them, and the subscription ends with the last waiter`, async () => {
  // Idle: an empty claim creates the group; nothing waits, nothing watches.
  expect((await beacon.claim({ lane: "wake", group: "waiters" })).work).toBeUndefined();
  const idle = await lanewaySubscriptions();
  expect(laneSubscriptions(idle, "wake")).toBe(0);

  const waiting: Promise<ClaimResponse>[] = Array.from({ length: WAITERS }, () => beacon.claim({ lane: "wake", group: "waiters", wait: waitOf(30_000) }));
  await waitFor(async () => laneSubscriptions(await lanewaySubscriptions(), "wake") === 1, { timeoutMs: 30_000, intervalMs: 50, what: "the lane's watcher" });
  // Let every waiter reach its wait, then look several times: one lane subscription, and nothing else added for the waiters.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  for (let i = 0; i < 5; i++) {
    const subs = await lanewaySubscriptions();
    expect(laneSubscriptions(subs, "wake")).toBe(1);
    expect(subs.length).toBe(idle.length + 1);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  // A waiter on another lane has a watcher of its own.
  const elsewhere = beacon.claim({ lane: "other", group: "waiters", wait: waitOf(30_000) });
  await waitFor(async () => laneSubscriptions(await lanewaySubscriptions(), "other") === 1, { timeoutMs: 30_000, intervalMs: 50, what: "the other lane's watcher" });
  expect(laneSubscriptions(await lanewaySubscriptions(), "wake")).toBe(1);

  // Every waiter is woken by publications and leases one record of its own; none ends empty-handed.
  const records = await publishWork(atlas, "wake", Array.from({ length: WAITERS }, (_, i) => `wake-${i}`));
  const answers = await Promise.all(waiting);
  const leased = answers.map((a) => a.work?.record?.sequence);
  expect(leased.every((s) => s !== undefined)).toBe(true);
  expect(new Set(leased).size).toBe(WAITERS);
  expect([...leased].sort((a, b) => Number(a! - b!))).toEqual(records.map((r) => r.sequence));
  const acked = await beacon.ackBatch({ lane: "wake", group: "waiters", receipts: answers.map((a) => receiptOf(a.work!)) });
  expect(acked.results.every((r) => r.outcome.case === "acked")).toBe(true);

  // The last waiter of a lane ends its watcher; the other lane's stays while its claimer waits.
  await waitFor(async () => laneSubscriptions(await lanewaySubscriptions(), "wake") === 0, { timeoutMs: 30_000, intervalMs: 50, what: "the watcher to end" });
  expect(laneSubscriptions(await lanewaySubscriptions(), "other")).toBe(1);
  const [other] = await publishWork(atlas, "other", ["other-0"]);
  expect((await elsewhere).work?.record?.sequence).toBe(other!.sequence);
  await waitFor(async () => laneSubscriptions(await lanewaySubscriptions(), "other") === 0, { timeoutMs: 30_000, intervalMs: 50, what: "the other watcher to end" });
  // Nothing the waiters used is left behind.
  await waitFor(async () => (await lanewaySubscriptions()).length === idle.length, { timeoutMs: 30_000, intervalMs: 50, what: "Laneway's subscriptions to be as when idle" });
});

test("32 single acks arriving together on one group are each answered on their own, and each delivery completes once", async () => {
  const records = await publishWork(atlas, "many", Array.from({ length: 32 }, (_, i) => `many-${i}`));
  const { work } = await beacon.claimBatch({ lane: "many", group: "ackers", maxRecords: 32 });
  expect(work.map((w) => w.record!.sequence)).toEqual(records.map((r) => r.sequence));
  const before = await inspectGroup(beacon, "many", "ackers");
  const answers = await Promise.all(work.map((w) => beacon.ack({ lane: "many", group: "ackers", ...receiptOf(w) })));
  expect(answers.map((a) => a.duplicate)).toEqual(work.map(() => false));
  const after = await inspectGroup(beacon, "many", "ackers");
  expect(after.deliveries).toEqual([]);
  expect(work.map((w) => completionOf(after, w.record!.sequence)?.attempt)).toEqual(work.map(() => 1));
  // However the acks were combined (that depends on how they arrived), the
  // group was written at least once and at most once per ack. How many acks
  // one write carries is a speed figure: npm run bench lanes-work reports it.
  const writes = Number(after.revision - before.revision);
  expect(writes).toBeGreaterThanOrEqual(1);
  expect(writes).toBeLessThanOrEqual(32);
  // A repeated ack of each is a duplicate, answered without another completion.
  const again = await Promise.all(work.map((w) => beacon.ack({ lane: "many", group: "ackers", ...receiptOf(w) })));
  expect(again.map((a) => a.duplicate)).toEqual(work.map(() => true));
});

test("reads leave no consumer behind: after claims, the lane streams carry no consumer", async () => {
  await publishWork(atlas, "other", ["left-1", "left-2", "left-3"]);
  for (let i = 0; i < 3; i++) {
    const claimed = await beacon.claim({ lane: "other", group: "waiters" });
    expect(claimed.work).toBeDefined();
    await beacon.ack({ lane: "other", group: "waiters", ...receiptOf(claimed.work!) });
  }
  // A read's consumer is kept for the read that continues it (the group's next claim) for IDLE_READER_MS, then deleted (a consumer left behind would stay until its inactivity threshold).
  const consumers = async () => {
    const response = await fetch(`${monitorUrl}/jsz?streams=1`, { signal: AbortSignal.timeout(5_000) });
    const body = (await response.json()) as { account_details?: { stream_detail?: { name: string; state?: { consumer_count?: number } }[] }[] };
    const streams = (body.account_details ?? []).flatMap((a) => a.stream_detail ?? []).filter((s) => !s.name.startsWith("KV_"));
    expect(streams.length).toBeGreaterThan(0);
    return streams.reduce((sum, s) => sum + (s.state?.consumer_count ?? 0), 0);
  };
  await waitFor(async () => (await consumers()) === 0, { what: "every read's consumer to be deleted" });
});

/** Messages nats-server has delivered to Laneway's connection so far (records, API answers, KV entries). */
async function deliveredToLaneway(): Promise<number> {
  const response = await fetch(`${monitorUrl}/connz`, { signal: AbortSignal.timeout(5_000) });
  const body = (await response.json()) as { connections?: { name?: string; out_msgs?: number }[] };
  const mine = (body.connections ?? []).filter((c) => c.name === "laneway");
  expect(mine).toHaveLength(1);
  return mine[0]!.out_msgs ?? 0;
}

test("single claims read about what they lease (work read ahead waits for the next claims), lease every work record once in order, and never an event", async () => {
  // 120 records: every third an event, and a run of 40 events in the middle.
  const kinds = Array.from({ length: 120 }, (_, i) => (i % 3 === 1 || (i >= 50 && i < 90) ? RecordKind.EVENT : RecordKind.WORK));
  const work: bigint[] = [];
  for (const [i, kind] of kinds.entries()) {
    const [record] = await publishWork(atlas, "mixed", [`mixed-${i}`], { kind });
    if (kind === RecordKind.WORK) work.push(record!.sequence);
  }
  const before = await deliveredToLaneway();
  const leased: bigint[] = [];
  let claims = 0;
  for (;;) {
    const { work: got } = await beacon.claim({ lane: "mixed", group: "takers" });
    claims += 1;
    if (!got) break;
    expect(got.record!.kind).toBe(RecordKind.WORK);
    leased.push(got.record!.sequence);
    await beacon.ack({ lane: "mixed", group: "takers", ...receiptOf(got) });
  }
  expect(leased).toEqual(work);
  // Each claim and ack costs a few broker answers (ledger, stream state);
  // reading the rest of the lane on every claim would cost ~5,000 more.
  const delivered = (await deliveredToLaneway()) - before;
  console.log(`[sharing] ${claims} claims and ${leased.length} acks: ${delivered} messages delivered to Laneway`);
  expect(delivered).toBeLessThan(kinds.length + 12 * claims);
});

