import type { Interceptor } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, type RenewBatchResponse } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { Participant, type ClaimedWork } from "../../../src/participant/index.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { jsonPayload, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { callHolder, completionOf, deliveriesView, inspectGroup, stateOf } from "../../helpers/work.js";
import { RecordKind } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * The participant library (the specification's `laneparticipant`) against
 * a real Laneway on a test-owned broker, with 8 s leases (the participant
 * renews at half of what is left, so a renewal has 4 s to get through on a
 * busy machine) and nacked work parked for an hour (so every nack is
 * visible in the ledger):
 *
 * - only explicitly registered (schema, publisher) pairs run; unhandled and
 *   unauthorized work is nacked and never executed; handlers that return
 *   are acked, handlers that throw are nacked;
 * - a handler is bounded by its lease: when its lease ends (its renewals
 *   could not get through) its AbortSignal aborts and the work is nacked;
 *   while renewals get through, a handler may run past one lease length;
 * - stop(): no more claims; what still runs after the grace is aborted and
 *   nacked, and run() returns once everything is settled.
 */

const config = buildLanesConfig({
  namespace: "participant",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "tasks", owner: "atlas", publishers: ["atlas", "beacon"], groups: { workers: ["beacon"] } },
    { id: "bounded", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
    { id: "renewed", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
    { id: "stopping", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] } },
  ],
  lease: "8s",
  retry_delay: "1h",
  max_retry_delay: "1h",
});

const LEASE_MS = 8_000;

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

async function publish(client: LaneClient, lane: string, id: string, schema: string): Promise<bigint> {
  const response = await client.publish({ lane, id, kind: RecordKind.WORK, schema, payload: jsonPayload({ id }) });
  return response.record!.sequence;
}

/** Waits until the group's deliveries reach these states (by sequence). */
async function waitStates(lane: string, expected: Map<bigint, DeliveryState>): Promise<void> {
  await waitFor(
    async () => {
      const g = await inspectGroup(beacon, lane, "workers");
      return [...expected].every(([s, state]) => stateOf(g, s) === state);
    },
    { timeoutMs: 30_000, intervalMs: 50, what: `the deliveries of ${lane} to settle` },
  );
}

test("only registered (schema, publisher) pairs run: unhandled and unauthorized work is nacked unexecuted; returning handlers are acked, throwing ones nacked", async () => {
  const ran: string[] = [];
  const handled = [await publish(atlas, "tasks", "summary-1", "summary-v1"), await publish(atlas, "tasks", "summary-2", "summary-v1")];
  const failing = await publish(atlas, "tasks", "summary-fails", "summary-v1");
  const unhandled = await publish(atlas, "tasks", "other-schema", "other-v1");
  const unauthorized = await publish(beacon, "tasks", "from-beacon", "summary-v1");
  const participant = new Participant({ client: beacon, lane: "tasks", group: "workers", concurrency: 4, waitMs: 200 });
  participant.handle("summary-v1", "atlas", async (work: ClaimedWork) => {
    ran.push(work.id);
    expect(work.project).toBe("atlas");
    expect(JSON.parse(Buffer.from(work.payload).toString())).toEqual({ id: work.id });
    if (work.id === "summary-fails") throw new Error("the handler failed");
  });
  const running = participant.run();
  await waitStates(
    "tasks",
    new Map([
      [handled[0]!, DeliveryState.ACKED],
      [handled[1]!, DeliveryState.ACKED],
      [failing, DeliveryState.RETRY_SCHEDULED],
      [unhandled, DeliveryState.RETRY_SCHEDULED],
      [unauthorized, DeliveryState.RETRY_SCHEDULED],
    ]),
  );
  await participant.stop();
  await running;
  expect(ran.sort()).toEqual(["summary-1", "summary-2", "summary-fails"]);
  expect(participant.stats).toMatchObject({ claimed: 5, acked: 2, nacked: 3, inFlight: 0 });
  const g = await inspectGroup(beacon, "tasks", "workers");
  // Each was claimed once: the nacked three wait for a retry, the two acked were completed at attempt 1.
  expect(deliveriesView(g).map(([s, , attempt]) => [s, attempt])).toEqual([failing, unhandled, unauthorized].map((s) => [Number(s), 1]));
  expect(handled.map((s) => completionOf(g, s)?.attempt)).toEqual([1, 1]);
});

test("a handler that outlives its lease (its renewals cannot get through) sees its AbortSignal abort, and the work is nacked", async () => {
  const sequence = await publish(atlas, "bounded", "slow", "slow-v1");
  const holder = callHolder(["RenewBatch"]);
  const client = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, interceptors: [holder.interceptor] });
  const participant = new Participant({ client, lane: "bounded", group: "workers", concurrency: 1, waitMs: 200 });
  let seen: { aborted: boolean; reason: string } | undefined;
  participant.handle("slow-v1", "atlas", (_work, signal) => {
    return new Promise<void>((resolve) => {
      signal.addEventListener("abort", () => {
        seen = { aborted: signal.aborted, reason: String((signal.reason as Error)?.message) };
        resolve();
      });
    });
  });
  const running = participant.run();
  await waitStates("bounded", new Map([[sequence, DeliveryState.RETRY_SCHEDULED]]));
  expect(holder.held()).toBeGreaterThan(0);
  expect(seen).toEqual({ aborted: true, reason: "the lease ended" });
  holder.release();
  await participant.stop();
  await running;
  expect(participant.stats).toMatchObject({ claimed: 1, acked: 0, nacked: 1 });
  expect(deliveriesView(await inspectGroup(beacon, "bounded", "workers"))).toEqual([[Number(sequence), "beacon", 1, "RETRY_SCHEDULED"]]);
});

test("while its renewals get through, a handler runs past one lease length and is acked once, never redelivered", async () => {
  const sequence = await publish(atlas, "renewed", "long", "long-v1");
  // Counts the renewals the server granted to the participant.
  let renewed = 0;
  const counter: Interceptor = (next) => async (req) => {
    const response = await next(req);
    if (req.method.name === "RenewBatch") renewed += (response.message as RenewBatchResponse).results.filter((r) => r.outcome.case === "renewed").length;
    return response;
  };
  const client = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, interceptors: [counter] });
  const participant = new Participant({ client, lane: "renewed", group: "workers", concurrency: 2, waitMs: 200 });
  let runs = 0;
  participant.handle("long-v1", "atlas", async (_work, signal) => {
    runs += 1;
    // Past the end of its first lease (granted before the handler started) and across two renewals,
    // checking the signal as a well-behaved handler does.
    const started = Date.now();
    while (Date.now() <= started + LEASE_MS || renewed < 2) {
      if (signal.aborted) throw new Error("aborted");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
  const running = participant.run();
  await waitStates("renewed", new Map([[sequence, DeliveryState.ACKED]]));
  await participant.stop();
  await running;
  expect(runs).toBe(1);
  expect(renewed).toBeGreaterThanOrEqual(2);
  const g = await inspectGroup(beacon, "renewed", "workers");
  expect([g.deliveries, completionOf(g, sequence)?.attempt]).toEqual([[], 1]);
});

test("stop() ends claiming; a handler still running after the grace is aborted and nacked, and run() returns once it is settled", async () => {
  const sequence = await publish(atlas, "stopping", "stuck", "stuck-v1");
  const participant = new Participant({ client: beacon, lane: "stopping", group: "workers", concurrency: 1, waitMs: 200 });
  let started!: () => void;
  const startedPromise = new Promise<void>((resolve) => (started = resolve));
  participant.handle("stuck-v1", "atlas", (_work, signal) => {
    started();
    return new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
  });
  const running = participant.run();
  await startedPromise;
  await participant.stop(50);
  await running;
  expect(participant.stats).toMatchObject({ claimed: 1, acked: 0, nacked: 1, inFlight: 0 });
  expect(deliveriesView(await inspectGroup(beacon, "stopping", "workers"))).toEqual([[Number(sequence), "beacon", 1, "RETRY_SCHEDULED"]]);
  // Nothing claims any more: new work stays unclaimed.
  await publish(atlas, "stopping", "after-stop", "stuck-v1");
  expect((await inspectGroup(beacon, "stopping", "workers")).deliveries).toHaveLength(1);
});
