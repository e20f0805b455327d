import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { DeliveryState, LaneService, RecordKind, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, jsonPayload, newToken, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import {
  claimAll,
  claimOne,
  codeAndReason,
  completedCount,
  completionOf,
  deliveryOf,
  inspectGroup,
  leaseEnd,
  publishWork,
  receiptOf,
  responseLoser,
  stateOf,
  waitReleased,
  workOn,
} from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Work groups through the generated client, Laneway in this process on a
 * test-owned nats-server:
 *
 * - independent groups (each gets its own delivery of every work record,
 *   never an event) and competing members (each record leased once per
 *   live lease);
 * - claims that wait, woken by a publication or by a lease ending;
 * - ack, renew and nack, single and batched, with their duplicates;
 * - fencing: expired leases are redelivered with attempt + 1 and a new
 *   receipt, and the old receipt can no longer ack, nack or renew; a
 *   receipt of another project or group is stale; receipts never appear in
 *   inspection, errors or logs;
 * - lost responses (the server answered, the client never saw it): the
 *   lease expires and the record is redelivered; a lost ack is answered
 *   again as a duplicate;
 * - max_pending (its own namespace, 30 s leases), and the specification's fairness (a persisted turn
 *   between retries and fresh work, a rotating retry cursor), proven across
 *   two Laneway servers on one namespace so that neither can come from
 *   process memory.
 *
 * Three namespaces: `work` (30 s leases), `work-short` (1 s leases,
 * retry_delay 200 ms doubling to 800 ms), and `work-capped` (max_pending 4).
 */

const cinderToken = newToken();

function config(namespace: string, bounds: Record<string, unknown>): Record<string, unknown> {
  return buildLanesConfig({
    namespace,
    projects: ["atlas", "beacon", "cinder"],
    lanes: [
      {
        id: "jobs",
        owner: "atlas",
        publishers: ["atlas", "beacon"],
        subscribers: ["cinder"],
        groups: { workers: ["atlas", "beacon"], archivers: ["beacon"] },
        recoverers: { workers: ["beacon"] },
      },
      { id: "wake", owner: "atlas", publishers: ["atlas"], groups: { waiters: ["beacon"] } },
      { id: "settle", owner: "atlas", publishers: ["atlas"], groups: { settlers: ["atlas", "beacon"] } },
      { id: "batches", owner: "atlas", publishers: ["atlas"], groups: { batchers: ["beacon"] } },
      { id: "retries", owner: "atlas", publishers: ["atlas"], groups: { retriers: ["beacon"] } },
      { id: "expiry", owner: "atlas", publishers: ["atlas"], groups: { takers: ["atlas", "beacon"], others: ["beacon"] } },
      { id: "lost", owner: "atlas", publishers: ["atlas"], groups: { losers: ["beacon"] } },
      { id: "capped", owner: "atlas", publishers: ["atlas"], groups: { cappers: ["beacon"] } },
      { id: "fair", owner: "atlas", publishers: ["atlas"], groups: { fair: ["beacon"] } },
      { id: "rotation", owner: "atlas", publishers: ["atlas"], groups: { rotors: ["beacon"] } },
      ...[0, 1, 2].map((i) => ({ id: `combined-${i}`, owner: "atlas", publishers: ["atlas"], groups: { combiners: ["beacon"] } })),
    ],
    ...bounds,
  });
}

const LEASE_MS = 1_000;
const shortConfig = config("work-short", { lease: "1s", retry_delay: "200ms", max_retry_delay: "800ms" });

let nats: NatsServerHandle;
let main: InProcessLaneway;
let short: InProcessLaneway;
/** A second Laneway on the short namespace: the same groups, another process memory. */
let shortPeer: InProcessLaneway;
/** A namespace of max_pending 4 (30 s leases). */
let capped: InProcessLaneway;

let atlas: LaneClient;
let beacon: LaneClient;
let cinder: LaneClient;
let shortAtlas: LaneClient;
let shortBeacon: LaneClient;
let peerBeacon: LaneClient;
let cappedBeacon: LaneClient;
let cappedPeerBeacon: LaneClient;
let cappedAtlas: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  const env = { CINDER_LANE_TOKEN: cinderToken };
  main = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config("work", {}), env });
  short = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: shortConfig, env });
  shortPeer = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: shortConfig, env, tokens: short.tokens });
  capped = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config("work-capped", { max_pending: 4 }), env, tokens: short.tokens });
  atlas = main.clients.client(LaneService, { token: main.tokens.atlas });
  beacon = main.clients.client(LaneService, { token: main.tokens.beacon, protocol: "grpc" });
  cinder = main.clients.client(LaneService, { token: cinderToken });
  shortAtlas = short.clients.client(LaneService, { token: short.tokens.atlas });
  shortBeacon = short.clients.client(LaneService, { token: short.tokens.beacon });
  peerBeacon = shortPeer.clients.client(LaneService, { token: short.tokens.beacon, protocol: "connect-binary" });
  cappedAtlas = capped.clients.client(LaneService, { token: short.tokens.atlas });
  cappedBeacon = capped.clients.client(LaneService, { token: short.tokens.beacon });
  cappedPeerBeacon = capped.clients.client(LaneService, { token: short.tokens.beacon, protocol: "grpc" });
});

afterAll(async () => {
  await capped?.stop();
  await shortPeer?.stop();
  await short?.stop();
  await main?.stop();
  await nats?.remove();
});

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe("groups and their members", () => {
  test("every group receives its own delivery of every work record and never an event; competing members lease each record once", async () => {
    // Work and events interleaved on one lane.
    const response = await atlas.publishBatch({
      lane: "jobs",
      records: Array.from({ length: 26 }, (_, i) => ({
        id: `mixed-${i}`,
        kind: i % 5 === 2 ? RecordKind.EVENT : RecordKind.WORK,
        schema: "job-v1",
        payload: jsonPayload({ i }),
      })),
    });
    const records = response.results.map((r) => (r.outcome.case === "published" ? r.outcome.value.record! : undefined)).filter((r) => r !== undefined);
    expect(records).toHaveLength(26);
    const work = records.filter((r) => r.kind === RecordKind.WORK).map((r) => r.sequence).sort((a, b) => Number(a - b));
    const lastWork = work[work.length - 1]!;

    // Six competing claimers of `workers`, three per project, single and batch claims.
    const leased: { sequence: bigint; project: string; work: Work }[] = [];
    const claimer = async (project: "atlas" | "beacon", batch: boolean) => {
      const client = project === "atlas" ? atlas : beacon;
      for (;;) {
        const got = batch ? (await client.claimBatch({ lane: "jobs", group: "workers", maxRecords: 3 })).work : [(await client.claim({ lane: "jobs", group: "workers" })).work].filter((w) => w !== undefined);
        if (got.length === 0) return;
        for (const w of got) leased.push({ sequence: w.record!.sequence, project, work: w });
      }
    };
    await Promise.all([claimer("atlas", true), claimer("atlas", false), claimer("atlas", true), claimer("beacon", false), claimer("beacon", true), claimer("beacon", false)]);
    // Each work record exactly once (the leases are all live), no event.
    expect(leased.map((l) => l.sequence).sort((a, b) => Number(a - b))).toEqual(work);
    for (const l of leased) {
      expect(l.work.record!.kind).toBe(RecordKind.WORK);
      expect(l.work.attempt).toBe(1);
      expect(l.work.receipt).toMatch(/^[0-9a-f]{64}$/);
    }
    expect(new Set(leased.map((l) => l.work.receipt)).size).toBe(leased.length);
    // Both projects took part (the holder is the authenticated project).
    expect(new Set(leased.map((l) => l.project))).toEqual(new Set(["atlas", "beacon"]));

    // The other group gets its own delivery of every record, independent of `workers`.
    const archived = await claimAll(beacon, "jobs", "archivers", 7);
    expect(archived.map((w) => w.record!.sequence).sort((a, b) => Number(a - b))).toEqual(work);
    expect(archived.every((w) => w.attempt === 1)).toBe(true);

    // Each holder acks its own deliveries.
    for (const l of leased) {
      const client = l.project === "atlas" ? atlas : beacon;
      const acked = await client.ack({ lane: "jobs", group: "workers", ...receiptOf(l.work) });
      expect(acked.duplicate).toBe(false);
    }
    const group = await inspectGroup(beacon, "jobs", "workers");
    expect(group.cursor).toBeGreaterThanOrEqual(lastWork);
    // Completed deliveries left their slots: nothing is unfinished, every record is in the completion history at attempt 1.
    expect(group.deliveries).toEqual([]);
    expect(work.map((s) => completionOf(group, s)?.attempt)).toEqual(work.map(() => 1));
    expect(completedCount(group)).toBe(work.length);
    expect(group.liveLeases).toBe(0);
    // `archivers` still holds its 21 live leases: the groups' ledgers are separate.
    expect((await inspectGroup(beacon, "jobs", "archivers")).liveLeases).toBe(work.length);
    // Nothing is left for `workers`.
    expect(await claimOne(atlas, "jobs", "workers")).toBeUndefined();
  });

  test("an idle group answers no work at once; a waiting claim is woken by the next publication", async () => {
    expect(await claimOne(beacon, "wake", "waiters")).toBeUndefined();
    // The first (empty) claim created the group with one reusable slot.
    const created = await inspectGroup(beacon, "wake", "waiters");
    expect(created.slots).toBe(1);
    expect(created.deliveries).toEqual([]);
    const waiting = claimOne(beacon, "wake", "waiters", 20_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const [record] = await publishWork(atlas, "wake", ["wake-one"]);
    const work = await waiting;
    expect(work?.record?.sequence).toBe(record!.sequence);
    expect(work?.record?.id).toBe("wake-one");
    await beacon.ack({ lane: "wake", group: "waiters", ...receiptOf(work!) });
  });

  test("membership grants work only: a member cannot read events, a subscriber cannot claim, others cannot inspect or settle", async () => {
    const [record] = await publishWork(atlas, "jobs", ["capability-one"]);
    const work = (await claimOne(beacon, "jobs", "workers"))!;
    expect(work.record!.sequence).toBe(record!.sequence);
    // beacon is a member of `workers` but no subscriber of `jobs`.
    await expectLaneError(() => beacon.replay({ lane: "jobs", cursor: 0n }), Code.PermissionDenied, "lane_forbidden");
    // cinder subscribes to `jobs` but is in no group.
    await expectLaneError(() => cinder.claim({ lane: "jobs", group: "workers" }), Code.PermissionDenied, "lane_forbidden");
    await expectLaneError(() => cinder.inspectGroup({ lane: "jobs", group: "workers" }), Code.PermissionDenied, "lane_forbidden");
    await expectLaneError(() => cinder.ack({ lane: "jobs", group: "workers", ...receiptOf(work) }), Code.PermissionDenied, "lane_forbidden");
    // atlas owns the lane and is a member of `workers`, not of `archivers`.
    await expectLaneError(() => atlas.claim({ lane: "jobs", group: "archivers" }), Code.PermissionDenied, "lane_forbidden");
    await expectLaneError(() => atlas.inspectGroup({ lane: "jobs", group: "archivers" }), Code.PermissionDenied, "lane_forbidden");
    // A group that does not exist, on a lane that does.
    await expectLaneError(() => beacon.claim({ lane: "jobs", group: "nobody" }), Code.PermissionDenied, "lane_forbidden");
    // None of those refusals touched the delivery.
    expect((await beacon.ack({ lane: "jobs", group: "workers", ...receiptOf(work) })).duplicate).toBe(false);
  });
});

describe("ack, renew and nack", () => {
  test("ack completes once: a repeat answers the original completion as a duplicate, and renew or nack afterwards is stale", async () => {
    await publishWork(atlas, "settle", ["settle-ack"]);
    const work = (await claimOne(beacon, "settle", "settlers"))!;
    const first = await beacon.ack({ lane: "settle", group: "settlers", ...receiptOf(work) });
    expect(first.duplicate).toBe(false);
    const again = await beacon.ack({ lane: "settle", group: "settlers", ...receiptOf(work) });
    expect(again.duplicate).toBe(true);
    expect(timestampMs(again.ackedAt!)).toBe(timestampMs(first.ackedAt!));
    await expectLaneError(() => beacon.renew({ lane: "settle", group: "settlers", ...receiptOf(work) }), Code.Aborted, "lane_stale");
    await expectLaneError(() => beacon.nack({ lane: "settle", group: "settlers", ...receiptOf(work) }), Code.Aborted, "lane_stale");
    const g = await inspectGroup(beacon, "settle", "settlers");
    expect(deliveryOf(g, work.record!.sequence)).toBeUndefined();
    expect(completionOf(g, work.record!.sequence)).toEqual({ attempt: 1, lastAckedAt: timestampMs(first.ackedAt!) });
  });

  test("renew extends a live lease, and the inspection shows the new expiry", async () => {
    await publishWork(atlas, "settle", ["settle-renew"]);
    const work = (await claimOne(atlas, "settle", "settlers"))!;
    await new Promise((resolve) => setTimeout(resolve, 20));
    const renewed = await atlas.renew({ lane: "settle", group: "settlers", ...receiptOf(work) });
    expect(timestampMs(renewed.leaseExpiresAt!)).toBeGreaterThan(leaseEnd(work));
    const d = deliveryOf(await inspectGroup(atlas, "settle", "settlers"), work.record!.sequence)!;
    expect([d.state, timestampMs(d.leaseExpiresAt!)]).toEqual([DeliveryState.LEASED, timestampMs(renewed.leaseExpiresAt!)]);
    // Another member's renew of it is stale: the receipt binds the holder.
    await expectLaneError(() => beacon.renew({ lane: "settle", group: "settlers", ...receiptOf(work) }), Code.Aborted, "lane_stale");
    expect((await atlas.ack({ lane: "settle", group: "settlers", ...receiptOf(work) })).duplicate).toBe(false);
  });

  test("a batch claim leases up to max_records with their own receipts; batch ack, nack and renew answer each receipt in request order", async () => {
    const records = await publishWork(atlas, "batches", ids("batch", 10));
    const first = await beacon.claimBatch({ lane: "batches", group: "batchers", maxRecords: 4 });
    expect(first.work.map((w) => w.record!.sequence)).toEqual(records.slice(0, 4).map((r) => r.sequence));
    const rest = await beacon.claimBatch({ lane: "batches", group: "batchers", maxRecords: 64 });
    expect(rest.work.map((w) => w.record!.sequence)).toEqual(records.slice(4).map((r) => r.sequence));
    const all = [...first.work, ...rest.work];
    expect(new Set(all.map((w) => w.receipt)).size).toBe(10);
    const forged = { sequence: records[0]!.sequence, receipt: "0".repeat(64) };

    const renewed = await beacon.renewBatch({ lane: "batches", group: "batchers", receipts: [receiptOf(all[0]!), forged, receiptOf(all[1]!)] });
    expect(renewed.results.map((r) => r.outcome.case)).toEqual(["renewed", "error", "renewed"]);
    expect(renewed.results[1]!.outcome.value).toMatchObject({ code: "aborted", reason: "lane_stale" });
    expect(JSON.stringify(renewed.results[1]!.outcome.value)).not.toContain(all[0]!.receipt);

    const acked = await beacon.ackBatch({ lane: "batches", group: "batchers", receipts: [0, 1, 2, 3, 4].map((i) => receiptOf(all[i]!)) });
    expect(acked.results.map((r) => (r.outcome.case === "acked" ? r.outcome.value.duplicate : r.outcome.case))).toEqual([false, false, false, false, false]);
    // A repeat mixes duplicates with new acks and a stale receipt, each answered on its own.
    const mixed = await beacon.ackBatch({ lane: "batches", group: "batchers", receipts: [receiptOf(all[4]!), forged, receiptOf(all[5]!)] });
    expect(mixed.results.map((r) => (r.outcome.case === "acked" ? `duplicate:${r.outcome.value.duplicate}` : r.outcome.value?.reason))).toEqual([
      "duplicate:true",
      "lane_stale",
      "duplicate:false",
    ]);

    const nacked = await beacon.nackBatch({ lane: "batches", group: "batchers", receipts: [6, 7, 0].map((i) => receiptOf(all[i]!)) });
    expect(nacked.results.map((r) => (r.outcome.case === "nacked" ? r.outcome.value.attempt : r.outcome.value?.reason))).toEqual([1, 1, "lane_stale"]);
    // A repeated nack is answered again with the same deadline.
    const again = await beacon.nackBatch({ lane: "batches", group: "batchers", receipts: [receiptOf(all[6]!)] });
    const retryAt = (r: (typeof nacked.results)[number]) => (r.outcome.case === "nacked" ? timestampMs(r.outcome.value.retryAt!) : undefined);
    expect(retryAt(again.results[0]!)).toBe(retryAt(nacked.results[0]!));

    const group = await inspectGroup(beacon, "batches", "batchers");
    const states = all.map((w) => DeliveryState[stateOf(group, w.record!.sequence)!]);
    expect(states.slice(0, 6)).toEqual(["ACKED", "ACKED", "ACKED", "ACKED", "ACKED", "ACKED"]);
    expect(states.slice(6, 8).every((s) => s === "RETRY_SCHEDULED" || s === "RELEASED")).toBe(true);
    expect(states.slice(8)).toEqual(["LEASED", "LEASED"]);
  });

  test("receipts bind project and group: another project's or group's use is stale; no receipt appears in inspection, errors or logs", async () => {
    const [record] = await publishWork(shortAtlas, "expiry", ["fence-group"]);
    const mine = (await claimOne(shortBeacon, "expiry", "takers"))!;
    const theirs = (await claimOne(shortBeacon, "expiry", "others"))!;
    expect(mine.record!.sequence).toBe(record!.sequence);
    expect(theirs.record!.sequence).toBe(record!.sequence);
    expect(theirs.receipt).not.toBe(mine.receipt);
    // The receipt of `takers` used in `others` (same project, same sequence) and by atlas in `takers`.
    for (const call of [
      () => shortBeacon.ack({ lane: "expiry", group: "others", ...receiptOf(mine) }),
      () => shortBeacon.renew({ lane: "expiry", group: "others", ...receiptOf(mine) }),
      () => shortAtlas.ack({ lane: "expiry", group: "takers", ...receiptOf(mine) }),
      () => shortAtlas.nack({ lane: "expiry", group: "takers", ...receiptOf(mine) }),
    ]) {
      const error = await expectLaneError(call, Code.Aborted, "lane_stale");
      expect(error.rawMessage).not.toContain(mine.receipt);
    }
    // Both deliveries are still owned by their own receipts.
    expect((await shortBeacon.ack({ lane: "expiry", group: "takers", ...receiptOf(mine) })).duplicate).toBe(false);
    expect((await shortBeacon.ack({ lane: "expiry", group: "others", ...receiptOf(theirs) })).duplicate).toBe(false);
    const inspected = JSON.stringify(await inspectGroup(shortBeacon, "expiry", "takers"), (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v));
    for (const receipt of [mine.receipt, theirs.receipt]) {
      expect(inspected).not.toContain(receipt);
      for (const log of [...main.logs, ...short.logs, ...shortPeer.logs]) expect(log).not.toContain(receipt);
    }
  });
});

describe("expiry, retries and lost responses (1 s leases)", () => {
  test("nack schedules a durable retry: retry_delay doubled per attempt and capped by max_retry_delay, never redelivered before it is due, and a repeated nack keeps its deadline", async () => {
    const [record] = await publishWork(shortAtlas, "retries", ["retry-one"]);
    const expected = [200, 400, 800, 800];
    let previousRetryAt = 0;
    for (const [i, delay] of expected.entries()) {
      const work = (await claimOne(shortBeacon, "retries", "retriers", 10_000))!;
      expect(work.record!.sequence).toBe(record!.sequence);
      expect(work.attempt).toBe(i + 1);
      const granted = leaseEnd(work) - LEASE_MS;
      // Never leased again before the previous retry fell due.
      expect(granted).toBeGreaterThanOrEqual(previousRetryAt);
      const nacked = await shortBeacon.nack({ lane: "retries", group: "retriers", ...receiptOf(work) });
      const answeredAt = Date.now();
      const retryAt = timestampMs(nacked.retryAt!);
      expect(nacked.attempt).toBe(i + 1);
      // The server nacked between the grant and the answer: its delay is bounded on both sides.
      expect(retryAt - answeredAt).toBeLessThanOrEqual(delay);
      expect(retryAt - granted).toBeGreaterThanOrEqual(delay);
      // A repeated nack does not move the deadline; the ledger holds it.
      const repeated = await shortBeacon.nack({ lane: "retries", group: "retriers", ...receiptOf(work) });
      expect(timestampMs(repeated.retryAt!)).toBe(retryAt);
      const d = deliveryOf(await inspectGroup(shortBeacon, "retries", "retriers"), record!.sequence)!;
      expect(timestampMs(d.retryAt!)).toBe(retryAt);
      expect(d.attempt).toBe(i + 1);
      previousRetryAt = retryAt;
    }
    const last = (await claimOne(peerBeacon, "retries", "retriers", 10_000))!;
    expect(last.attempt).toBe(5);
    expect(leaseEnd(last) - LEASE_MS).toBeGreaterThanOrEqual(previousRetryAt);
    expect((await peerBeacon.ack({ lane: "retries", group: "retriers", ...receiptOf(last) })).duplicate).toBe(false);
  });

  test("an expired lease is redelivered with attempt + 1 and a new receipt to a waiting claimer; the old receipt can no longer ack, nack or renew", async () => {
    const [record] = await publishWork(shortAtlas, "expiry", ["expire-one"]);
    const first = (await claimOne(shortBeacon, "expiry", "takers"))!;
    expect(first.record!.sequence).toBe(record!.sequence);
    // atlas waits on the other server: no work is eligible until the lease ends.
    const peerAtlas = shortPeer.clients.client(LaneService, { token: short.tokens.atlas });
    const second = (await claimOne(peerAtlas, "expiry", "takers", 20_000))!;
    expect(second.record!.sequence).toBe(record!.sequence);
    expect(second.attempt).toBe(2);
    expect(second.receipt).not.toBe(first.receipt);
    // The new lease began no earlier than the old one ended: never two live leases.
    expect(leaseEnd(second) - LEASE_MS).toBeGreaterThanOrEqual(leaseEnd(first));
    for (const call of [
      () => shortBeacon.ack({ lane: "expiry", group: "takers", ...receiptOf(first) }),
      () => shortBeacon.nack({ lane: "expiry", group: "takers", ...receiptOf(first) }),
      () => shortBeacon.renew({ lane: "expiry", group: "takers", ...receiptOf(first) }),
    ]) {
      await expectLaneError(call, Code.Aborted, "lane_stale");
    }
    expect((await shortAtlas.ack({ lane: "expiry", group: "takers", ...receiptOf(second) })).duplicate).toBe(false);
    // Still stale afterwards, and the holder's repeat is a duplicate.
    await expectLaneError(() => shortBeacon.ack({ lane: "expiry", group: "takers", ...receiptOf(first) }), Code.Aborted, "lane_stale");
    expect((await shortAtlas.ack({ lane: "expiry", group: "takers", ...receiptOf(second) })).duplicate).toBe(true);
    const g = await inspectGroup(shortAtlas, "expiry", "takers");
    expect(deliveryOf(g, record!.sequence)).toBeUndefined();
    expect(completionOf(g, record!.sequence)?.attempt).toBe(2);
  });

  test("a claim whose response was lost leaves a lease that expires and is redelivered with attempt + 1; the lost receipt is fenced, and a lost ack is answered again as a duplicate", async () => {
    const [record] = await publishWork(shortAtlas, "lost", ["lost-one"]);
    const loser = responseLoser((method) => method === "Claim" || method === "Ack");
    const lossy = short.clients.client(LaneService, { token: short.tokens.beacon, interceptors: [loser.interceptor] });
    expect(codeAndReason(await lossy.claim({ lane: "lost", group: "losers" }).catch((e: unknown) => e))).toEqual({ code: "Unavailable", reason: undefined });
    const lostWork = (loser.lost[0] as { work: Work }).work;
    expect(lostWork.record!.sequence).toBe(record!.sequence);
    // The server leased it: to beacon, attempt 1, the very lease the lost answer carried.
    const inspectedFrom = Date.now();
    const leased = deliveryOf(await inspectGroup(shortBeacon, "lost", "losers"), record!.sequence)!;
    const inspectedBy = Date.now();
    expect([leased.attempt, leased.project, timestampMs(leased.leaseExpiresAt!)]).toEqual([1, "beacon", leaseEnd(lostWork)]);
    // Live until that lease ends, released once it has (a busy machine may inspect after its 1 s).
    if (inspectedBy < leaseEnd(lostWork)) expect(leased.state).toBe(DeliveryState.LEASED);
    else if (inspectedFrom >= leaseEnd(lostWork)) expect(leased.state).toBe(DeliveryState.RELEASED);
    else expect([DeliveryState.LEASED, DeliveryState.RELEASED]).toContain(leased.state);
    const redelivered = (await claimOne(shortBeacon, "lost", "losers", 20_000))!;
    expect(redelivered.record!.sequence).toBe(record!.sequence);
    expect(redelivered.attempt).toBe(2);
    expect(leaseEnd(redelivered) - LEASE_MS).toBeGreaterThanOrEqual(leaseEnd(lostWork));
    await expectLaneError(() => shortBeacon.ack({ lane: "lost", group: "losers", ...receiptOf(lostWork) }), Code.Aborted, "lane_stale");

    // The ack's answer is lost too: the server completed it, and the retry says so.
    expect(codeAndReason(await lossy.ack({ lane: "lost", group: "losers", ...receiptOf(redelivered) }).catch((e: unknown) => e)).code).toBe("Unavailable");
    const lostAck = loser.lost[1] as { ackedAt: Parameters<typeof timestampMs>[0]; duplicate: boolean };
    expect(lostAck.duplicate).toBe(false);
    const retried = await shortBeacon.ack({ lane: "lost", group: "losers", ...receiptOf(redelivered) });
    expect(retried.duplicate).toBe(true);
    expect(timestampMs(retried.ackedAt!)).toBe(timestampMs(lostAck.ackedAt));
  });
});

describe("operations combined into one compare-and-set", () => {
  test("a claim combined with a nack that makes the next retry in rotation ineligible leases the following retry, with its record", async () => {
    for (let i = 0; i < 3; i++) {
      const lane = `combined-${i}`;
      const [a, b, c] = await publishWork(shortAtlas, lane, [`${lane}-a`, `${lane}-b`, `${lane}-c`]);
      const first = (await shortBeacon.claimBatch({ lane, group: "combiners", maxRecords: 3 })).work;
      expect(first.map((w) => w.record!.sequence)).toEqual([a!.sequence, b!.sequence, c!.sequence]);
      const [workA, , workC] = first;
      // All three leases end; nobody takes them over.
      await waitFor(
        async () => {
          const g = await inspectGroup(shortBeacon, lane, "combiners");
          return [a!, b!, c!].every((r) => deliveryOf(g, r.sequence)?.state === DeliveryState.RELEASED);
        },
        { timeoutMs: 30_000, intervalMs: 200, what: "a, b and c to be released" },
      );
      // While the compare-and-set of c's ack is in flight (late, but nobody took c over), a's holder nacks a
      // (late too) and a claim arrives: both go into the next compare-and-set together.
      const [acked, nacked, claimed] = await Promise.all([
        shortBeacon.ack({ lane, group: "combiners", ...receiptOf(workC!) }),
        shortBeacon.nack({ lane, group: "combiners", ...receiptOf(workA!) }),
        shortBeacon.claim({ lane, group: "combiners" }).catch((e: unknown) => codeAndReason(e)),
      ]);
      expect(acked.duplicate).toBe(false);
      expect(nacked.attempt).toBe(1);
      expect("work" in claimed ? [claimed.work?.record?.id, claimed.work?.attempt] : claimed).toEqual([`${lane}-b`, 2]);
    }
  });
});

describe("max_pending (4 live leases per group)", () => {
  test("a group holding max_pending live leases refuses further claims with lane_capacity; a batch gets what fits; after an ack claims go on", async () => {
    const records = await publishWork(cappedAtlas, "capped", ids("capped", 6));
    const batch = await cappedBeacon.claimBatch({ lane: "capped", group: "cappers", maxRecords: 6 });
    expect(batch.work.map((w) => w.record!.sequence)).toEqual(records.slice(0, 4).map((r) => r.sequence));
    await expectLaneError(() => cappedBeacon.claim({ lane: "capped", group: "cappers" }), Code.ResourceExhausted, "lane_capacity");
    await expectLaneError(() => cappedPeerBeacon.claimBatch({ lane: "capped", group: "cappers", maxRecords: 2 }), Code.ResourceExhausted, "lane_capacity");
    // A waiting claim too: capacity is answered, not waited out.
    await expectLaneError(() => cappedBeacon.claim({ lane: "capped", group: "cappers", wait: { seconds: 5n, nanos: 0 } }), Code.ResourceExhausted, "lane_capacity");
    // A released delivery (nacked, waiting for its retry) holds no live lease: fresh work is claimed again.
    expect((await cappedBeacon.nack({ lane: "capped", group: "cappers", ...receiptOf(batch.work[0]!) })).attempt).toBe(1);
    const next = (await claimOne(cappedBeacon, "capped", "cappers"))!;
    expect(next.record!.sequence).toBe(records[4]!.sequence);
    await expectLaneError(() => cappedBeacon.claim({ lane: "capped", group: "cappers" }), Code.ResourceExhausted, "lane_capacity");
    // Acks free live leases too.
    await cappedBeacon.ackBatch({ lane: "capped", group: "cappers", receipts: [...batch.work.slice(1), next].map(receiptOf) });
    const rest = await cappedBeacon.claimBatch({ lane: "capped", group: "cappers", maxRecords: 4, wait: { seconds: 10n, nanos: 0 } });
    expect(rest.work.length).toBeGreaterThan(0);
    await cappedBeacon.ackBatch({ lane: "capped", group: "cappers", receipts: rest.work.map(receiptOf) });
  });

  test("a claim sent together with the acks that free leases for it is not refused: the group holds it for them, whichever reaches it first", async () => {
    const records = await publishWork(cappedAtlas, "capped", ids("capped-together", 6));
    const batch = await cappedBeacon.claimBatch({ lane: "capped", group: "cappers", maxRecords: 4 });
    expect(batch.work.map((w) => w.record!.sequence)).toEqual(records.slice(0, 4).map((r) => r.sequence));
    // As the participant does: the next claim goes out while the acks of finished work are on their way.
    const [claimed, acked] = await Promise.all([
      cappedBeacon.claimBatch({ lane: "capped", group: "cappers", maxRecords: 2 }),
      cappedPeerBeacon.ackBatch({ lane: "capped", group: "cappers", receipts: batch.work.slice(0, 2).map(receiptOf) }),
    ]);
    expect(acked.results.map((r) => r.outcome.case)).toEqual(["acked", "acked"]);
    expect(claimed.work.map((w) => w.record!.sequence)).toEqual(records.slice(4, 6).map((r) => r.sequence));
    // Nothing on its way: the refusal stands.
    await expectLaneError(() => cappedBeacon.claim({ lane: "capped", group: "cappers" }), Code.ResourceExhausted, "lane_capacity");
    await cappedBeacon.ackBatch({ lane: "capped", group: "cappers", receipts: [...batch.work.slice(2), ...claimed.work].map(receiptOf) });
  });
});

describe("fairness, persisted in the ledger (claims alternate between two Laneway servers)", () => {
  /** The two servers' beacon clients, alternately. */
  const alternate = (i: number) => (i % 2 === 0 ? shortBeacon : peerBeacon);

  test("with a rejected item's retry and fresh work both ready, claims alternate between them: neither starves the other", async () => {
    const [poison, ...fresh] = await publishWork(shortAtlas, "fair", ["poison", "fresh-1", "fresh-2", "fresh-3"]);
    const order: string[] = [];
    let claims = 0;
    for (;;) {
      const client = alternate(claims++);
      // Before each claim the poison item's retry is due (polling slower than the retry delay).
      const group = await inspectGroup(client, "fair", "fair");
      const p = deliveryOf(group, poison!.sequence);
      if (p !== undefined && p.state !== DeliveryState.RELEASED) await waitReleased(client, "fair", "fair", poison!.sequence);
      const work = await claimOne(client, "fair", "fair");
      if (work === undefined) throw new Error("no work although the poison item is always ready");
      order.push(`${work.record!.id}#${work.attempt}`);
      if (work.record!.sequence === poison!.sequence) await client.nack({ lane: "fair", group: "fair", ...receiptOf(work) });
      else await client.ack({ lane: "fair", group: "fair", ...receiptOf(work) });
      if (order.filter((o) => o.startsWith("fresh")).length === fresh.length) break;
    }
    // The first claim takes the poison item as fresh work; from then on the
    // turn alternates: retry, fresh, retry, fresh ...
    expect(order).toEqual(["poison#1", "poison#2", "fresh-1#1", "poison#3", "fresh-2#1", "poison#4", "fresh-3#1"]);
  });

  test("retries rotate by a persisted sequence cursor: an always-ready low-sequence item cannot starve higher-sequence work whose claim responses were lost", async () => {
    const [a, b, c] = await publishWork(shortAtlas, "rotation", ["rot-a", "rot-b", "rot-c"]);
    const first = (await claimOne(shortBeacon, "rotation", "rotors"))!;
    expect(first.record!.sequence).toBe(a!.sequence);
    // b and c are claimed, but their answers are lost: their leases expire unseen.
    const loser = responseLoser((method) => method === "ClaimBatch");
    const lossy = shortPeer.clients.client(LaneService, { token: short.tokens.beacon, interceptors: [loser.interceptor] });
    await lossy.claimBatch({ lane: "rotation", group: "rotors", maxRecords: 2 }).catch(() => undefined);
    expect((loser.lost[0] as { work: Work[] }).work.map((w) => w.record!.sequence)).toEqual([b!.sequence, c!.sequence]);
    // a is rejected: the poison item, always ready again after its retry delay.
    await shortBeacon.nack({ lane: "rotation", group: "rotors", ...receiptOf(first) });

    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const client = alternate(i);
      // Every waiting delivery is eligible before each claim: a, and whichever of b and c is not leased.
      for (const s of [a!, b!, c!].map((r) => r.sequence)) {
        const d = deliveryOf(await inspectGroup(client, "rotation", "rotors"), s);
        if (d !== undefined && d.state !== DeliveryState.RELEASED) await waitReleased(client, "rotation", "rotors", s);
      }
      const work = (await claimOne(client, "rotation", "rotors"))!;
      order.push(`${work.record!.id}#${work.attempt}`);
      if (work.record!.sequence === a!.sequence) await client.nack({ lane: "rotation", group: "rotors", ...receiptOf(work) });
      else await client.ack({ lane: "rotation", group: "rotors", ...receiptOf(work) });
    }
    // From the start of the rotation: a, then b and c (after a, wrapping), then a again.
    expect(order).toEqual(["rot-a#2", "rot-b#2", "rot-c#2", "rot-a#3"]);
  });
});

describe("waiting claims", () => {
  test("a waiting claim ends at its wait when nothing becomes eligible, answering no work", async () => {
    expect(await claimOne(beacon, "wake", "waiters", 300)).toBeUndefined();
  });

  test("a waiting claim canceled by its caller, or past its deadline, ends with canceled or deadline_exceeded and leases nothing", async () => {
    const abort = new AbortController();
    const canceled = beacon.claim({ lane: "wake", group: "waiters", wait: { seconds: 20n, nanos: 0 } }, { signal: abort.signal });
    setTimeout(() => abort.abort(), 200);
    expect(codeAndReason(await canceled.catch((e: unknown) => e)).code).toBe("Canceled");
    const timedOut = await beacon.claim({ lane: "wake", group: "waiters", wait: { seconds: 20n, nanos: 0 } }, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(codeAndReason(timedOut).code).toBe("DeadlineExceeded");
    // Neither left a lease behind: the next publication goes to the next claimer, as attempt 1.
    const [record] = await publishWork(atlas, "wake", ["wake-after-cancel"]);
    const work = (await claimOne(beacon, "wake", "waiters", 5_000))!;
    expect([work.record!.sequence, work.attempt]).toEqual([record!.sequence, 1]);
    expect((await inspectGroup(beacon, "wake", "waiters")).liveLeases).toBe(1);
    await beacon.ack({ lane: "wake", group: "waiters", ...receiptOf(work) });
  });
});
