import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, type AckBatchResponse, type ClaimBatchRequest, type ClaimBatchResponse } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { Participant } from "../../../src/participant/index.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { completionOf, deliveriesView, inspectGroup, publishWork, receiptOf, stateOf, waitOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";
import { parsePrometheusText, sampleValue } from "../../helpers/prometheus-text.js";

/**
 * ClaimBatch carrying `acks`: a worker that finished its work completes it
 * and asks for more in one call, through the generated client against a
 * real Laneway on a test-owned broker.
 *
 * - The acks are applied before the claim: with max_pending 3 and three
 *   live leases, a claim alone is refused, and the same claim carrying the
 *   three acks leases the next three.
 * - Each ack has its own result, in request order, as AckBatch gives it: a
 *   completion, `duplicate` for a repeated ack, `lane_stale` for a receipt
 *   that owns nothing. A call carrying acks answers without waiting for
 *   work (its `wait` of 60 s would outlast the test).
 * - The call's rules hold for its acks: more than 64, or a malformed
 *   receipt, is `invalid_argument`; a project that is not a member is
 *   `permission_denied`; neither applies any of them.
 * - The participant sends its acks with its claims; when such a call's
 *   answer is lost (the server applied it), it sends the acks again with
 *   AckBatch, where each answers `duplicate`, and every item is acked once.
 */

const config = buildLanesConfig({
  namespace: "claimacks",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "carry", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
    { id: "rules", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
    { id: "lost", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
  ],
  lease: "30s",
  max_pending: 3,
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

/** A well-formed receipt that no lease was ever given. */
const FORGED = "ab".repeat(32);

/** The lanes' receipt counters for lane `carry` as /metrics shows them. */
async function carryReceipts(): Promise<{ acked: number; stale: number }> {
  const families = parsePrometheusText(await (await fetch(`${laneway.url}/metrics`)).text());
  return {
    acked: sampleValue(families, "laneway_group_receipts_total", { lane: "carry", group: "workers", operation: "ack" }),
    stale: sampleValue(families, "laneway_group_receipt_refusals_total", { operation: "ack", reason: "lane_stale" }),
  };
}

test("a ClaimBatch carrying acks completes them before it claims: at max_pending, the slots they free serve the claim", async () => {
  const counted = await carryReceipts();
  const records = await publishWork(atlas, "carry", ["c1", "c2", "c3", "c4", "c5", "c6"]);
  const first = await beacon.claimBatch({ lane: "carry", group: "workers", maxRecords: 3 });
  expect(first.work.map((w) => w.record!.sequence)).toEqual(records.slice(0, 3).map((r) => r.sequence));
  // Three live leases: a claim alone finds the group full.
  await expectLaneError(() => beacon.claimBatch({ lane: "carry", group: "workers", maxRecords: 3 }), Code.ResourceExhausted, "lane_capacity");

  const next = await beacon.claimBatch({ lane: "carry", group: "workers", maxRecords: 3, wait: waitOf(60_000), acks: first.work.map(receiptOf) });
  expect(next.ackResults.map((r) => r.outcome.case)).toEqual(["acked", "acked", "acked"]);
  expect(next.ackResults.map((r) => (r.outcome.case === "acked" ? r.outcome.value.duplicate : undefined))).toEqual([false, false, false]);
  expect(next.work.map((w) => w.record!.sequence)).toEqual(records.slice(3).map((r) => r.sequence));
  expect(next.work.map((w) => w.attempt)).toEqual([1, 1, 1]);

  const group = await inspectGroup(beacon, "carry", "workers");
  expect(records.slice(0, 3).map((r) => completionOf(group, r.sequence)?.attempt)).toEqual([1, 1, 1]);
  expect(records.slice(3).map((r) => stateOf(group, r.sequence))).toEqual([DeliveryState.LEASED, DeliveryState.LEASED, DeliveryState.LEASED]);

  // Results keep the request's order: a repeated ack, a completion, a receipt that owns nothing, a completion.
  const last = await beacon.claimBatch({
    lane: "carry",
    group: "workers",
    maxRecords: 3,
    wait: waitOf(60_000),
    acks: [receiptOf(first.work[0]!), receiptOf(next.work[0]!), { sequence: next.work[1]!.record!.sequence, receipt: FORGED }, receiptOf(next.work[2]!)],
  });
  expect(last.ackResults.map((r) => (r.outcome.case === "acked" ? (r.outcome.value.duplicate ? "duplicate" : "acked") : r.outcome.value?.reason))).toEqual([
    "duplicate",
    "acked",
    "lane_stale",
    "acked",
  ]);
  expect(last.ackResults[2]!.outcome.case === "error" && last.ackResults[2]!.outcome.value.code).toBe("aborted");
  expect(last.ackResults[2]!.outcome.case === "error" && last.ackResults[2]!.outcome.value.message).not.toContain(FORGED);
  // Nothing else is eligible (the forged receipt left c5 leased): it answered at once, with nothing.
  expect(last.work).toEqual([]);
  const after = await inspectGroup(beacon, "carry", "workers");
  expect(deliveriesView(after)).toEqual([[Number(next.work[1]!.record!.sequence), "beacon", 1, "LEASED"]]);
  // The metrics count the acks a ClaimBatch carried as AckBatch's: six accepted (a duplicate too), one stale.
  expect(await carryReceipts()).toEqual({ acked: counted.acked + 6, stale: counted.stale + 1 });
});

test("a ClaimBatch's acks keep the call's rules: more than 64, a malformed receipt or a caller outside the group is refused, and none is applied", async () => {
  const [record] = await publishWork(atlas, "rules", ["r1"]);
  const claimed = await beacon.claimBatch({ lane: "rules", group: "workers", maxRecords: 1 });
  const receipt = receiptOf(claimed.work[0]!);
  await expectLaneError(
    () => beacon.claimBatch({ lane: "rules", group: "workers", maxRecords: 1, acks: Array.from({ length: 65 }, () => receipt) }),
    Code.InvalidArgument,
    "lane_invalid",
  );
  await expectLaneError(
    () => beacon.claimBatch({ lane: "rules", group: "workers", maxRecords: 1, acks: [receipt, { sequence: receipt.sequence, receipt: "not-a-receipt" }] }),
    Code.InvalidArgument,
    "lane_invalid",
  );
  const foreign = await expectLaneError(() => atlas.claimBatch({ lane: "rules", group: "workers", maxRecords: 1, acks: [receipt] }), Code.PermissionDenied, "lane_forbidden");
  expect(foreign.message).not.toContain(receipt.receipt);
  expect(stateOf(await inspectGroup(beacon, "rules", "workers"), record!.sequence)).toBe(DeliveryState.LEASED);
  // The receipt still owns its delivery: a valid call completes it.
  const done = await beacon.claimBatch({ lane: "rules", group: "workers", maxRecords: 1, acks: [receipt] });
  expect(done.ackResults.map((r) => r.outcome.case)).toEqual(["acked"]);
  expect(completionOf(await inspectGroup(beacon, "rules", "workers"), record!.sequence)?.attempt).toBe(1);
});

test("the participant's acks ride with its claims; when such a call's answer is lost, they go again with AckBatch and answer duplicate", async () => {
  // Three first: the claim that carries their acks finds nothing more to lease, so its lost answer strands no lease.
  const records = await publishWork(atlas, "lost", ["l0", "l1", "l2"]);
  let carried = 0;
  let lostAcks = 0;
  const resent: AckBatchResponse[] = [];
  // Lets the first ClaimBatch that carries acks reach the server, then loses its answer.
  const loser: Interceptor = (next) => async (req) => {
    const response = await next(req);
    if (req.method.name === "ClaimBatch" && (req.message as unknown as ClaimBatchRequest).acks.length > 0) {
      carried += 1;
      if (carried === 1) {
        lostAcks = (response.message as ClaimBatchResponse).ackResults.filter((r) => r.outcome.case === "acked").length;
        throw new ConnectError("the response was lost on its way to the client", Code.Unavailable);
      }
    }
    if (req.method.name === "AckBatch") resent.push(response.message as AckBatchResponse);
    return response;
  };
  const client = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, interceptors: [loser] });
  const participant = new Participant({ client, lane: "lost", group: "workers", concurrency: 3, waitMs: 200 });
  const ran = new Map<string, number>();
  participant.handle("job-v1", "atlas", async (work) => {
    ran.set(work.id, (ran.get(work.id) ?? 0) + 1);
  });
  const running = participant.run();
  await waitFor(() => lostAcks > 0, { timeoutMs: 30_000, intervalMs: 20, what: "a claim carrying acks to be lost" });
  records.push(...(await publishWork(atlas, "lost", Array.from({ length: 6 }, (_, i) => `l${i + 3}`))));
  await waitFor(
    async () => {
      const group = await inspectGroup(beacon, "lost", "workers");
      return records.every((r) => completionOf(group, r.sequence) !== undefined) && participant.stats.acked === records.length;
    },
    { timeoutMs: 30_000, intervalMs: 50, what: "every item to be acked" },
  );
  await participant.stop();
  await running;
  expect(carried).toBeGreaterThanOrEqual(1);
  // The lost call had applied the first three acks: sent again, each answered duplicate, and was counted once.
  expect(lostAcks).toBe(3);
  const duplicates = resent.flatMap((r) => r.results).filter((r) => r.outcome.case === "acked" && r.outcome.value.duplicate).length;
  expect(duplicates).toBe(lostAcks);
  expect(participant.stats).toMatchObject({ claimed: records.length, acked: records.length, nacked: 0, inFlight: 0 });
  expect([...ran.values()]).toEqual(records.map(() => 1));
  const group = await inspectGroup(beacon, "lost", "workers");
  expect(records.map((r) => completionOf(group, r.sequence)?.attempt)).toEqual(records.map(() => 1));
  expect(deliveriesView(group)).toEqual([]);
});
