import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, type Work } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayProcess, type ChildLaneway } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { claimOne, deliveryOf, inspectGroup, publishWork, receiptOf, responseLoser, waitReleased } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Durable retry/fresh fairness across independent Laneway processes: two
 * `laneway serve` child processes on one broker take turns serving the
 * claims of one group, and one of them is SIGKILLed and restarted in the
 * middle. Whatever a process remembers dies with it, so the order the
 * claims follow can only come from the persisted ledger:
 *
 * - with a rejected item's retry and fresh work both ready, claims
 *   alternate retry, fresh, retry, fresh (a persisted turn), so polling
 *   slower than the retry delay lets neither starve the other;
 * - retries rotate by a persisted sequence cursor: an always-ready
 *   low-sequence item cannot starve higher-sequence work whose claim
 *   responses were lost.
 */

const tokens = generateTokens();
const config = buildLanesConfig({
  namespace: "fairness",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "turns", owner: "atlas", publishers: ["atlas"], groups: { fair: ["beacon"] } },
    { id: "rotation", owner: "atlas", publishers: ["atlas"], groups: { rotors: ["beacon"] } },
  ],
  lease: "1s",
  retry_delay: "100ms",
  max_retry_delay: "100ms",
});

let nats: NatsServerHandle;
const processes: ChildLaneway[] = [];

async function laneway(): Promise<ChildLaneway> {
  const child = await startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  processes.push(child);
  return child;
}

/** The two serving processes; either may be replaced by a restart. */
const serving: ChildLaneway[] = [];
const beaconOf = (i: number): LaneClient => serving[i % 2]!.clients.client(LaneService, { token: tokens.beacon });
const atlasClient = (): LaneClient => serving[0]!.clients.client(LaneService, { token: tokens.atlas });

/** SIGKILLs one serving process and starts another in its place. */
async function killAndRestart(i: number): Promise<void> {
  const victim = serving[i]!;
  const exit = await victim.kill("SIGKILL");
  expect(exit.signal).toBe("SIGKILL");
  serving[i] = await laneway();
}

beforeAll(async () => {
  nats = await startNatsServer();
  serving.push(...(await Promise.all([laneway(), laneway()])));
}, 120_000);

afterAll(async () => {
  await Promise.all(processes.map((p) => p.remove()));
  await nats?.remove();
});

/** Waits until every delivery of `sequences` that is not acknowledged is eligible again. */
async function waitAllReleased(client: LaneClient, lane: string, group: string, sequences: readonly bigint[]): Promise<void> {
  const g = await inspectGroup(client, lane, group);
  for (const s of sequences) {
    const d = deliveryOf(g, s);
    if (d !== undefined && d.state !== DeliveryState.ACKED && d.state !== DeliveryState.RELEASED) await waitReleased(client, lane, group, s);
  }
}

test("claims served alternately by two processes, one SIGKILLed and restarted midway, alternate between a rejected item's retry and fresh work", async () => {
  const [poison, ...fresh] = await publishWork(atlasClient(), "turns", ["poison", "fresh-1", "fresh-2", "fresh-3"]);
  const order: string[] = [];
  for (let i = 0; order.filter((o) => o.startsWith("fresh")).length < fresh.length; i++) {
    if (i === 3) await killAndRestart(0);
    if (i > 12) throw new Error(`fresh work starved: ${order.join(", ")}`);
    const client = beaconOf(i);
    await waitAllReleased(client, "turns", "fair", [poison!.sequence]);
    const work = (await claimOne(client, "turns", "fair"))!;
    order.push(`${work.record!.id}#${work.attempt}`);
    if (work.record!.sequence === poison!.sequence) await client.nack({ lane: "turns", group: "fair", ...receiptOf(work) });
    else await client.ack({ lane: "turns", group: "fair", ...receiptOf(work) });
  }
  expect(order).toEqual(["poison#1", "poison#2", "fresh-1#1", "poison#3", "fresh-2#1", "poison#4", "fresh-3#1"]);
}, 120_000);

test("retries rotate across processes: an always-ready low-sequence item cannot starve higher-sequence work whose claim responses were lost, also after a SIGKILL", async () => {
  const [a, b, c] = await publishWork(atlasClient(), "rotation", ["rot-a", "rot-b", "rot-c"]);
  const first = (await claimOne(beaconOf(0), "rotation", "rotors"))!;
  expect(first.record!.sequence).toBe(a!.sequence);
  const loser = responseLoser((method) => method === "ClaimBatch");
  const lossy = serving[1]!.clients.client(LaneService, { token: tokens.beacon, interceptors: [loser.interceptor] });
  await lossy.claimBatch({ lane: "rotation", group: "rotors", maxRecords: 2 }).catch(() => undefined);
  expect((loser.lost[0] as { work: Work[] }).work.map((w) => w.record!.sequence)).toEqual([b!.sequence, c!.sequence]);
  await beaconOf(0).nack({ lane: "rotation", group: "rotors", ...receiptOf(first) });
  const order: string[] = [];
  for (let i = 0; i < 4; i++) {
    if (i === 2) await killAndRestart(1);
    const client = beaconOf(i);
    await waitAllReleased(client, "rotation", "rotors", [a!.sequence, b!.sequence, c!.sequence]);
    const work = (await claimOne(client, "rotation", "rotors"))!;
    order.push(`${work.record!.id}#${work.attempt}`);
    if (work.record!.sequence === a!.sequence) await client.nack({ lane: "rotation", group: "rotors", ...receiptOf(work) });
    else await client.ack({ lane: "rotation", group: "rotors", ...receiptOf(work) });
  }
  expect(order).toEqual(["rot-a#2", "rot-b#2", "rot-c#2", "rot-a#3"]);
}, 120_000);
