import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { claimOne, codeAndReason, deliveryOf, inspectGroup, publishWork, receiptOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * A long-lived Laneway keeps the envelopes of records it recently read, so
 * that claims of retries need not read them again. After it has read more
 * than that memory holds (4,096 records), claims of retries must still
 * succeed: two retries claimed together — one it remembers as its oldest
 * entry, one it must read again — are both leased with their records.
 *
 * Two Laneway servers on one namespace: `reader` claims everything the
 * test wants it to remember, `other` claims the record `reader` must not
 * have seen. Leases of an hour keep both first deliveries leased while
 * `reader` reads 4,096 more records (however long that takes on a busy
 * machine), and nacks then make both wait for a retry.
 */

const tokens = generateTokens();
const config = buildLanesConfig({
  namespace: "cache",
  projects: ["atlas", "beacon"],
  lanes: [{ id: "long", owner: "atlas", publishers: ["atlas"], groups: { readers: ["beacon"] } }],
  lease: "1h",
  retry_delay: "1ms",
  max_retry_delay: "1ms",
  ack_retention: "1s",
  max_ledger: 512,
  max_pending: 512,
});

let nats: NatsServerHandle;
let reader: InProcessLaneway;
let other: InProcessLaneway;
let atlas: LaneClient;
let readerBeacon: LaneClient;
let otherBeacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  reader = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  other = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  atlas = reader.clients.client(LaneService, { token: tokens.atlas });
  readerBeacon = reader.clients.client(LaneService, { token: tokens.beacon });
  otherBeacon = other.clients.client(LaneService, { token: tokens.beacon });
});

afterAll(async () => {
  await other?.stop();
  await reader?.stop();
  await nats?.remove();
});

test("after a Laneway has read more records than it remembers, two retries claimed together — one remembered, one read again — are both leased", async () => {
  const [remembered, unseen] = await publishWork(atlas, "long", ["remembered", "unseen"]);
  // `reader` reads `remembered` first (its oldest memory); `other` takes `unseen`.
  const first = (await claimOne(readerBeacon, "long", "readers"))!;
  expect(first.record!.sequence).toBe(remembered!.sequence);
  const second = (await claimOne(otherBeacon, "long", "readers"))!;
  expect(second.record!.sequence).toBe(unseen!.sequence);
  // `reader` learns the group's state (so its next claims start after `unseen`, which it never reads).
  expect((await inspectGroup(readerBeacon, "long", "readers")).cursor).toBe(unseen!.sequence);
  // `reader` then reads 4,095 more records (claimed and acked at once), filling its memory.
  await publishWork(atlas, "long", Array.from({ length: 4_095 }, (_, i) => `filler-${i}`), { parallel: 4 });
  let filled = 0;
  while (filled < 4_095) {
    let work;
    try {
      work = (await readerBeacon.claimBatch({ lane: "long", group: "readers", maxRecords: 64 })).work;
    } catch (error) {
      // The ledger is full of acknowledgements until ack_retention (1 s) prunes them.
      expect(codeAndReason(error)).toEqual({ code: "ResourceExhausted", reason: "lane_capacity" });
      await new Promise((resolve) => setTimeout(resolve, 200));
      continue;
    }
    expect(work.length).toBeGreaterThan(0);
    const answer = await readerBeacon.ackBatch({ lane: "long", group: "readers", receipts: work.map(receiptOf) });
    expect(answer.results.every((r) => r.outcome.case === "acked")).toBe(true);
    filled += work.length;
  }
  // Both first deliveries are nacked; both wait for a retry.
  await readerBeacon.nack({ lane: "long", group: "readers", ...receiptOf(first) });
  await otherBeacon.nack({ lane: "long", group: "readers", ...receiptOf(second) });
  await waitFor(
    async () => {
      const g = await inspectGroup(readerBeacon, "long", "readers");
      return [remembered!, unseen!].every((r) => deliveryOf(g, r.sequence)?.state === DeliveryState.RELEASED);
    },
    { timeoutMs: 90_000, intervalMs: 250, what: "both nacked deliveries to be eligible again" },
  );
  const retried = await readerBeacon.claimBatch({ lane: "long", group: "readers", maxRecords: 2 });
  expect(retried.work.map((w) => [w.record!.id, w.attempt])).toEqual([
    ["remembered", 2],
    ["unseen", 2],
  ]);
  await readerBeacon.ackBatch({ lane: "long", group: "readers", receipts: retried.work.map(receiptOf) });
}, 180_000);
