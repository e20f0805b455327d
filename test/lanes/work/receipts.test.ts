import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayProcess, type ChildLaneway } from "../../helpers/laneway.js";
import { expectLaneError, newToken, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { claimOne, completionOf, inspectGroup, ledgerValue, publishWork, receiptOf, waitReleased } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * What a receipt can still do once its delivery is completed, against a
 * `laneway serve` child process (so that a restart forgets everything but
 * the broker): a repeated ack with the receipt that completed a delivery is
 * a duplicate for at least ack_retention (15 s here) — also after a restart
 * — answered with its history bucket's last acknowledgement time; after
 * that, and for any other receipt, holder, group, lane, sequence or
 * attempt, ack, nack and renew answer lane_stale; a project outside the
 * group is lane_forbidden. Receipts are never in the stored state.
 */

const ACK_RETENTION_MS = 15_000;
const tokens = generateTokens();
const cinderToken = newToken();
const config = buildLanesConfig({
  namespace: "receipts",
  projects: ["atlas", "beacon", "cinder"],
  lanes: [
    { id: "jobs", owner: "atlas", publishers: ["atlas"], groups: { workers: ["atlas", "beacon"], auditors: ["beacon"] }, recoverers: { workers: ["beacon"] } },
    { id: "other", owner: "atlas", publishers: ["atlas"], groups: { workers: ["atlas", "beacon"] } },
  ],
  lease: "1s",
  ack_retention: "15s",
});

let nats: NatsServerHandle;
let laneway: ChildLaneway;
let atlas: LaneClient;
let beacon: LaneClient;
let cinder: LaneClient;

async function start(): Promise<void> {
  laneway = await startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens, env: { CINDER_LANE_TOKEN: cinderToken } });
  atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: tokens.beacon });
  cinder = laneway.clients.client(LaneService, { token: cinderToken });
}

beforeAll(async () => {
  nats = await startNatsServer();
  await start();
}, 120_000);

afterAll(async () => {
  await laneway?.remove();
  await nats?.remove();
});

const workers = { lane: "jobs", group: "workers" };

/** Every receipt operation of `work` at `where` answers lane_stale (one by one, and in batches). */
async function expectStale(client: LaneClient, where: { lane: string; group: string }, receipt: { sequence: bigint; receipt: string }, what: string): Promise<void> {
  for (const call of [() => client.ack({ ...where, ...receipt }), () => client.nack({ ...where, ...receipt }), () => client.renew({ ...where, ...receipt })]) {
    const error = await expectLaneError(call, Code.Aborted, "lane_stale").catch((e: unknown) => {
      throw new Error(`${what}: ${String(e)}`);
    });
    expect(error.rawMessage).not.toContain(receipt.receipt);
  }
  const batch = await client.ackBatch({ ...where, receipts: [receipt] });
  expect(batch.results.map((r) => (r.outcome.case === "error" ? r.outcome.value.reason : r.outcome.case)), what).toEqual(["lane_stale"]);
}

test("a completed delivery: the completing receipt is a duplicate (also after a restart); every other receipt, holder, group, lane, sequence or attempt is stale; a project outside the group is forbidden", async () => {
  const [first, second] = await publishWork(atlas, "jobs", ["done-1", "done-2"]);
  // done-1: attempt 1 lapses, attempt 2 completes it.
  const attempt1 = (await claimOne(beacon, "jobs", "workers"))!;
  expect(attempt1.record!.sequence).toBe(first!.sequence);
  await waitReleased(beacon, "jobs", "workers", first!.sequence);
  const attempt2 = (await claimOne(beacon, "jobs", "workers"))!;
  expect([attempt2.record!.sequence, attempt2.attempt]).toEqual([first!.sequence, 2]);
  const completed = await beacon.ack({ ...workers, ...receiptOf(attempt2) });
  expect(completed.duplicate).toBe(false);
  const ackedAt = timestampMs(completed.ackedAt!);
  // done-2, claimed by atlas and completed; auditors got their own delivery of done-1.
  const byAtlas = (await claimOne(atlas, "jobs", "workers"))!;
  expect(byAtlas.record!.sequence).toBe(second!.sequence);
  await atlas.ack({ ...workers, ...receiptOf(byAtlas) });
  const audited = (await claimOne(beacon, "jobs", "auditors"))!;
  expect(audited.record!.sequence).toBe(first!.sequence);

  const duplicate = async (client: LaneClient, work: Work, original: number) => {
    const again = await client.ack({ ...workers, ...receiptOf(work) });
    expect(again.duplicate).toBe(true);
    const late = timestampMs(again.ackedAt!) - original;
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThanOrEqual(ACK_RETENTION_MS / 16);
  };
  await duplicate(beacon, attempt2, ackedAt);
  expect(completionOf(await inspectGroup(beacon, "jobs", "workers"), first!.sequence)?.attempt).toBe(2);

  // The table of receipts that no longer own anything.
  await expectStale(beacon, workers, receiptOf(attempt1), "the receipt of attempt 1 after attempt 2 completed");
  await expectStale(atlas, workers, receiptOf(attempt2), "another member presenting the completing receipt");
  await expectStale(beacon, workers, receiptOf(byAtlas), "another member presenting atlas's completing receipt");
  await expectStale(beacon, { lane: "jobs", group: "auditors" }, receiptOf(attempt2), "the receipt in another group of the lane");
  await expectStale(beacon, { lane: "other", group: "workers" }, receiptOf(attempt2), "the receipt on another lane's group of the same name");
  await expectStale(beacon, workers, { sequence: second!.sequence, receipt: attempt2.receipt }, "the receipt with another sequence");
  await expectStale(beacon, workers, { sequence: first!.sequence, receipt: audited.receipt }, "another group's receipt for the same sequence");
  await expectStale(beacon, workers, { sequence: first!.sequence, receipt: "a".repeat(64) }, "a guessed receipt");
  // A project outside the group is refused before any receipt is looked at.
  await expectLaneError(() => cinder.ack({ ...workers, ...receiptOf(attempt2) }), Code.PermissionDenied, "lane_forbidden");
  // The auditors' delivery is untouched by all of that.
  expect((await beacon.ack({ lane: "jobs", group: "auditors", ...receiptOf(audited) })).duplicate).toBe(false);

  // The stored state holds no receipt, in any form a reader could use.
  const stored = Buffer.from((await ledgerValue(nats.url, "receipts", "jobs", "workers"))!, "latin1");
  for (const work of [attempt1, attempt2, byAtlas]) {
    expect(stored.includes(Buffer.from(work.receipt))).toBe(false);
    expect(stored.includes(Buffer.from(work.receipt, "hex"))).toBe(false);
  }

  // A restarted Laneway knows nothing but the broker: the duplicate is still a duplicate, the stale still stale.
  await laneway.kill("SIGKILL");
  await laneway.remove();
  await start();
  const [afterRestart, alsoAfter] = [await beacon.ack({ ...workers, ...receiptOf(attempt2) }).catch((e: unknown) => e), await atlas.ack({ ...workers, ...receiptOf(byAtlas) }).catch((e: unknown) => e)];
  if (Date.now() - ackedAt < ACK_RETENTION_MS) {
    for (const answer of [afterRestart, alsoAfter]) expect((answer as { duplicate: boolean }).duplicate).toBe(true);
  } else {
    // Only when the restart outlasted ack_retention (a slow machine): the completions left the history.
    for (const answer of [afterRestart, alsoAfter]) expect(answer).toBeInstanceOf(Error);
  }
  await expectStale(beacon, workers, receiptOf(attempt1), "attempt 1 after a restart");

  // Once ack_retention has passed, the completion leaves the history: its receipt is stale too.
  await waitFor(async () => completionOf(await inspectGroup(beacon, "jobs", "workers"), first!.sequence) === undefined, {
    timeoutMs: 60_000,
    intervalMs: 200,
    what: "the completion to leave the history",
  });
  expect(Date.now() - ackedAt).toBeGreaterThanOrEqual(ACK_RETENTION_MS);
  await expectStale(beacon, workers, receiptOf(attempt2), "the completing receipt after ack_retention");
  await expectStale(atlas, workers, receiptOf(byAtlas), "atlas's completing receipt after ack_retention");
}, 120_000);
