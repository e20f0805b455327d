/**
 * Lanes on a 3-node JetStream cluster under real network partitions.
 *
 * Three nats-server 2.9.10 nodes, each in its own network namespace on a
 * bridge (test/helpers/netns-cluster.ts); partitions are iptables rules in
 * the nodes' namespaces. Laneway runs as `laneway serve --replicas 3` with
 * the three addresses (and `--allow-unsafe-broker`: 2.9.10 is below the
 * version gate) in the root namespace.
 *
 * What the tests hold Laneway to (docs/operations.md, "Partitions"):
 * - failover to the majority: when the node Laneway is connected to is cut
 *   off from its peers while Laneway still reaches it, publishes succeed
 *   again while the partition lasts (Laneway moves to the other nodes);
 * - every call answers within the namespace's operation_timeout plus a
 *   margin, whatever the partition (the margin is a contract bound, not a
 *   speed figure: it is generous, for a busy 2-core machine);
 * - no call answers `internal`, at a partition or at its heal.
 *
 * What the tests do not claim: that nothing acknowledged is lost. On 2.9.10
 * it can be (scripts/partition-loss.ts measures it).
 */
import { createHash } from "node:crypto";

import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { streamName } from "../../src/lanes/names.js";
import { exampleLanesConfig, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { netnsUnavailable, startNetnsCluster, type NetnsCluster, type NetnsNode } from "../helpers/netns-cluster.js";
import { waitFor } from "../helpers/wait-for.js";

const unavailable = netnsUnavailable();
if (unavailable !== undefined) console.warn(`[partition] skipped: ${unavailable}`);

/** The namespace's operation_timeout in these tests. */
const OPERATION_TIMEOUT_MS = 3_000;
/** How far past operation_timeout an answer may come: event-loop and HTTP slack on a loaded machine. */
const MARGIN_MS = 3_000;
/** The client's own give-up, far beyond the bound, so that the client never hides a late answer. */
const CLIENT_GIVE_UP_MS = 60_000;
const LANE = "measurements";

interface CallRecord {
  readonly rpc: string;
  readonly ms: number;
  readonly code: Code | undefined;
  readonly reason: string | undefined;
}

let cluster: NetnsCluster;
let laneway: ChildLaneway;

beforeAll(async () => {
  if (unavailable !== undefined) return;
  cluster = await startNetnsCluster();
  laneway = await startLanewayProcess({
    natsUrl: cluster.urls.join(","),
    args: ["--replicas", "3", "--allow-unsafe-broker"],
    lanesConfig: exampleLanesConfig({ operation_timeout: `${OPERATION_TIMEOUT_MS / 1000}s`, lease: "5s" }),
  });
}, 180_000);

afterAll(async () => {
  await laneway?.remove();
  await cluster?.remove();
}, 60_000);

function payloadOf(id: string): Uint8Array {
  return Buffer.from(JSON.stringify({ id, reading: createHash("sha256").update(id).digest("hex").slice(0, 16) }), "utf8");
}

/** Runs one call, timing it and keeping its outcome. */
async function timed<T>(rpc: string, calls: CallRecord[], call: () => Promise<T>): Promise<T | undefined> {
  const started = performance.now();
  try {
    const result = await call();
    calls.push({ rpc, ms: performance.now() - started, code: undefined, reason: undefined });
    return result;
  } catch (error) {
    const failure = ConnectError.from(error);
    calls.push({ rpc, ms: performance.now() - started, code: failure.code, reason: failure.findDetails(ErrorDetailSchema)[0]?.reason });
    return undefined;
  }
}

/**
 * Publishers that retry each id with the same payload until it is
 * acknowledged, until `stop` is set; every call is recorded.
 */
function publishers(count: number, prefix: string, calls: CallRecord[], state: { stop: boolean; acknowledgedAt: number[] }) {
  const client = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  return Promise.all(
    Array.from({ length: count }, async (_, worker) => {
      for (let n = 0; !state.stop; n++) {
        const id = `${prefix}-${worker}-${n}`;
        while (!state.stop) {
          const answer = await timed("publish", calls, () =>
            client.publish({ lane: LANE, id, kind: RecordKind.EVENT, schema: "reading-v1", payload: payloadOf(id), provenance: "" }, { timeoutMs: CLIENT_GIVE_UP_MS }),
          );
          if (answer !== undefined) {
            state.acknowledgedAt.push(Date.now());
            break;
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }),
  );
}

/** The contract every recorded call keeps. */
function expectBoundedAndNeverInternal(calls: readonly CallRecord[]): void {
  const late = calls.filter((c) => c.ms > OPERATION_TIMEOUT_MS + MARGIN_MS);
  const internal = calls.filter((c) => c.code === Code.Internal || c.code === Code.Unknown);
  const summary = new Map<string, number>();
  for (const c of calls) summary.set(`${c.rpc}:${c.code === undefined ? "ok" : Code[c.code]}/${c.reason ?? ""}`, (summary.get(`${c.rpc}:${c.code === undefined ? "ok" : Code[c.code]}/${c.reason ?? ""}`) ?? 0) + 1);
  console.log(`[partition] ${calls.length} calls, slowest ${Math.round(Math.max(0, ...calls.map((c) => c.ms)))} ms:`, Object.fromEntries(summary));
  expect(late.map((c) => `${c.rpc} ${Math.round(c.ms)} ms`)).toEqual([]);
  expect(internal.map((c) => `${c.rpc} ${c.reason ?? ""}`)).toEqual([]);
}

async function lanewayNode(): Promise<NetnsNode> {
  return waitFor(() => cluster.nodeOfConnection("laneway"), { timeoutMs: 30_000, intervalMs: 200, what: "Laneway's connection on a node" });
}

describe.skipIf(unavailable !== undefined)("lanes on a partitioned 3-node cluster (nats-server in network namespaces)", () => {
  it("follows the majority: with its node cut off from its peers, publishes succeed again while the partition lasts", async () => {
    const calls: CallRecord[] = [];
    const state = { stop: false, acknowledgedAt: [] as number[] };
    const running = publishers(4, "failover", calls, state);
    try {
      await waitFor(() => state.acknowledgedAt.length >= 20, { timeoutMs: 60_000, what: "publishes before the partition" });
      const cut = await lanewayNode();
      await cluster.cutFromPeers(cut);
      const cutAt = Date.now();
      // Publishes succeed again during the partition: Laneway left the cut node.
      await waitFor(() => state.acknowledgedAt.filter((t) => t > cutAt + 1_000).length >= 20, { timeoutMs: 60_000, intervalMs: 100, what: "publishes acknowledged during the partition" });
      const now = await lanewayNode();
      expect(now.name).not.toBe(cut.name);
      console.log(`[partition] publishing resumed ${(Math.min(...state.acknowledgedAt.filter((t) => t > cutAt + 1_000)) - cutAt) / 1000} s after the cut (of ${cut.name}; Laneway now on ${now.name})`);
    } finally {
      state.stop = true;
      await running;
      await cluster.healAll();
    }
    expectBoundedAndNeverInternal(calls);
  }, 150_000);

  it("answers every publish, claim, ack and replay within operation_timeout plus a margin while its node is isolated", async () => {
    await cluster.waitReady();
    const calls: CallRecord[] = [];
    const state = { stop: false, acknowledgedAt: [] as number[] };
    const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
    const readers = (async () => {
      while (!state.stop) {
        await timed("replay", calls, () => beacon.replay({ lane: LANE, cursor: 0n, maxEvents: 50 }, { timeoutMs: CLIENT_GIVE_UP_MS }));
        const claimed = await timed("claim", calls, () => beacon.claim({ lane: LANE, group: "summarizers" }, { timeoutMs: CLIENT_GIVE_UP_MS }));
        const work = claimed?.work;
        if (work?.record !== undefined) {
          await timed("ack", calls, () => beacon.ack({ lane: LANE, group: "summarizers", sequence: work.record!.sequence, receipt: work.receipt }, { timeoutMs: CLIENT_GIVE_UP_MS }));
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const running = publishers(4, "deadline", calls, state);
    try {
      await waitFor(() => state.acknowledgedAt.length >= 20, { timeoutMs: 60_000, what: "publishes before the isolation" });
      const isolated = await lanewayNode();
      await cluster.isolate(isolated);
      const isolatedAt = Date.now();
      // Calls go on through the isolation and Laneway's move, then the heal.
      await waitFor(() => state.acknowledgedAt.filter((t) => t > isolatedAt + 1_000).length >= 10, { timeoutMs: 60_000, intervalMs: 100, what: "publishes acknowledged while the node is isolated" });
      await cluster.heal(isolated);
      const healedAt = Date.now();
      await waitFor(() => state.acknowledgedAt.filter((t) => t > healedAt + 1_000).length >= 10, { timeoutMs: 60_000, intervalMs: 100, what: "publishes acknowledged after the heal" });
    } finally {
      state.stop = true;
      await Promise.all([running, readers]);
      await cluster.healAll();
    }
    expect(calls.some((c) => c.rpc === "claim")).toBe(true);
    expectBoundedAndNeverInternal(calls);
  }, 200_000);

  it("answers no call internal when the stream leader is cut off and healed", async () => {
    await cluster.waitReady();
    const calls: CallRecord[] = [];
    const state = { stop: false, acknowledgedAt: [] as number[] };
    const running = publishers(4, "heal", calls, state);
    try {
      await waitFor(() => state.acknowledgedAt.length >= 20, { timeoutMs: 60_000, what: "publishes before the partition" });
      for (let round = 0; round < 2; round++) {
        const leaderName = await waitFor(() => cluster.streamLeader(streamName("commons", LANE)), {
          timeoutMs: 30_000,
          what: "the lane stream's leader",
        });
        const leader = cluster.node(leaderName);
        console.log(`[partition] round ${round}: cutting the lane stream's leader ${leader.name}; Laneway on ${(await lanewayNode()).name}`);
        await cluster.cutFromPeers(leader);
        const cutAt = Date.now();
        // The partition is exercised: calls answered (any outcome) after the cut, past its first second.
        const callsBefore = calls.length;
        await waitFor(() => Date.now() > cutAt + 1_000 && calls.length >= callsBefore + 20, { timeoutMs: 60_000, intervalMs: 100, what: "calls answered during the leader's partition" });
        await cluster.heal(leader);
        const healedAt = Date.now();
        await waitFor(() => state.acknowledgedAt.filter((t) => t > healedAt + 1_000).length >= 10, { timeoutMs: 60_000, intervalMs: 100, what: "publishes after the heal" });
      }
    } catch (error) {
      console.log(laneway.stdout.filter((l) => /NATS|nats/.test(l)).slice(-30).join("\n"));
      console.log(calls.slice(-20));
      throw error;
    } finally {
      state.stop = true;
      await running;
      await cluster.healAll();
    }
    expectBoundedAndNeverInternal(calls);
  }, 300_000);
});

