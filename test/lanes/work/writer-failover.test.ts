import { afterEach, expect, test } from "vitest";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { decodeWriterLease, writerLeaseKey } from "../../../src/lanes/group-forwarding.js";
import { metaBucket } from "../../../src/lanes/names.js";
import { generateTokens, type ChildLaneway } from "../../helpers/laneway.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { publishWork } from "../../helpers/work.js";
import { checkAudit, finalInspection, Fleet, newAuditLog, runStress } from "../../helpers/work-stress.js";

/**
 * One writer per shared group (docs/lanes-groups.md, "Concurrency"): three
 * `laneway serve` processes work one group through 32 claimers (ClaimBatch,
 * AckBatch and NackBatch through the generated client), so one of them
 * takes the group's writer lease and the others forward their operations
 * to it. Once part of the work is acknowledged, the writer's process is
 * SIGKILLed (and a new process started in its place; the claimers that
 * used the dead one go on through the next). The forwarders' requests find
 * no writer, they write the group themselves, and once the dead writer's
 * lease has ended one of the living processes takes it.
 *
 * The second test SIGSTOPs the writer's process instead ("When the writer
 * does not answer"): the forwarders' requests go unanswered for 3 s, they
 * write the group themselves (their claims applied again, their acks
 * answered lane_unavailable and sent again), and work is acknowledged
 * while the writer stands still (on a busy machine the writer's lease may
 * lapse just before the stop and another process take it, so that nothing
 * is forwarded to the stopped one: the run says which happened). Then it
 * is continued, finds its view of the group stale, and the run finishes
 * with all three.
 *
 * The audit (test/helpers/work-stress.ts) checks afterwards that every
 * record was acked, that no two live leases ever existed for one record,
 * and that no ack succeeded with a stale receipt.
 */

const ITEMS = 3_000;
const LEASE_MS = 3_000;
const bounds = { retryDelayMs: 20, maxRetryDelayMs: 200 };
const tokens = generateTokens();
const namespace = "failover";
const config = buildLanesConfig({
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

let nats: NatsServerHandle | undefined;
let fleet: Fleet | undefined;
afterEach(async () => {
  await fleet?.remove();
  await nats?.remove();
  fleet = undefined;
  nats = undefined;
}, 120_000);

/** The process that holds the group's writer lease now, as the lease key says (undefined: none, or ended). */
async function leaseHolder(url: string): Promise<string | undefined> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const kv = await new Kvm(nc).open(metaBucket(namespace), { bindOnly: true });
    const entry = await kv.get(writerLeaseKey("jobs", "workers"));
    if (entry === null || entry.operation !== "PUT") return undefined;
    const lease = decodeWriterLease(entry.value);
    return lease !== undefined && lease.until > Date.now() ? lease.process : undefined;
  } finally {
    await nc.close();
  }
}

/** When a Laneway log line was written (epoch ms; NaN for a line that is not a log record). */
function loggedAt(line: string): number {
  try {
    return Date.parse((JSON.parse(line) as { time?: string }).time ?? "");
  } catch {
    return Number.NaN;
  }
}

/** Whether a Laneway process logged that it took the group's writer lease under this process id. */
const tookLease = (laneway: ChildLaneway, process: string) =>
  laneway.stderr.some((line) => line.includes("writes the work group") && line.includes(process));

/** The slot whose process holds the group's writer lease, once one does (the processes contend for the group). */
async function writerSlot(url: string, f: Fleet): Promise<{ holder: string; index: number }> {
  return waitFor(async () => {
    const holder = await leaseHolder(url);
    if (holder === undefined) return undefined;
    const index = [0, 1, 2].find((i) => {
      const p = f.serving(i);
      return p !== undefined && tookLease(p, holder);
    });
    return index === undefined ? undefined : { holder, index };
  }, { timeoutMs: 60_000, intervalMs: 100, what: "a process to hold the group's writer lease" });
}

/**
 * Three processes, 32 claimers, ITEMS items with random nacks, and `fault`
 * done to the writer's process once 30% are acknowledged; then the audit's
 * invariants and a finished group.
 */
async function failover(label: string, fault: (url: string, f: Fleet, acked: () => number) => Promise<void>) {
  nats = await startNatsServer();
  const url = nats.url;
  fleet = new Fleet({ natsUrl: url, lanesConfig: config, tokens });
  await fleet.start(3);
  const records = await publishWork(fleet.client(0, tokens.atlas)!, "jobs", Array.from({ length: ITEMS }, (_, i) => `item-${i}`), { parallel: 4 });
  const sequences = new Set(records.map((r) => r.sequence));
  const audit = newAuditLog();
  const f = fleet;
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
    seed: 0xf417,
    audit,
    midway: { fraction: 0.3, action: () => fault(url, f, () => audit.acks.length) },
    stallMs: 90_000,
  });
  const { violations, redelivered, maxAttempt } = checkAudit(audit, sequences, bounds, lostAnswers);
  const failures = [...audit.failures].map(([k, v]) => `${k} ×${v}`).join(", ");
  console.log(
    `[${label}] ${ITEMS} items: ${audit.leases.length} leases, ${redelivered} records leased more than once (highest attempt ${maxAttempt}), ` +
      `${audit.acks.length} successful acks, ${audit.staleAcks} stale acks refused; failed calls: ${failures || "none"}`,
  );
  expect(stalled, `no ack for 90 s; ${acked.size} of ${ITEMS} acked`).toBe(false);
  expect(violations.slice(0, 20)).toEqual([]);
  expect([...audit.failures.keys()].filter((k) => k.includes("internal error"))).toEqual([]);
  expect(acked.size + lostAnswers.size).toBe(ITEMS);
  const group = await finalInspection(fleet, tokens.beacon);
  expect(group.liveLeases).toBe(0);
  expect(group.deliveries).toEqual([]);
  expect(group.cursor).toBe(records[records.length - 1]!.sequence);
}

test(`three Laneway processes on one group, 32 claimers, ${ITEMS} items, random nacks; the writer's process SIGKILLed midway: another takes the writer lease, every item acked, never two live leases, no stale ack succeeded`, async () => {
  let killed: string | undefined;
  let successor: string | undefined;
  await failover("writer failover", async (url, f) => {
    const writer = await writerSlot(url, f);
    killed = writer.holder;
    console.log(`[writer failover] SIGKILL of the writer ${writer.holder} (slot ${writer.index}) at ${new Date().toISOString()}`);
    const killedAt = Date.now();
    await f.killAndRestart(writer.index);
    // The claimers go on meanwhile; a living process takes the lease once
    // the dead writer's has ended: the lease key names it, or its log says
    // so (on a busy machine a lease may lapse between renewals).
    try {
      successor = await waitFor(async () => {
        const holder = await leaseHolder(url);
        if (holder !== undefined && holder !== killed) return holder;
        for (const i of [0, 1, 2]) {
          const p = f.serving(i);
          const took = p?.stderr.find((line) => line.includes("writes the work group") && !line.includes(killed!) && loggedAt(line) >= killedAt);
          if (took !== undefined) return /"process":"([0-9a-f]{16})"/.exec(took)?.[1];
        }
        return undefined;
      }, { timeoutMs: 120_000, intervalMs: 100, what: "another process to take the writer lease" });
    } catch (error) {
      for (const i of [0, 1, 2]) {
        for (const line of f.serving(i)?.stderr ?? []) if (line.includes("writer") || line.includes("forwards")) console.log(`[writer failover] slot ${i}: ${line.slice(0, 300)}`);
      }
      throw error;
    }
    console.log(`[writer failover] writer lease taken over by ${successor} at ${new Date().toISOString()}`);
  });
  expect(killed).toBeDefined();
  expect(successor).toBeDefined();
  expect(fleet!.kills).toBe(1);
}, 600_000);

test(`three Laneway processes on one group, 32 claimers, ${ITEMS} items, random nacks; the writer's process SIGSTOPped midway, then continued: the others write the group without it, every item acked, never two live leases, no stale ack succeeded`, async () => {
  let stopped: { holder: string; index: number } | undefined;
  let ackedWhileStopped = 0;
  let unansweredSeen = false;
  await failover("writer stopped", async (url, f, acks) => {
    const writer = await writerSlot(url, f);
    stopped = writer;
    const stoppedProcess = f.serving(writer.index)!;
    const others = [0, 1, 2].filter((i) => i !== writer.index).map((i) => f.serving(i)!);
    const unanswered = () => others.some((p) => p.stderr.some((line) => line.includes("writer did not answer") && line.includes(writer.holder)));
    // A busy machine may have let the writer's lease lapse just before the stop, and another process took it: then nothing is forwarded to the stopped one.
    const takenOver = (since: number) =>
      others.some((p) => p.stderr.some((line) => line.includes("writes the work group") && !line.includes(writer.holder) && loggedAt(line) >= since));
    console.log(`[writer stopped] SIGSTOP of the writer ${writer.holder} (slot ${writer.index}) at ${new Date().toISOString()}`);
    const stoppedAt = Date.now();
    process.kill(stoppedProcess.pid, "SIGSTOP");
    try {
      // A forward to the stopped writer goes unanswered; the forwarder then writes the group itself and acks go on.
      await waitFor(() => unanswered() || takenOver(stoppedAt) || undefined, {
        timeoutMs: 120_000,
        intervalMs: 100,
        what: "a forwarder to log that the stopped writer did not answer",
      });
      unansweredSeen = unanswered();
      const before = acks();
      await waitFor(() => acks() >= before + 32 || undefined, { timeoutMs: 120_000, intervalMs: 100, what: "acks while the writer is stopped" });
      ackedWhileStopped = acks() - before;
    } finally {
      process.kill(stoppedProcess.pid, "SIGCONT");
    }
    console.log(
      `[writer stopped] SIGCONT at ${new Date().toISOString()} after ${ackedWhileStopped} acks without it; ` +
        (unansweredSeen ? "a forward to it went unanswered" : "its lease had lapsed and another process took it before anything was forwarded to it"),
    );
  });
  expect(stopped).toBeDefined();
  expect(ackedWhileStopped).toBeGreaterThanOrEqual(32);
  expect(fleet!.kills).toBe(0);
}, 600_000);
