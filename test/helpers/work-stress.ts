/**
 * The at-least-once / no-double-lease stress harness: several Laneway child
 * processes on one broker (or cluster), many concurrent claimers going
 * through the generated client, random nacks, and random SIGKILLs of one
 * Laneway process at a time (restarted each time). The test keeps an audit
 * log of every lease it was granted and of every settlement it attempted,
 * and checks the invariants afterwards (see `checkAudit`).
 */
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { LaneService, type Work } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { retryDelayMs } from "../../src/lanes/index.js";
import { startLanewayProcess, type ChildLaneway, type LanewayTestOptions, type TestTokens } from "./laneway.js";
import { reasonOf, type LaneClient } from "./lanes.js";
import { SeededRandom } from "./seeded-random.js";
import { waitFor } from "./wait-for.js";
import { inspectGroup } from "./work.js";

/** One lease the test was granted. */
export interface AuditLease {
  readonly sequence: bigint;
  readonly attempt: number;
  readonly receipt: string;
  /** Server time of the grant (lease end minus the lease length). */
  readonly grantedAt: number;
  readonly expiresAt: number;
  readonly claimer: number;
  /** A nack the claimer sent: when it was first sent, and its retry time when an answer came. */
  nack?: { sentAt: number; retryAt?: number };
}

/** One successful ack answer. */
export interface AuditAck {
  readonly sequence: bigint;
  readonly receipt: string;
  readonly duplicate: boolean;
  readonly answeredAt: number;
}

export interface AuditLog {
  readonly leases: AuditLease[];
  readonly acks: AuditAck[];
  /** Acks refused as stale (the lease had been lost): expected now and then, never a success. */
  staleAcks: number;
  /** Each stale ack refusal: the sequence, the receipt, when it was answered, and whether an earlier attempt of that ack had failed without an answer. */
  readonly staleAckEvents: { sequence: bigint; receipt: string; answeredAt: number; afterLostAnswer: boolean }[];
  /** Nacks refused as stale. */
  staleNacks: number;
  /** Failed calls by kind (transport failures, capacity, timeouts ...). */
  readonly failures: Map<string, number>;
}

export function newAuditLog(): AuditLog {
  return { leases: [], acks: [], staleAcks: 0, staleAckEvents: [], staleNacks: 0, failures: new Map() };
}

/** One process slot of the fleet: the current process, or none while it restarts. */
interface Slot {
  process: ChildLaneway | undefined;
  incarnation: number;
  clients: Map<string, LaneClient>;
}

/** A fleet of Laneway child processes serving one namespace. */
export class Fleet {
  readonly #slots: Slot[] = [];
  readonly #options: LanewayTestOptions;
  readonly #all: ChildLaneway[] = [];
  kills = 0;
  /** Replacement processes that failed to start (and were started again). */
  startFailures = 0;

  constructor(options: LanewayTestOptions & { tokens: TestTokens }) {
    this.#options = options;
  }

  async start(size: number): Promise<void> {
    // The first creates the namespace; the others then find it.
    const first = await this.#spawn();
    const rest = await Promise.all(Array.from({ length: size - 1 }, () => this.#spawn()));
    for (const process of [first, ...rest]) this.#slots.push({ process, incarnation: 0, clients: new Map() });
  }

  async #spawn(): Promise<ChildLaneway> {
    const process = await startLanewayProcess(this.#options);
    this.#all.push(process);
    return process;
  }

  get size(): number {
    return this.#slots.length;
  }

  /** A client of slot `index` for `token`, or undefined while that slot restarts. */
  client(index: number, token: string): LaneClient | undefined {
    const slot = this.#slots[index]!;
    if (slot.process === undefined) return undefined;
    let client = slot.clients.get(token);
    if (client === undefined) {
      client = slot.process.clients.client(LaneService, { token });
      slot.clients.set(token, client);
    }
    return client;
  }

  /** A serving slot: `preferred` when it serves, else the next one that does. */
  pick(preferred: number): number | undefined {
    for (let i = 0; i < this.#slots.length; i++) {
      const index = (preferred + i) % this.#slots.length;
      if (this.#slots[index]!.process !== undefined) return index;
    }
    return undefined;
  }

  /** SIGKILLs the process of slot `index` and starts a new one in its place. */
  async killAndRestart(index: number): Promise<void> {
    const slot = this.#slots[index]!;
    const victim = slot.process;
    if (victim === undefined) return;
    slot.process = undefined;
    slot.clients = new Map();
    await victim.kill("SIGKILL");
    this.kills += 1;
    victim.clients.closeAll();
    // A process may fail to start while its broker is electing leaders: try again.
    let replacement: ChildLaneway | undefined;
    for (let attempt = 1; replacement === undefined; attempt++) {
      try {
        replacement = await this.#spawn();
      } catch (error) {
        if (attempt >= 5) throw error;
        this.startFailures += 1;
        await sleep(1_000);
      }
    }
    slot.incarnation += 1;
    slot.process = replacement;
  }

  /** The process serving slot `index`, or undefined while it restarts. */
  serving(index: number): ChildLaneway | undefined {
    return this.#slots[index]!.process;
  }

  /** Any serving process (for inspection at the end). */
  any(): ChildLaneway {
    const found = this.#slots.find((s) => s.process !== undefined)?.process;
    if (found === undefined) throw new Error("no Laneway process is serving");
    return found;
  }

  async remove(): Promise<void> {
    await Promise.all(this.#all.map((p) => p.remove()));
  }
}

export interface StressOptions {
  readonly fleet: Fleet;
  readonly lane: string;
  readonly group: string;
  /** The tokens the claimers use (alternately). */
  readonly tokens: readonly string[];
  readonly sequences: ReadonlySet<bigint>;
  readonly claimers: number;
  readonly batch: number;
  readonly nackChance: number;
  readonly leaseMs: number;
  readonly seed: number;
  readonly audit: AuditLog;
  /**
   * Milliseconds between SIGKILLs of a random Laneway process (drawn from
   * this range); none when absent. A kill also comes early once
   * `killEveryAcks` more records were acked since the last one, so a run
   * that finishes faster than the timer still meets its kills.
   */
  readonly killEveryMs?: readonly [number, number];
  /** Acked records between SIGKILLs at most (drawn from this range); with `killEveryMs`. */
  readonly killEveryAcks?: readonly [number, number];
  /** Called once after this fraction of the records was acked (for example to kill a broker node). */
  readonly midway?: { readonly fraction: number; readonly action: () => Promise<void> };
  /** Gives up after this long without any new ack. */
  readonly stallMs: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function count(audit: AuditLog, what: string): void {
  audit.failures.set(what, (audit.failures.get(what) ?? 0) + 1);
}

function failureKind(error: unknown): string {
  const e = ConnectError.from(error);
  const reason = reasonOf(e);
  // Failures without a lane reason did not come from a lane's rule: keep their message.
  return `${Code[e.code]}/${reason ?? `- (${e.rawMessage.slice(0, 80)})`}`;
}

/**
 * Runs the claimers until every sequence in `sequences` was acked (first
 * successful ack), with random SIGKILLs of one Laneway process meanwhile.
 * Returns the set of acked sequences.
 */
export async function runStress(options: StressOptions): Promise<{ acked: Set<bigint>; stalled: boolean; lostAnswers: Set<bigint> }> {
  const { fleet, lane, group, audit } = options;
  const random = new SeededRandom(options.seed);
  const acked = new Set<bigint>();
  let lastProgress = Date.now();
  let stalled = false;
  // The midway action starts from the ack that reaches its fraction, so a
  // fast run cannot finish before it, and the run waits for it at the end.
  let midway: Promise<void> | undefined;
  // Until it has finished, the claimers go on asking (what it waits for,
  // such as another process taking the group's writer lease, may need them).
  let midwaySettled = options.midway === undefined;
  // The killer's progress trigger: woken by the ack that reaches `killAt`.
  let killAt = Number.POSITIVE_INFINITY;
  let wakeKiller: (() => void) | undefined;
  const done = () => (midwaySettled && acked.size + unresolved().length >= options.sequences.size) || stalled;
  /**
   * Sequences whose latest lease's ack lost its answer and was then refused
   * as stale, with no later lease: the first attempt completed them and the
   * completion was pruned (ack_retention) before the retry arrived. Nothing
   * will ever lease them again; checkAudit verifies that nothing did.
   */
  const unresolved = () => {
    if (acked.size + audit.staleAckEvents.length < options.sequences.size) return [];
    const latest = new Map<bigint, AuditLease>();
    for (const lease of audit.leases) if ((latest.get(lease.sequence)?.attempt ?? 0) < lease.attempt) latest.set(lease.sequence, lease);
    return audit.staleAckEvents.filter((e) => e.afterLostAnswer && !acked.has(e.sequence) && latest.get(e.sequence)?.receipt === e.receipt && Date.now() - e.answeredAt > 2 * options.leaseMs);
  };

  const settle = async (kind: "ack" | "nack", leases: AuditLease[], claimer: number, token: string) => {
    let pending = leases;
    let lostAnswer = false;
    for (let attempt = 0; pending.length > 0 && attempt < 200; attempt++) {
      if (attempt > 0) await sleep(Math.min(500, 20 * attempt));
      const index = fleet.pick(claimer + attempt);
      const client = index === undefined ? undefined : fleet.client(index, token);
      if (client === undefined) continue;
      const receipts = pending.map((l) => ({ sequence: l.sequence, receipt: l.receipt }));
      if (kind === "nack") for (const l of pending) l.nack ??= { sentAt: Date.now() };
      let results: { ok: boolean; duplicate?: boolean; retryAt?: number; reason?: string }[];
      try {
        if (kind === "ack") {
          const answer = await client.ackBatch({ lane, group, receipts });
          results = answer.results.map((r) =>
            r.outcome.case === "acked" ? { ok: true, duplicate: r.outcome.value.duplicate } : { ok: false, reason: r.outcome.value?.reason ?? "" },
          );
        } else {
          const answer = await client.nackBatch({ lane, group, receipts });
          results = answer.results.map((r) =>
            r.outcome.case === "nacked" ? { ok: true, retryAt: timestampMs(r.outcome.value.retryAt!) } : { ok: false, reason: r.outcome.value?.reason ?? "" },
          );
        }
      } catch (error) {
        count(audit, `${kind}: ${failureKind(error)}`);
        lostAnswer = true;
        continue;
      }
      const answeredAt = Date.now();
      const retry: AuditLease[] = [];
      results.forEach((result, i) => {
        const lease = pending[i]!;
        if (result.ok && kind === "ack") {
          audit.acks.push({ sequence: lease.sequence, receipt: lease.receipt, duplicate: result.duplicate!, answeredAt });
          if (!acked.has(lease.sequence)) {
            acked.add(lease.sequence);
            lastProgress = answeredAt;
            if (acked.size >= killAt) wakeKiller?.();
            if (options.midway !== undefined && midway === undefined && acked.size >= options.sequences.size * options.midway.fraction) {
              midway = options.midway.action();
              midway.then(
                () => (midwaySettled = true),
                () => (midwaySettled = true), // awaited, and thrown, at the end
              );
            }
          }
        } else if (result.ok) {
          lease.nack!.retryAt = result.retryAt!;
        } else if (result.reason === "lane_stale") {
          if (kind === "ack") {
            audit.staleAcks += 1;
            audit.staleAckEvents.push({ sequence: lease.sequence, receipt: lease.receipt, answeredAt, afterLostAnswer: lostAnswer });
          } else audit.staleNacks += 1;
        } else {
          count(audit, `${kind} item: ${result.reason}`);
          retry.push(lease);
        }
      });
      pending = retry;
    }
  };

  const claimer = async (i: number) => {
    const token = options.tokens[i % options.tokens.length]!;
    let preferred = i % fleet.size;
    while (!done()) {
      const index = fleet.pick(preferred);
      const client = index === undefined ? undefined : fleet.client(index, token);
      if (client === undefined) {
        await sleep(50);
        continue;
      }
      let work: Work[];
      try {
        work = (await client.claimBatch({ lane, group, maxRecords: options.batch, wait: { seconds: 1n, nanos: 0 } })).work;
      } catch (error) {
        const kind = failureKind(error);
        count(audit, `claim: ${kind}`);
        preferred = (preferred + 1) % fleet.size;
        await sleep(kind.startsWith("ResourceExhausted") ? 20 : 50);
        continue;
      }
      const leases = work.map((w) => {
        const expiresAt = timestampMs(w.leaseExpiresAt!);
        const lease: AuditLease = { sequence: w.record!.sequence, attempt: w.attempt, receipt: w.receipt, grantedAt: expiresAt - options.leaseMs, expiresAt, claimer: i };
        audit.leases.push(lease);
        return lease;
      });
      const nacks = leases.filter(() => random.chance(options.nackChance));
      const acks = leases.filter((l) => !nacks.includes(l));
      await Promise.all([settle("nack", nacks, i, token), settle("ack", acks, i, token)]);
    }
  };

  const killer = async () => {
    const every = options.killEveryMs;
    if (every === undefined) return;
    const acks = options.killEveryAcks;
    while (!done()) {
      killAt = acks === undefined ? Number.POSITIVE_INFINITY : acked.size + random.int(acks[0], acks[1]);
      const woken = new Promise<void>((resolve) => (wakeKiller = resolve));
      await Promise.race([sleep(random.int(every[0], every[1])), woken]);
      wakeKiller = undefined;
      if (done()) return;
      await fleet.killAndRestart(random.int(0, fleet.size - 1));
    }
  };

  const watchdog = async () => {
    while (!done()) {
      await sleep(500);
      if (Date.now() - lastProgress > options.stallMs) stalled = true;
    }
  };

  await Promise.all([...Array.from({ length: options.claimers }, (_, i) => claimer(i)), killer(), watchdog()]);
  await midway;
  return { acked, stalled, lostAnswers: new Set(unresolved().map((e) => e.sequence)) };
}

/**
 * The invariants of the audit log:
 *
 * - every sequence was acked;
 * - per sequence, the leases' attempts are distinct;
 * - never two live leases for one delivery: each later lease was granted no
 *   earlier than the previous one ended — its lease expiry, or the retry
 *   time of its nack (a nack whose answer was lost counts from when it was
 *   sent plus the retry delay, the earliest it could have taken effect);
 * - no ack succeeded with a stale receipt, and nothing was leased after an
 *   ack: every successful ack of a sequence carries the receipt of its
 *   latest lease.
 *
 * Returns the list of violations (empty when all hold).
 */
export function checkAudit(
  audit: AuditLog,
  sequences: ReadonlySet<bigint>,
  bounds: { retryDelayMs: number; maxRetryDelayMs: number },
  lostAnswers: ReadonlySet<bigint> = new Set(),
): { violations: string[]; redelivered: number; maxAttempt: number } {
  const violations: string[] = [];
  const leasesOf = new Map<bigint, AuditLease[]>();
  for (const lease of audit.leases) leasesOf.set(lease.sequence, [...(leasesOf.get(lease.sequence) ?? []), lease]);
  const acksOf = new Map<bigint, AuditAck[]>();
  for (const ack of audit.acks) acksOf.set(ack.sequence, [...(acksOf.get(ack.sequence) ?? []), ack]);
  let redelivered = 0;
  let maxAttempt = 0;
  for (const sequence of sequences) {
    const leases = (leasesOf.get(sequence) ?? []).sort((a, b) => a.attempt - b.attempt);
    const acks = acksOf.get(sequence) ?? [];
    if (acks.length === 0 && !lostAnswers.has(sequence)) violations.push(`sequence ${sequence} was never acked`);
    if (leases.length === 0) {
      violations.push(`sequence ${sequence} was acked without a lease the test saw`);
      continue;
    }
    if (leases.length > 1) redelivered += 1;
    maxAttempt = Math.max(maxAttempt, leases[leases.length - 1]!.attempt);
    for (let i = 1; i < leases.length; i++) {
      const previous = leases[i - 1]!;
      const next = leases[i]!;
      if (next.attempt === previous.attempt) {
        violations.push(`sequence ${sequence}: attempt ${next.attempt} was granted twice (claimers ${previous.claimer} and ${next.claimer})`);
        continue;
      }
      let endedAt = previous.expiresAt;
      if (previous.nack?.retryAt !== undefined) endedAt = previous.nack.retryAt;
      else if (previous.nack !== undefined) endedAt = Math.min(previous.expiresAt, previous.nack.sentAt + retryDelayMs(bounds, previous.attempt));
      if (next.grantedAt < endedAt) {
        violations.push(`sequence ${sequence}: attempt ${next.attempt} was granted at ${next.grantedAt}, while attempt ${previous.attempt} was live until ${endedAt}`);
      }
    }
    const last = leases[leases.length - 1]!;
    for (const ack of acks) {
      if (ack.receipt !== last.receipt) {
        const of = leases.find((l) => l.receipt === ack.receipt);
        violations.push(`sequence ${sequence}: an ack succeeded with the receipt of attempt ${of?.attempt ?? "?"} although attempt ${last.attempt} was granted`);
      }
    }
  }
  return { violations, redelivered, maxAttempt };
}

/** The group `jobs`/`workers` as any living process of the fleet inspects it once the run is over (retried while processes restart). */
export async function finalInspection(fleet: Fleet, beaconToken: string): Promise<Awaited<ReturnType<typeof inspectGroup>>> {
  const client: LaneClient = fleet.any().clients.client(LaneService, { token: beaconToken });
  return waitFor(
    async () => {
      try {
        return await inspectGroup(client, "jobs", "workers");
      } catch {
        return undefined;
      }
    },
    { timeoutMs: 60_000, what: "the final inspection" },
  );
}
