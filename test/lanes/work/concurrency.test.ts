import { timestampMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { SeededRandom } from "../../helpers/seeded-random.js";
import { completedCount, completionOf, inspectGroup, leaseEnd, publishWork, receiptOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Concurrent claims and acks on one group from two Laneway servers on one
 * broker (each in this process, with its own connection, its own group
 * actor and its own cache): the group ledger's KV compare-and-set is the
 * only thing they share, so every guarantee below comes from it.
 *
 * - The same record claimed at the same instant through both servers is
 *   leased to exactly one claimer; the same receipt acked at the same
 *   instant through both is completed once (the other is a duplicate).
 * - 16 claimers (8 per server, both projects) race through 400 records
 *   with batches, random nacks and acks: no record is ever leased twice
 *   under one live lease (a record is leased again only after its nack,
 *   never before its retry was due), every record is acked exactly once
 *   (one non-duplicate ack per record), the ledger ends with all of them
 *   in its completion history, and both servers' claimers leased work.
 */

const tokens = generateTokens();
const LEASE_MS = 30_000;
const RETRY_MS = 5;
const config = buildLanesConfig({
  namespace: "concurrent",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "race", owner: "atlas", publishers: ["atlas"], groups: { racers: ["atlas", "beacon"] } },
    { id: "flood", owner: "atlas", publishers: ["atlas"], groups: { crowd: ["atlas", "beacon"] } },
  ],
  max_ledger: 512,
  max_pending: 512,
  retry_delay: `${RETRY_MS}ms`,
  max_retry_delay: `${RETRY_MS}ms`,
});

let nats: NatsServerHandle;
let one: InProcessLaneway;
let two: InProcessLaneway;
let clients: { project: string; client: LaneClient; server: string }[];

beforeAll(async () => {
  nats = await startNatsServer();
  one = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  two = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  clients = [
    { project: "atlas", client: one.clients.client(LaneService, { token: tokens.atlas }), server: "one" },
    { project: "beacon", client: one.clients.client(LaneService, { token: tokens.beacon }), server: "one" },
    { project: "atlas", client: two.clients.client(LaneService, { token: tokens.atlas }), server: "two" },
    { project: "beacon", client: two.clients.client(LaneService, { token: tokens.beacon }), server: "two" },
  ];
});

afterAll(async () => {
  await two?.stop();
  await one?.stop();
  await nats?.remove();
});

test("one record claimed at the same instant through two servers is leased once; one receipt acked at the same instant through both completes once", async () => {
  const atlasOne = clients[0]!.client;
  for (let round = 0; round < 25; round++) {
    const [record] = await publishWork(atlasOne, "race", [`race-${round}`]);
    const claims = await Promise.all(clients.map(({ client }) => client.claim({ lane: "race", group: "racers" })));
    const winners = claims.map((c, i) => [i, c.work] as const).filter(([, w]) => w !== undefined);
    expect(winners.length, `round ${round}`).toBe(1);
    const [index, work] = winners[0]!;
    expect(work!.record!.sequence).toBe(record!.sequence);
    // The holder acks through both servers at once.
    const holder = clients[index]!.project;
    const holderOne = clients.find((c) => c.project === holder && c.server === "one")!.client;
    const holderTwo = clients.find((c) => c.project === holder && c.server === "two")!.client;
    const acks = await Promise.all([holderOne.ack({ lane: "race", group: "racers", ...receiptOf(work!) }), holderTwo.ack({ lane: "race", group: "racers", ...receiptOf(work!) })]);
    expect(acks.map((a) => a.duplicate).sort()).toEqual([false, true]);
    expect(timestampMs(acks[0].ackedAt!)).toBe(timestampMs(acks[1].ackedAt!));
  }
});

test("16 claimers on two servers race through 400 records with batches and random nacks: never two live leases for one record, every record acked exactly once", async () => {
  const random = new SeededRandom(20261201);
  const records = await publishWork(clients[0]!.client, "flood", Array.from({ length: 400 }, (_, i) => `flood-${i}`), { parallel: 2 });
  const wanted = new Set(records.map((r) => r.sequence));
  /** Every lease granted, with what became of it. */
  const leases: { sequence: bigint; attempt: number; receipt: string; grantedAt: number; endsAt: number; retryAt?: number; claimer: number }[] = [];
  const firstAcks = new Map<bigint, string>();
  let duplicates = 0;

  const claimer = async (index: number) => {
    const { client } = clients[index % clients.length]!;
    let idle = 0;
    while (firstAcks.size < wanted.size && idle < 200) {
      const batch = random.chance(0.5);
      const work: Work[] = batch
        ? (await client.claimBatch({ lane: "flood", group: "crowd", maxRecords: random.int(1, 8) })).work
        : [(await client.claim({ lane: "flood", group: "crowd" })).work].filter((w): w is Work => w !== undefined);
      if (work.length === 0) {
        idle += 1;
        await new Promise((resolve) => setTimeout(resolve, 5));
        continue;
      }
      idle = 0;
      const entries = work.map((w) => {
        const entry: (typeof leases)[number] = { sequence: w.record!.sequence, attempt: w.attempt, receipt: w.receipt, grantedAt: leaseEnd(w) - LEASE_MS, endsAt: leaseEnd(w), claimer: index };
        leases.push(entry);
        return entry;
      });
      const nacks = entries.filter(() => random.chance(0.25));
      const acks = entries.filter((e) => !nacks.includes(e));
      if (nacks.length > 0) {
        const answer = await client.nackBatch({ lane: "flood", group: "crowd", receipts: nacks.map((e) => ({ sequence: e.sequence, receipt: e.receipt })) });
        answer.results.forEach((r, i) => {
          if (r.outcome.case !== "nacked") throw new Error(`nack failed: ${r.outcome.value?.reason}`);
          nacks[i]!.retryAt = timestampMs(r.outcome.value.retryAt!);
        });
      }
      if (acks.length > 0) {
        const answer = batch
          ? (await client.ackBatch({ lane: "flood", group: "crowd", receipts: acks.map((e) => ({ sequence: e.sequence, receipt: e.receipt })) })).results.map((r) => {
              if (r.outcome.case !== "acked") throw new Error(`ack failed: ${r.outcome.value?.reason}`);
              return r.outcome.value.duplicate;
            })
          : await Promise.all(acks.map(async (e) => (await client.ack({ lane: "flood", group: "crowd", sequence: e.sequence, receipt: e.receipt })).duplicate));
        answer.forEach((duplicate, i) => {
          if (duplicate) duplicates += 1;
          else {
            expect(firstAcks.has(acks[i]!.sequence), `sequence ${acks[i]!.sequence} acked twice`).toBe(false);
            firstAcks.set(acks[i]!.sequence, acks[i]!.receipt);
          }
        });
      }
    }
  };
  await Promise.all(Array.from({ length: 16 }, (_, i) => claimer(i)));

  expect(new Set(firstAcks.keys())).toEqual(wanted);
  expect(duplicates).toBe(0);
  // Per record: attempts 1, 2, 3 ... each once; each new lease only after the previous one was nacked and its retry was due.
  const bySequence = new Map<bigint, typeof leases>();
  for (const lease of leases) bySequence.set(lease.sequence, [...(bySequence.get(lease.sequence) ?? []), lease]);
  for (const [sequence, list] of bySequence) {
    list.sort((a, b) => a.attempt - b.attempt);
    expect(list.map((l) => l.attempt), `sequence ${sequence}`).toEqual(list.map((_, i) => i + 1));
    for (let i = 1; i < list.length; i++) {
      const previous = list[i - 1]!;
      expect(previous.retryAt, `sequence ${sequence} attempt ${previous.attempt} was leased again without a nack`).toBeDefined();
      expect(list[i]!.grantedAt).toBeGreaterThanOrEqual(previous.retryAt!);
    }
    // The ack that completed it used the last lease's receipt.
    expect(firstAcks.get(sequence)).toBe(list[list.length - 1]!.receipt);
  }
  const group = await inspectGroup(clients[1]!.client, "flood", "crowd");
  // Every completion left its slot; the completion history holds each record at the attempt that completed it.
  expect(group.deliveries).toEqual([]);
  expect(records.map((r) => completionOf(group, r.sequence)?.attempt)).toEqual(records.map((r) => bySequence.get(r.sequence)!.length));
  expect(completedCount(group)).toBe(400);
  expect(group.liveLeases).toBe(0);
  expect(group.cursor).toBe(records[records.length - 1]!.sequence);
  // Both projects and both servers took part: a server whose writes lose
  // tells the other, which then lets each write wait for the loser's turn
  // (docs/lanes-groups.md, "Concurrency").
  expect(new Set(leases.map((l) => clients[l.claimer % clients.length]!.project)).size).toBe(2);
  const perServer = [leases.filter((l) => l.claimer % 4 < 2).length, leases.filter((l) => l.claimer % 4 >= 2).length];
  expect(perServer.every((n) => n > 0)).toBe(true);
  console.log(`[concurrency] leases per server: one ${perServer[0]}, two ${perServer[1]}`);
});
