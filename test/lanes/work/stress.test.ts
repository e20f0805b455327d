import { afterAll, expect, test } from "vitest";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens } from "../../helpers/laneway.js";
import { type LaneClient } from "../../helpers/lanes.js";
import { removeAllNatsClusters, startNatsCluster } from "../../helpers/nats-cluster.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { inspectGroup, publishWork } from "../../helpers/work.js";
import { checkAudit, finalInspection, Fleet, newAuditLog, runStress } from "../../helpers/work-stress.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * At least once, and never two live leases: three `laneway serve` child
 * processes on one broker, 32 concurrent claimers (ClaimBatch and
 * AckBatch/NackBatch through the generated client, both projects), random
 * nacks, and a random SIGKILL of one Laneway process every few seconds or
 * every few thousand acks, whichever comes first (restarted each time). Claimers whose process died go on through
 * another one, retrying their settlements there (acks are idempotent).
 *
 * The test keeps an audit log — every lease it was granted (sequence,
 * attempt, receipt, lease interval, holder) and every successful ack — and
 * checks afterwards that every record was acked, that no two live leases
 * ever existed for one record, and that no ack succeeded with a stale
 * receipt (see test/helpers/work-stress.ts). The same test runs on a
 * 3-node JetStream cluster (`--replicas 3`) with one node SIGKILLed midway
 * when asked to (LANEWAY_STRESS_TARGET=cluster, see below).
 *
 * Durations are printed, never asserted.
 */

/**
 * The run targets a single broker by default. `LANEWAY_STRESS_TARGET=cluster`
 * runs the same test on a 3-node JetStream cluster of the previous issue
 * (`--replicas 3`) with one node SIGKILLed halfway, instead. It is not part
 * of the default suite, for two reasons:
 *
 * - The pinned nats-server 2.9.10 does not guarantee what the invariants
 *   need on a cluster: a replicated stream checks
 *   `Nats-Expected-Last-Subject-Sequence` (the KV compare-and-set) only
 *   before proposing the write, not as part of the Raft commit, so two
 *   concurrent updates quoting the same revision can both be accepted
 *   (nats-server issue #4320, fixed in 2.9.21). A double lease found there
 *   is the broker's, and could make a default run fail at random.
 * - It is heavy on two shared cores: 1,000 items took about 110 s, 10,000
 *   over 13 minutes. It defaults to 1,000 items (LANEWAY_STRESS_ITEMS).
 *
 * On a single server the check is serialized and the invariants hold.
 * The default run (10,000 items, batches of 16) took about 21 s on a quiet
 * two-core machine, and a faster machine can end it before a timer's first kill: the
 * kills also follow the acks (`killEveryAcks`).
 */
const CLUSTER = process.env.LANEWAY_STRESS_TARGET === "cluster";
const ITEMS = Number(process.env.LANEWAY_STRESS_ITEMS ?? (CLUSTER ? 1_000 : 10_000));
const LEASE_MS = 3_000;
const bounds = { retryDelayMs: 20, maxRetryDelayMs: 200 };
const tokens = generateTokens();
const config = (namespace: string) => buildLanesConfig({
  namespace,
  projects: ["atlas", "beacon"],
  lanes: [{ id: "jobs", owner: "atlas", publishers: ["atlas"], groups: { workers: ["atlas", "beacon"] } }],
  lease: "3s",
  retry_delay: `${bounds.retryDelayMs}ms`,
  max_retry_delay: `${bounds.maxRetryDelayMs}ms`,
  ack_retention: "2s",
  max_pending: 512,
  max_ledger: 512,
});

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await removeAllNatsClusters();
}, 120_000);

async function stress(options: { label: string; fleet: Fleet; items: number; midway?: { fraction: number; action: () => Promise<void> } }) {
  const { fleet, label } = options;
  const started = Date.now();
  const publisher = fleet.client(0, tokens.atlas)!;
  const records = await publishWork(publisher, "jobs", Array.from({ length: options.items }, (_, i) => `item-${i}`), { parallel: 4 });
  const sequences = new Set(records.map((r) => r.sequence));
  expect(sequences.size).toBe(options.items);
  const published = Date.now();
  const audit = newAuditLog();
  const { acked, stalled, lostAnswers } = await runStress({
    fleet,
    lane: "jobs",
    group: "workers",
    tokens: [tokens.atlas, tokens.beacon],
    sequences,
    claimers: 32,
    batch: 16,
    nackChance: 0.1,
    leaseMs: LEASE_MS,
    seed: 0x5eed + options.items,
    audit,
    // Every few seconds, and at the latest every 1,500–3,000 acks: a fast
    // run meets its kills too (the first comes before 30% are acked).
    killEveryMs: [2_000, 5_000],
    killEveryAcks: [Math.ceil(options.items * 0.15), Math.ceil(options.items * 0.3)],
    ...(options.midway ? { midway: options.midway } : {}),
    stallMs: 90_000,
  });
  const finished = Date.now();
  const { violations, redelivered, maxAttempt } = checkAudit(audit, sequences, bounds, lostAnswers);
  const failures = [...audit.failures].map(([k, v]) => `${k} ×${v}`).join(", ");
  console.log(
    `[stress ${label}] ${options.items} items: published in ${((published - started) / 1000).toFixed(1)} s, all acked ${((finished - published) / 1000).toFixed(1)} s later; ` +
      `${audit.leases.length} leases, ${redelivered} records leased more than once (highest attempt ${maxAttempt}), ${audit.acks.length} successful acks, ` +
      `${audit.staleAcks} stale acks refused, ${audit.staleNacks} stale nacks refused, ${lostAnswers.size} acks whose answer was lost and pruned before the retry, ${fleet.kills} Laneway SIGKILLs; failed calls: ${failures || "none"}`,
  );
  if (stalled) {
    const client: LaneClient = fleet.any().clients.client(LaneService, { token: tokens.beacon });
    const group = await inspectGroup(client, "jobs", "workers");
    for (const sequence of [...sequences].filter((s) => !acked.has(s)).slice(0, 20)) {
      const leases = audit.leases.filter((l) => l.sequence === sequence).map((l) => `#${l.attempt} ${l.receipt.slice(0, 6)} [${l.grantedAt}..${l.expiresAt}] nack ${JSON.stringify(l.nack)}`);
      const stale = audit.staleAckEvents.filter((e) => e.sequence === sequence).map((e) => `${e.receipt.slice(0, 6)} at ${e.answeredAt} lost-before ${e.afterLostAnswer}`);
      const d = group.deliveries.find((x) => x.sequence === sequence);
      console.log(`[stress ${label}] unacked ${sequence}: leases ${leases.join("; ")}; stale acks ${stale.join("; ")}; ledger ${d ? `${d.project} #${d.attempt} state ${d.state}` : "absent"} (cursor ${group.cursor})`);
    }
  }
  expect(stalled, `no ack for 90 s; ${acked.size} of ${options.items} acked`).toBe(false);
  expect(violations.slice(0, 20)).toEqual([]);
  // Transport failures while processes die are expected; a failure the server itself reports as internal is not.
  expect([...audit.failures.keys()].filter((k) => k.includes("internal error"))).toEqual([]);
  // Nothing leaves retention here (168 h): a claim never meets lane_cursor.
  expect([...audit.failures.keys()].filter((k) => k.includes("lane_cursor"))).toEqual([]);
  expect(acked.size + lostAnswers.size).toBe(options.items);
  expect(fleet.kills).toBeGreaterThan(0);
  // The ledger holds no unfinished delivery: every completion left its slot.
  const group = await finalInspection(fleet, tokens.beacon);
  expect(group.liveLeases).toBe(0);
  expect(group.deliveries).toEqual([]);
  expect(group.cursor).toBe(records[records.length - 1]!.sequence);
}

test(`three Laneway processes on ${CLUSTER ? "a 3-node JetStream cluster (one node SIGKILLed midway)" : "one broker"}, 32 claimers, ${ITEMS} items, random nacks and SIGKILLs: every item acked, never two live leases for one delivery, no stale ack succeeded`, async () => {
  if (!CLUSTER) {
    const nats: NatsServerHandle = await startNatsServer();
    cleanups.push(() => nats.remove());
    const fleet = new Fleet({ natsUrl: nats.url, lanesConfig: config("stress"), tokens });
    cleanups.push(() => fleet.remove());
    await fleet.start(3);
    await stress({ label: "single broker", fleet, items: ITEMS });
    return;
  }
  const cluster = await startNatsCluster();
  const fleet = new Fleet({ natsUrl: cluster.urls.join(","), args: ["--replicas", "3", "--allow-unsafe-broker"], lanesConfig: config("stress-cluster"), tokens });
  cleanups.push(() => fleet.remove());
  await fleet.start(3);
  const victim = cluster.nodes[1]!;
  await stress({
    label: "3-node cluster",
    fleet,
    items: ITEMS,
    midway: {
      fraction: 0.5,
      action: async () => {
        console.log(`[stress 3-node cluster] SIGKILL of node ${victim.name} at ${new Date().toISOString()}`);
        await victim.kill("SIGKILL");
      },
    },
  });
  expect(victim.running).toBe(false);
}, 1_200_000);
