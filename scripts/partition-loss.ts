/**
 * Measures what network partitions cost a replicated lane: acknowledged
 * records lost, duplicated or misplaced, on the installed nats-server.
 *
 *   node --import tsx scripts/partition-loss.ts [--seconds-per-fault 8] [--rounds 3] [--publishers 6] [--variants with,without]
 *
 * Needs root (network namespaces; test/helpers/netns-cluster.ts). For each
 * variant, a fresh 3-node cluster in namespaces and the lanes core
 * (`--replicas 3`) over one broker connection listing the three nodes; six
 * publishers retry each id with the same payload until it is acknowledged.
 * Each round: the lane stream's leader is cut off from its peers (clients
 * still reach it), healed, then one node (the one Laneway's connection is
 * on) is fully isolated, healed. After the last heal and a settling time,
 * the whole lane is replayed from cursor 0 (page retries until it reads)
 * and compared with what was acknowledged:
 * - lost: acknowledged ids missing from the replay;
 * - duplicated: ids at more than one sequence;
 * - misplaced: ids at another sequence than the one acknowledged;
 * - double-acknowledged sequences: one sequence acknowledged to two ids;
 * - payload mismatches and ids never sent (must be 0).
 *
 * Variants: `with` is Laneway as shipped (the connection follows the
 * majority, src/nats/majority-follower.ts); `without` turns that off
 * (`followMajority: false`), as Laneway was before it. Not a suite
 * assertion: the figures go to docs/operations.md.
 */
import { createHash } from "node:crypto";
import { parseArgs } from "node:util";

import { openLanesCore, parseLanesConfig, streamName, type LaneRecord } from "../src/lanes/index.js";
import { BrokerConnection } from "../src/nats/index.js";
import { exampleLanesConfig } from "../src/lanes/index.js";
import { startNetnsCluster, netnsUnavailable, type NetnsCluster } from "../test/helpers/netns-cluster.js";

const { values } = parseArgs({
  options: {
    "seconds-per-fault": { type: "string", default: "8" },
    rounds: { type: "string", default: "3" },
    publishers: { type: "string", default: "6" },
    variants: { type: "string", default: "without,with" },
    kill: { type: "boolean", default: false },
  },
});
const FAULT_MS = Number(values["seconds-per-fault"]) * 1000;
const ROUNDS = Number(values.rounds);
const PUBLISHERS = Number(values.publishers);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function payloadOf(id: string): Uint8Array {
  return Buffer.from(JSON.stringify({ id, reading: createHash("sha256").update(id).digest("hex").slice(0, 24) }), "utf8");
}

interface Figures {
  variant: string;
  seconds: number;
  faults: number;
  acknowledged: number;
  lost: number;
  duplicated: number;
  misplaced: number;
  doubleAcknowledgedSequences: number;
  payloadMismatches: number;
  neverSent: number;
  failedCalls: Record<string, number>;
  slowestCallMs: number;
  longestOutageMs: number;
  /** Per fault: seconds from its start to the first acknowledgement during it ("-" when none), and from its heal to the first after it. */
  faultTimeline: string[];
}

async function measure(variant: "with" | "without"): Promise<Figures> {
  const cluster: NetnsCluster = await startNetnsCluster();
  const started = Date.now();
  const env = { ATLAS_LANE_TOKEN: "a".repeat(40), BEACON_LANE_TOKEN: "b".repeat(40) };
  const config = parseLanesConfig(JSON.stringify(exampleLanesConfig({ namespace: `loss${variant}` })), env);
  const broker = await BrokerConnection.open({
    servers: cluster.urls,
    name: "laneway",
    initialConnect: "retry",
    ...(variant === "without" ? { followMajority: false as const } : {}),
  });
  const core = await openLanesCore({ config, broker, replicas: 3 });
  const stream = streamName(config.namespace, "measurements");
  const acked = new Map<string, number>();
  const bySequence = new Map<number, Set<string>>();
  const failures: Record<string, number> = {};
  let slowest = 0;
  let lastAck = Date.now();
  let longestOutage = 0;
  let stop = false;
  const workers = Array.from({ length: PUBLISHERS }, async (_, worker) => {
    for (let n = 0; !stop; n++) {
      const id = `${variant}-${worker}-${n}`;
      for (;;) {
        const t0 = performance.now();
        try {
          const out = await core.publish({ project: "atlas", lane: "measurements", publication: { id, kind: "event", schema: "reading-v1", payload: payloadOf(id), provenance: "" } });
          slowest = Math.max(slowest, performance.now() - t0);
          acked.set(id, out.record.sequence);
          ackTimes.push(Date.now());
          const ids = bySequence.get(out.record.sequence) ?? new Set<string>();
          ids.add(id);
          bySequence.set(out.record.sequence, ids);
          const now = Date.now();
          longestOutage = Math.max(longestOutage, now - lastAck);
          lastAck = now;
          break;
        } catch (error) {
          slowest = Math.max(slowest, performance.now() - t0);
          const reason = (error as { reason?: string }).reason ?? (error as Error).name;
          failures[reason] = (failures[reason] ?? 0) + 1;
          if (stop) break;
          await sleep(100);
        }
      }
    }
  });
  let faults = 0;
  const ackTimes: number[] = [];
  const timeline: { what: string; at: number; healedAt: number }[] = [];
  const fault = async (what: string, apply: () => Promise<void>, undo: () => Promise<void>) => {
    const at = Date.now();
    await apply();
    faults++;
    await sleep(FAULT_MS);
    const healedAt = Date.now();
    await undo();
    timeline.push({ what, at, healedAt });
    await sleep(FAULT_MS);
  };
  await sleep(5_000);
  for (let round = 0; round < ROUNDS; round++) {
    const leaderName = await cluster.streamLeader(stream);
    const leader = leaderName ? cluster.node(leaderName) : cluster.nodes[round % 3]!;
    const on0 = await cluster.nodeOfConnection("laneway");
    console.log(`[${variant}] round ${round}: leader ${leader.name} cut off from its peers (Laneway on ${on0?.name ?? "?"})`);
    await fault(`leader ${leader.name} cut${on0 === leader ? " (Laneway's node)" : ""}`, () => cluster.cutFromPeers(leader), () => cluster.heal(leader));
    const on = (await cluster.nodeOfConnection("laneway")) ?? cluster.nodes[(round + 1) % 3]!;
    console.log(`[${variant}] round ${round}: ${on.name} (Laneway's node) isolated`);
    await fault(`${on.name} isolated (Laneway's node)`, () => cluster.isolate(on), () => cluster.heal(on));
    if (values.kill) {
      const other = cluster.nodes.find((n) => n !== on && n.running)!;
      console.log(`[${variant}] round ${round}: ${other.name} SIGKILLed`);
      await fault(`${other.name} killed`, () => other.kill(), () => other.start());
    }
  }
  stop = true;
  await Promise.all(workers);
  const seconds = (Date.now() - started) / 1000;
  await cluster.healAll();
  await sleep(15_000);

  // Replay from 0.
  const events: LaneRecord[] = [];
  let cursor = 0;
  for (let attempts = 0; attempts < 600; ) {
    try {
      const page = await core.replay({ project: "atlas", lane: "measurements", cursor, maxEvents: 0 });
      events.push(...page.events);
      if (page.cursor >= page.lastSequence || (page.examined === 0 && page.events.length === 0)) break;
      cursor = page.cursor;
    } catch {
      attempts++;
      await sleep(500);
    }
  }
  const seen = new Map<string, number[]>();
  let payloadMismatches = 0;
  let neverSent = 0;
  for (const e of events) {
    seen.set(e.id, [...(seen.get(e.id) ?? []), e.sequence]);
    if (!acked.has(e.id) && !/^(with|without)-\d+-\d+$/.test(e.id)) neverSent++;
    if (Buffer.compare(Buffer.from(e.payload), Buffer.from(payloadOf(e.id))) !== 0) payloadMismatches++;
  }
  let lost = 0;
  let misplaced = 0;
  for (const [id, sequence] of acked) {
    const at = seen.get(id);
    if (at === undefined) lost++;
    else if (!at.includes(sequence)) misplaced++;
  }
  const duplicated = [...seen.values()].filter((s) => s.length > 1).length;
  const doubleAcknowledgedSequences = [...bySequence.values()].filter((ids) => ids.size > 1).length;
  await core.close();
  await broker.close();
  await cluster.remove();
  return {
    variant,
    seconds: Math.round(seconds),
    faults,
    acknowledged: acked.size,
    lost,
    duplicated,
    misplaced,
    doubleAcknowledgedSequences,
    payloadMismatches,
    neverSent,
    failedCalls: failures,
    slowestCallMs: Math.round(slowest),
    longestOutageMs: longestOutage,
    faultTimeline: timeline.map(({ what, at, healedAt }) => {
      // Past the first second: an answer in flight at the fault's start does not count as a recovery.
      const during = ackTimes.find((t) => t > at + 1_000 && t < healedAt);
      const after = ackTimes.find((t) => t > healedAt);
      return `${what}: ${during === undefined ? "-" : ((during - at) / 1000).toFixed(1)} / ${after === undefined ? "-" : ((after - healedAt) / 1000).toFixed(1)}`;
    }),
  };
}

const why = netnsUnavailable();
if (why !== undefined) {
  console.error(`partition-loss: ${why}`);
  process.exit(2);
}
const results: Figures[] = [];
for (const variant of values.variants!.split(",") as ("with" | "without")[]) {
  const figures = await measure(variant);
  console.log(JSON.stringify(figures));
  results.push(figures);
}
console.table(results.map(({ failedCalls, faultTimeline, ...rest }) => ({ ...rest, failedCalls: JSON.stringify(failedCalls) })));
for (const r of results) console.log(`${r.variant}: seconds to the first acknowledgement during each fault / after its heal:\n  ${r.faultTimeline.join("\n  ")}`);
process.exit(0);
