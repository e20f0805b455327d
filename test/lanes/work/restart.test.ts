import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, type GroupState } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, reasonOf, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { claimOne, completionOf, inspectGroup, publishWork, receiptOf, workOn, whenBack } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Work groups across restarts, Laneway in this process on a test-owned
 * nats-server:
 *
 * - a Laneway stopped and started again on the same broker finds the group
 *   exactly as it was (cursor, deliveries, slots, revision): acks stay
 *   idempotent, leases taken before the restart are still owned by their
 *   receipts, nacked work is retried, fresh work continues;
 * - while the broker is down (stopped or SIGKILLed) every group call fails
 *   at once with `lane_unavailable` (no queued success); once it is back
 *   the ledger and its leases are intact and the receipts still work;
 * - a broker that stops answering makes group calls end at
 *   operation_timeout with `lane_timeout`.
 */

const tokens = generateTokens();
/** The default ack_retention (24 h): a duplicate's time is its history bucket's last, at most 1/16 of it after the original. */
const ACK_RETENTION_MS = 24 * 3_600_000;
const config = buildLanesConfig({
  namespace: "restart",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "durable", owner: "atlas", publishers: ["atlas"], groups: { keepers: ["atlas", "beacon"] }, recoverers: { keepers: ["beacon"] } },
    { id: "outage", owner: "atlas", publishers: ["atlas"], groups: { survivors: ["beacon"] }, recoverers: { survivors: ["beacon"] } },
  ],
  operation_timeout: "2s",
  retry_delay: "100ms",
  max_retry_delay: "100ms",
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

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

/** Everything inspection shows, as comparable values. */
function stateOf(group: GroupState) {
  return {
    revision: group.revision,
    cursor: group.cursor,
    slots: group.slots,
    liveLeases: group.liveLeases,
    // What is stored (the inspection's state also says whether a lease or a retry is due by now).
    deliveries: group.deliveries.map((d) => [d.sequence, d.project, d.attempt, d.retryAt ? "retry" : "leased", d.leaseExpiresAt && timestampMs(d.leaseExpiresAt), d.retryAt && timestampMs(d.retryAt)]),
    completions: group.completions.map((b) => [
      timestampMs(b.firstAckedAt!),
      timestampMs(b.lastAckedAt!),
      b.completed,
      b.ranges.map((r) => [r.first, r.last]),
      b.retried.map((r) => [r.sequence, r.attempt]),
    ]),
  };
}


test("a restarted Laneway finds the group as it was: leases taken before still belong to their receipts, acks stay idempotent, nacked work is retried, fresh work continues", async () => {
  const records = await publishWork(atlas, "durable", ["d-1", "d-2", "d-3", "d-4"]);
  const acked = (await claimOne(beacon, "durable", "keepers"))!;
  const nacked = (await claimOne(atlas, "durable", "keepers"))!;
  const held = (await claimOne(beacon, "durable", "keepers"))!;
  const first = await beacon.ack({ lane: "durable", group: "keepers", ...receiptOf(acked) });
  await atlas.nack({ lane: "durable", group: "keepers", ...receiptOf(nacked) });
  const before = stateOf(await inspectGroup(beacon, "durable", "keepers"));
  expect(before.slots).toBeGreaterThanOrEqual(3);

  await laneway.stop();
  await start();

  expect(stateOf(await inspectGroup(beacon, "durable", "keepers"))).toEqual(before);
  // The lease taken before the restart is still owned by its receipt.
  const renewed = await beacon.renew({ lane: "durable", group: "keepers", ...receiptOf(held) });
  expect(timestampMs(renewed.leaseExpiresAt!)).toBeGreaterThanOrEqual(timestampMs(held.leaseExpiresAt!));
  expect((await beacon.ack({ lane: "durable", group: "keepers", ...receiptOf(held) })).duplicate).toBe(false);
  // The ack before the restart is still a duplicate of itself, answered with its history bucket's last acknowledgement (held's, just now).
  const repeat = await beacon.ack({ lane: "durable", group: "keepers", ...receiptOf(acked) });
  expect(repeat.duplicate).toBe(true);
  expect(timestampMs(repeat.ackedAt!)).toBeGreaterThanOrEqual(timestampMs(first.ackedAt!));
  expect(timestampMs(repeat.ackedAt!) - timestampMs(first.ackedAt!)).toBeLessThanOrEqual(ACK_RETENTION_MS / 16);
  // The nacked delivery comes back as attempt 2 (to whichever member claims), the fresh one as attempt 1.
  const claimed = [(await claimOne(atlas, "durable", "keepers", 10_000))!, (await claimOne(atlas, "durable", "keepers", 10_000))!];
  expect(claimed.map((w) => [w.record!.id, w.attempt]).sort()).toEqual([
    ["d-2", 2],
    ["d-4", 1],
  ]);
  await expectLaneError(() => atlas.ack({ lane: "durable", group: "keepers", ...receiptOf(nacked) }), Code.Aborted, "lane_stale");
  await atlas.ackBatch({ lane: "durable", group: "keepers", receipts: claimed.map(receiptOf) });
  const after = await inspectGroup(beacon, "durable", "keepers");
  expect(after.deliveries).toEqual([]);
  expect(records.map((r) => completionOf(after, r.sequence)?.attempt)).toEqual(records.map((_, i) => (i === 1 ? 2 : 1)));
});

test("while the broker is down every group call fails at once with lane_unavailable; after it restarts (stopped or SIGKILLed) the ledger and its leases are intact", async () => {
  await publishWork(atlas, "outage", ["o-1", "o-2", "o-3"]);
  const leased = (await claimOne(beacon, "outage", "survivors"))!;
  const before = stateOf(await inspectGroup(beacon, "outage", "survivors"));

  for (const stop of [() => nats.stop(), () => nats.kill("SIGKILL")]) {
    await stop();
    const calls: [string, () => Promise<unknown>][] = [
      ["claim", () => beacon.claim({ lane: "outage", group: "survivors" })],
      ["claim batch", () => beacon.claimBatch({ lane: "outage", group: "survivors", maxRecords: 2 })],
      ["renew", () => beacon.renew({ lane: "outage", group: "survivors", ...receiptOf(leased) })],
      ["ack", () => beacon.ack({ lane: "outage", group: "survivors", ...receiptOf(leased) })],
      ["nack", () => beacon.nack({ lane: "outage", group: "survivors", ...receiptOf(leased) })],
      ["inspect", () => beacon.inspectGroup({ lane: "outage", group: "survivors" })],
      ["recover", () => beacon.recoverGroup({ lane: "outage", group: "survivors", id: "outage", revision: before.revision, cursorThrough: before.cursor })],
    ];
    for (const [what, call] of calls) {
      const error = await expectLaneError(call, Code.Unavailable, "lane_unavailable").catch((e: unknown) => {
        throw new Error(`${what}: ${String(e)}`);
      });
      expect(error.rawMessage).not.toContain(String(nats.port));
      expect(error.rawMessage).not.toContain(leased.receipt);
    }
    await nats.restart();
    // Back: the ledger is exactly as before (nothing was half-applied), and the lease is still owned.
    expect(stateOf(await whenBack(() => inspectGroup(beacon, "outage", "survivors")))).toEqual(before);
  }
  const renewed = await whenBack(() => beacon.renew({ lane: "outage", group: "survivors", ...receiptOf(leased) }));
  expect(timestampMs(renewed.leaseExpiresAt!)).toBeGreaterThanOrEqual(timestampMs(leased.leaseExpiresAt!));
  expect((await beacon.ack({ lane: "outage", group: "survivors", ...receiptOf(leased) })).duplicate).toBe(false);
  const rest = await beacon.claimBatch({ lane: "outage", group: "survivors", maxRecords: 8 });
  expect(rest.work.map((w) => [w.record!.id, w.attempt])).toEqual([
    ["o-2", 1],
    ["o-3", 1],
  ]);
  await beacon.ackBatch({ lane: "outage", group: "survivors", receipts: rest.work.map(receiptOf) });
});

test("a waiting claim in flight when the broker goes away ends with an error or no work, never with a lease; after the broker returns, new work is claimed once", async () => {
  const waiting = beacon.claim({ lane: "outage", group: "survivors", wait: { seconds: 3n, nanos: 0 } }).then(
    (r) => ({ work: r.work }),
    (e: unknown) => ({ error: reasonOf(ConnectError.from(e)) }),
  );
  await new Promise((resolve) => setTimeout(resolve, 200));
  await nats.stop();
  const outcome = await waiting;
  expect("error" in outcome ? ["lane_unavailable", "lane_timeout"].includes(outcome.error ?? "") : outcome.work === undefined).toBe(true);
  await nats.restart();
  const { record } = await whenBack(() => atlas.publish(workOn("outage", "o-4")));
  const work = (await whenBack(() => claimOne(beacon, "outage", "survivors", 5_000)))!;
  expect([work.record!.sequence, work.attempt]).toEqual([record!.sequence, 1]);
  await beacon.ack({ lane: "outage", group: "survivors", ...receiptOf(work) });
  expect(await claimOne(beacon, "outage", "survivors")).toBeUndefined();
});

test("a broker that stops answering makes claims and acks end at operation_timeout with lane_timeout; after it resumes the same receipt acks", async () => {
  const [record] = await publishWork(atlas, "outage", ["o-5"]);
  const work = (await claimOne(beacon, "outage", "survivors"))!;
  expect(work.record!.sequence).toBe(record!.sequence);
  await nats.pause();
  try {
    await expectLaneError(() => beacon.ack({ lane: "outage", group: "survivors", ...receiptOf(work) }), Code.DeadlineExceeded, "lane_timeout");
    await expectLaneError(() => beacon.claim({ lane: "outage", group: "survivors" }), Code.DeadlineExceeded, "lane_timeout");
  } finally {
    await nats.resume();
  }
  // The ack may or may not have reached the ledger before the broker stopped: retrying it settles it either way.
  const acked = await whenBack(() => beacon.ack({ lane: "outage", group: "survivors", ...receiptOf(work) }));
  expect(typeof acked.duplicate).toBe("boolean");
  // Completed once, at attempt 1.
  expect(completionOf(await inspectGroup(beacon, "outage", "survivors"), record!.sequence)?.attempt).toBe(1);
});
