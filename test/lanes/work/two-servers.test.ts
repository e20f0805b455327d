import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { completedCount, completionOf, inspectGroup, publishWork, receiptOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Two Laneway servers (two process memories) taking turns on one group
 * over work mixed with events: every work record is leased once, in order,
 * at attempt 1, never an event — and no claim comes back empty while work
 * is ready, also when its ledger write lost a race with the other server
 * that had just grown the group's delivery slots (the loser admits slots
 * again instead of settling with nothing).
 */

const tokens = generateTokens();
const config = buildLanesConfig({
  namespace: "turns",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "mixed", owner: "atlas", publishers: ["atlas"], groups: { takers: ["beacon"] } },
    { id: "quiet", owner: "atlas", publishers: ["atlas"], groups: { takers: ["beacon"] } },
    { id: "shared", owner: "atlas", publishers: ["atlas"], groups: { takers: ["beacon"] } },
  ],
  max_ledger: 512,
  max_pending: 512,
});

let nats: NatsServerHandle;
let one: InProcessLaneway;
let two: InProcessLaneway;
let atlas: LaneClient;
let beaconOne: LaneClient;
let beaconTwo: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  one = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  two = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  atlas = one.clients.client(LaneService, { token: tokens.atlas });
  beaconOne = one.clients.client(LaneService, { token: tokens.beacon });
  beaconTwo = two.clients.client(LaneService, { token: tokens.beacon });
});

afterAll(async () => {
  await two?.stop();
  await one?.stop();
  await nats?.remove();
});

/** Publishes `kinds` in order on `lane`; returns the work sequences and every sequence. */
async function publishKinds(lane: string, kinds: readonly RecordKind[]): Promise<{ work: bigint[]; all: bigint[] }> {
  const work: bigint[] = [];
  const all: bigint[] = [];
  for (const [i, kind] of kinds.entries()) {
    // One at a time, in order: publishWork sorts a batch, but kinds differ per record here.
    const [record] = await publishWork(atlas, lane, [`${lane}-${i}`], { kind });
    all.push(record!.sequence);
    if (kind === RecordKind.WORK) work.push(record!.sequence);
  }
  return { work, all };
}

test("two Laneway servers taking turns on one group lease every work record exactly once, whatever each read ahead", async () => {
  const kinds = Array.from({ length: 90 }, (_, i) => (i % 4 === 3 ? RecordKind.EVENT : RecordKind.WORK));
  const { work } = await publishKinds("shared", kinds);
  const leased: bigint[] = [];
  const clients = [beaconOne, beaconTwo];
  // Ends when both servers, one after the other, find nothing. A claim whose
  // ledger write raced the other server's slot growth admits slots again:
  // no claim comes back empty while work is ready.
  let empty = 0;
  let emptyWithWorkReady = 0;
  for (let turn = 0; empty < 2; turn++) {
    expect(turn).toBeLessThan(400);
    // Batches of 1, 2 and 3, each server in turn, so that each one's read-ahead goes stale in between.
    const client = clients[turn % 2]!;
    const batch = await client.claimBatch({ lane: "shared", group: "takers", maxRecords: 1 + (turn % 3) });
    empty = batch.work.length === 0 ? empty + 1 : 0;
    if (batch.work.length === 0 && leased.length < work.length) emptyWithWorkReady += 1;
    for (const w of batch.work) {
      expect(w.record!.kind).toBe(RecordKind.WORK);
      expect(w.attempt).toBe(1);
      leased.push(w.record!.sequence);
    }
    if (batch.work.length > 0) {
      const acked = await client.ackBatch({ lane: "shared", group: "takers", receipts: batch.work.map(receiptOf) });
      expect(acked.results.every((r) => r.outcome.case === "acked")).toBe(true);
    }
  }
  expect(leased).toEqual(work);
  expect(emptyWithWorkReady).toBe(0);
  const group = await inspectGroup(beaconTwo, "shared", "takers");
  expect(group.deliveries).toEqual([]);
  expect(work.map((s) => completionOf(group, s)?.attempt)).toEqual(work.map(() => 1));
  expect(completedCount(group)).toBe(work.length);
});
