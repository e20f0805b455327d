import { randomBytes } from "node:crypto";
import { RequestError } from "@nats-io/transport-node";
import { silentLogger, type Logger } from "../log/logger.js";
import { decodeEnvelope, recordOf, type Envelope } from "./envelope.js";
import { LaneError } from "./errors.js";
import { COMPLETION_RESERVE_BYTES } from "./completion-history.js";
import {
  emptyLedger,
  historyBudget,
  inspectedState,
  isEligible,
  LedgerDraft,
  recoveryBody,
  stale,
  type ClaimCandidates,
  type InspectedState,
  type Ledger,
  type Leased,
  type RecoveryRecord,
} from "./group-ledger.js";
import { decodeAdmissions, decodeLedger, encodeAdmissions, encodeLedger } from "./group-state-codec.js";
import type { LaneStore } from "./lane-store.js";
import { admissionHeadroom, slotLimit, worstCaseLedgerBytes } from "./ledger-capacity.js";
import type { LaneWatchers } from "./lane-watcher.js";
import { groupKey, groupSignalSubject, groupSignalSubjects, metaBucket } from "./names.js";
import {
  ANSWER_RECORD_BYTES,
  decodeJson,
  decodeWriterLease,
  encodeJson,
  encodeWriterLease,
  errorOf,
  forwardSubject,
  forwardSubjects,
  recordOfWire,
  wireError,
  wireRecord,
  WRITER_LEASE_MS,
  writerLeaseKey,
  type ForwardAnswer,
  type ForwardedBatch,
  type ForwardedOperation,
  type WireDelivery,
  type WireResult,
} from "./group-forwarding.js";
import type { Namespace } from "./namespace.js";
import { GroupReceipts } from "./receipts.js";
import type { LaneRegistry } from "./registry.js";
import type { LaneBounds, LaneRecord } from "./types.js";

/**
 * Work groups: claims, renewals, acknowledgements, nacks, inspection and
 * recovery over each group's state (group-ledger.ts, stored as state
 * format 4 by group-state-codec.ts) in the namespace's shared group bucket.
 *
 * - One actor per group in this process combines every operation that
 *   arrives while a compare-and-set is in flight into the next one: many
 *   workers acking at once cost one CAS, not one each.
 * - Between processes the CAS decides, and one process writes for all:
 *   processes that meet on a group (a lost CAS, a signal) elect a writer
 *   through the group's writer lease (a key of the meta bucket, taken and
 *   renewed by CAS; group-forwarding.ts), and the others forward their
 *   operations to it over core NATS, so every caller's operations are
 *   combined into one stream of writes. A writer that does not answer is
 *   written around (directly, optimistically) until its lease ends.
 * - Writing directly (alone, or without a writer): a process whose CAS
 *   lost starts following the group's key (a KV watch, so its cached
 *   state is fresh without a read after each conflict), tells the others
 *   on the group's signal subject, and retries on the state it was shown.
 *   Only a process that lost three writes in a row says it is starving;
 *   then the others let each of their next writes wait, for a few
 *   milliseconds at most, until they have seen a write of another
 *   process. Without contention nothing waits, nothing is watched and no
 *   lease is read.
 * - A claim that finds the group at max_pending is held (HOLD_MS at most)
 *   for the settlements on their way with it, then refused.
 * - Capacity: the bucket's `ledger_bytes` is shared by every group of the
 *   namespace. A group's value can grow only to the worst-case size of its
 *   slots (every unfinished delivery at its widest, its completion-history
 *   budget, all 64 recovery records), and a group or a new slot is
 *   admitted only when the sum of every admitted worst case still leaves
 *   headroom for the largest single write. That keeps acknowledgements,
 *   nacks, renewals and recoveries — which never add slots — from ever
 *   failing for capacity, and keeps newly admitted groups from eating the
 *   headroom of existing ones. Admissions are recorded in one key of the
 *   bucket (`_admissions`), by CAS.
 * - A claim that finds nothing may wait up to its `wait`: all waiting
 *   claimers of a lane share the lane's one watcher, and wake when a record
 *   is published or the next lease ends or retry falls due.
 */

/** One leased delivery as a claim answers it. */
export interface WorkDelivery {
  readonly record: LaneRecord;
  readonly receipt: string;
  readonly attempt: number;
  readonly leaseExpiresAt: number;
}

/** A receipt-bound operation's own outcome in a batch. */
export type ReceiptOutcome<T> = { readonly ok: T } | { readonly error: unknown };

/** One work group's state as this process last saw it (no broker request). */
export interface GroupObservation {
  readonly lane: string;
  readonly group: string;
  /** Deliveries leased and not expired. */
  readonly leases: number;
  /** Deliveries waiting for their retry (nacked, or leases that expired). */
  readonly retriesWaiting: number;
  /** The group's cursor: the last sequence it examined for fresh work. */
  readonly cursor: number;
  /** Unfinished deliveries (leased, expired or waiting for a retry). */
  readonly unfinished: number;
  /** When the stream stored the oldest unfinished delivery this process read (epoch ms), if known. */
  readonly oldestUnfinishedStoredAt: number | undefined;
}

/** Which group of which lane a project acts on. */
export interface GroupTarget {
  /** The authenticated project. */
  readonly project: string;
  readonly lane: string;
  readonly group: string;
}

export interface ClaimParams extends GroupTarget {
  /** The most deliveries to lease (1 to 64). */
  readonly max: number;
  /** How long to wait for work when none is eligible (0: answer at once). */
  readonly waitMs: number;
}

/**
 * A caller's uint64 as the wire carries it: exact, also beyond 2^53. No
 * stream sequence or revision reaches 2^53, so a value beyond it is refused
 * by the operation's own rule, quoting the value as it was sent; values
 * that fit are numbers inside the core.
 */
export type WireInteger = number | bigint;

/** A receipt as a caller presents it. */
export interface Receipt {
  readonly sequence: WireInteger;
  readonly receipt: string;
}

/** A receipt whose sequence fits a number (every receipt inside the group actor). */
interface HeldReceipt {
  readonly sequence: number;
  readonly receipt: string;
}

export interface ReceiptParams extends GroupTarget {
  readonly receipts: readonly Receipt[];
}

/** What an acknowledgement answers. */
export interface Acked {
  /** When the delivery was completed (a duplicate: when it first was, to the history's precision). */
  readonly ackedAt: number;
  /** True when the receipt had already completed its delivery. */
  readonly duplicate: boolean;
}

export interface AckAndClaimParams extends GroupTarget {
  /** Receipts to complete before claiming (0 to 64). */
  readonly acks: readonly Receipt[];
  /** The most deliveries to lease (1 to 64). */
  readonly max: number;
}

/** The acknowledgements' outcomes (in request order) and the deliveries leased after them. */
export interface AckAndClaimOutcome {
  readonly acks: ReceiptOutcome<Acked>[];
  readonly work: WorkDelivery[];
}

export interface RecoverParams extends GroupTarget {
  /** The request's idempotency id. */
  readonly id: string;
  readonly revision: WireInteger;
  readonly cursorThrough: WireInteger;
  readonly expired: readonly Receipt[];
  readonly missing: readonly WireInteger[];
}

/** A recovery whose every number fits (as the actor applies it). */
interface HeldRecovery extends GroupTarget {
  readonly id: string;
  readonly revision: number;
  readonly cursorThrough: number;
  readonly expired: readonly HeldReceipt[];
  readonly missing: readonly number[];
}

/**
 * A recovery's numbers as the actor applies them; a value beyond 2^53 names
 * no revision, cursor or delivery of any group and is refused here, quoted
 * as it was sent, by the rule it breaks.
 */
function heldRecovery(params: RecoverParams): HeldRecovery {
  if (!fits(params.revision)) {
    throw new LaneError("lane_conflict", `the group was never at revision ${params.revision}: inspect it again and submit its current revision with a new request id`);
  }
  if (!fits(params.cursorThrough)) {
    throw new LaneError("lane_invalid", `cursor_through ${params.cursorThrough} is beyond every sequence of lane ${params.lane}: inspect the group for the cursor it expects`);
  }
  for (const sequence of [...params.expired.map((e) => e.sequence), ...params.missing]) {
    if (!fits(sequence)) throw new LaneError("lane_invalid", `delivery ${sequence} is not an unfinished delivery of this group`);
  }
  return {
    ...params,
    revision: Number(params.revision),
    cursorThrough: Number(params.cursorThrough),
    expired: params.expired.map((e) => ({ sequence: Number(e.sequence), receipt: e.receipt })),
    missing: params.missing.map(Number),
  };
}

/** Whether a wire integer can name a sequence or revision at all. */
function fits(value: WireInteger): boolean {
  return typeof value === "number" || value <= BigInt(Number.MAX_SAFE_INTEGER);
}

/** A group's state as inspection shows it (never a receipt or the secret). */
export interface GroupInspection {
  readonly lane: string;
  readonly group: string;
  readonly revision: number;
  readonly cursor: number;
  /** The lane's first retained sequence; `lastSequence + 1` when it retains nothing. */
  readonly firstRetained: number;
  readonly lastSequence: number;
  readonly missingThrough: number;
  readonly slots: number;
  readonly maxLedger: number;
  readonly liveLeases: number;
  readonly recoveries: number;
  /** The retained recovery results, oldest first. */
  readonly recoveryHistory: readonly RecoveryResult[];
  /** The unfinished deliveries, in sequence order. */
  readonly deliveries: readonly {
    readonly sequence: number;
    readonly project: string;
    readonly attempt: number;
    readonly state: InspectedState;
    readonly leaseExpiresAt?: number;
    readonly retryAt?: number;
    readonly retained: boolean;
  }[];
  /** The completion history within ack_retention, oldest bucket first. */
  readonly completions: readonly {
    readonly firstAckedAt: number;
    readonly lastAckedAt: number;
    readonly completed: number;
    readonly ranges: readonly { readonly first: number; readonly last: number }[];
    readonly retried: readonly { readonly sequence: number; readonly attempt: number }[];
  }[];
  /** Stored bytes of the completion history, and its budget (with room kept for each unfinished delivery's completion). */
  readonly historyBytes: number;
  readonly historyBudget: number;
}

/** A recovery's stored result. */
export interface RecoveryResult {
  readonly id: string;
  readonly project: string;
  readonly cursorThrough: number;
  readonly missingThrough: number;
  readonly expirations: readonly { readonly project: string; readonly sequence: number; readonly attempt: number }[];
  readonly revision: number;
  readonly recordedAt: number;
}

/** The key of the admissions record; identifiers never start with `_`. */
export const ADMISSIONS_KEY = "_admissions";

/** Records a fresh-work scan reads from the stream per claim attempt, at most. */
const SCAN_LIMIT = 512;
/**
 * Records a read asks for beyond what the claims still want (at least 64,
 * and as many as they want): the work among them waits in the record cache
 * for the next claims (read-ahead), which then need no read of the lane.
 */
const READ_AHEAD = 64;
/**
 * A record this process read is taken as still retained, without asking the
 * broker for the lane's range, while it is at least this far from the end
 * of its retention by this process's clock (the largest of 2 s and
 * operation_timeout: room for clock skew between Laneway and the broker).
 */
const RETAINED_MARGIN_MS = 2_000;
/** The most records the record cache holds (and so the most work a read-ahead can list). */
const RECORD_CACHE = 4_096;
/**
 * Processes write a shared group optimistically: each writes at once on
 * the state it holds (its watch keeps it fresh), and a lost CAS costs one
 * retry on the state the watch showed. Only a process that lost
 * STARVING_STREAK + 1 writes in a row says it is starving; then the others
 * let each of their next writes wait until they have seen a write of
 * another process, for YIELD_MS at most, doubled for each further loss in
 * a row, at most YIELD_MAX_MS.
 */
const STARVING_STREAK = 2;
const YIELD_MS = 2;
const YIELD_MAX_MS = 40;
/** How long contention lasts after the last sign of it (a lost CAS, a signal). */
const CONTENTION_WINDOW_MS = 250;
/** How long a group's key is watched after the last sign of contention. */
const WATCH_IDLE_MS = 3_000;
/** How long a process whose CAS lost waits for its watch to show the newer state, before reading it. */
const CONFLICT_WAIT_MS = 50;
/**
 * A claim that finds the group at max_pending while its project holds
 * live leases is held this long at most for settlements on their way (a
 * participant sends its acks and its next claim together; the claim can
 * arrive first): it is applied again with every operation that settles
 * something, and refused only when this time ends with the group still
 * full.
 */
const HOLD_MS = 500;
/** How long a forwarding process waits for the writer's answer before it writes the group itself (at most operation_timeout). */
const FORWARD_TIMEOUT_MS = 3_000;
/** The least time between two looks at a group's writer lease by one process. */
const COORDINATE_MIN_MS = 100;

/**
 * What this process has read of a lane contiguously: every sequence from
 * `from` through `through` was read (none missing among them), and `work`
 * lists the work records among them in sequence order — the others are
 * events. A lane's records never change and leave only by age, from the
 * front, so this stays true; the envelopes of `work` are in the record
 * cache, which may have evicted some since (those are read again).
 */
interface ReadAhead {
  from: number;
  through: number;
  work: number[];
  /** When the stream stored the oldest record read in this span (records after it are younger). */
  oldestStoredAt: number;
}

/** A record of the lane this process read: its envelope, and when the stream stored it. */
interface CachedRecord {
  readonly envelope: Envelope;
  readonly storedAt: number;
}

type Operation = (
  | {
      kind: "claim";
      project: string;
      max: number;
      settle: Settle<WorkDelivery[]>;
      /** Until when the claim may be held for settlements on their way (see HOLD_MS), once it was. */
      holdUntil?: number;
    }
  | { kind: "renew"; project: string; items: HeldReceipt[]; settle: Settle<ReceiptOutcome<{ leaseExpiresAt: number }>[]> }
  | { kind: "ack"; project: string; items: HeldReceipt[]; settle: Settle<ReceiptOutcome<Acked>[]> }
  | { kind: "nack"; project: string; items: HeldReceipt[]; settle: Settle<ReceiptOutcome<{ retryAt: number; attempt: number; duplicate: boolean }>[]> }
  | { kind: "recover"; request: HeldRecovery; settle: Settle<RecoveryResult> }
) & {
  /** Forwarded by another process that takes this one for the group's writer: applied here, never forwarded on. */
  forwarded?: boolean;
};

interface Settle<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
  readonly signal: AbortSignal | undefined;
}

/** The lane's retained range: `firstRetained` is `last + 1` when nothing is retained. */
interface LaneRange {
  readonly firstRetained: number;
  readonly last: number;
}

export class WorkGroups {
  readonly #actors = new Map<string, GroupActor>();
  readonly #admissions: Admissions;
  /** This process, on the groups' signal subjects (its own signals are ignored). */
  readonly #process = randomBytes(8).toString("hex");
  /** The one subscription to every group's signal subject and to this process's forward subjects, per connection. */
  #signals: { unsubscribe: () => void; generation: number } | undefined;
  #closed = false;

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
    private readonly registry: LaneRegistry,
    private readonly watchers: LaneWatchers,
    private readonly now: () => number = Date.now,
    private readonly log: Logger = silentLogger,
  ) {
    this.#admissions = new Admissions(store, namespace);
  }

  /**
   * Logs one warning per group whose configuration names no recoverer:
   * once unacknowledged work of such a group leaves retention, every claim
   * answers lane_cursor and nobody may accept the gap.
   */
  warnUnrecoverable(log: Logger): void {
    for (const lane of this.namespace.config.lanes) {
      for (const group of lane.groups.keys()) {
        if ((lane.recoverers.get(group) ?? []).length > 0) continue;
        log.warn("work group has no recoverer: once unacknowledged work leaves retention, its claims fail with lane_cursor for good", {
          lane: lane.id,
          group,
          retention: `${this.namespace.config.bounds.retentionMs}ms`,
        });
      }
    }
  }

  /** Subscribes to the namespace's group signals (again after a reconnect): other processes say so when a write of theirs lost. */
  async #ensureSignals(): Promise<void> {
    if (this.#closed || (this.#signals !== undefined && this.#signals.generation === this.store.generation)) return;
    this.#signals?.unsubscribe();
    this.#signals = undefined;
    let nc;
    try {
      nc = await this.store.connection();
    } catch {
      return; // not connected: the next operation tries again
    }
    if (this.#signals !== undefined || this.#closed) return;
    const prefix = `laneway.${this.namespace.config.namespace}.`;
    const subscription = nc.subscribe(groupSignalSubjects(this.namespace.config.namespace), {
      callback: (_error, message) => {
        const [lane, , group] = message.subject.slice(prefix.length).split(".");
        const [from, streak] = message.string().split(" ");
        if (from === this.#process || lane === undefined || group === undefined) return;
        this.#actors.get(groupKey(lane, group))?.onSignal(Number(streak) || 0);
      },
    });
    // Operations other processes forward to this one, as the writer of a group they share.
    const forwards = nc.subscribe(forwardSubjects(this.namespace.config.namespace, this.#process), {
      callback: (_error, message) => {
        const [lane, , group] = message.subject.slice(prefix.length).split(".");
        if (lane === undefined || group === undefined || this.namespace.streams.get(lane) === undefined) return;
        const members = this.namespace.config.lanes.find((l) => l.id === lane)?.groups.get(group);
        if (members === undefined) return;
        void this.#actor(lane, group).onForward(message.data, (answer) => {
          try {
            message.respond(answer);
          } catch {
            // The connection went away: the forwarder's request times out and it writes the group itself.
          }
        });
      },
    });
    this.#signals = {
      unsubscribe: () => {
        subscription.unsubscribe();
        forwards.unsubscribe();
      },
      generation: this.store.generation,
    };
  }

  #actor(lane: string, group: string): GroupActor {
    void this.#ensureSignals();
    const key = groupKey(lane, group);
    let actor = this.#actors.get(key);
    if (actor === undefined) {
      const recoverers = this.namespace.config.lanes.find((l) => l.id === lane)?.recoverers.get(group) ?? [];
      actor = new GroupActor({
        store: this.store,
        namespace: this.namespace,
        admissions: this.#admissions,
        lane,
        group,
        now: this.now,
        process: this.#process,
        log: this.log,
        gapAdvice:
          recoverers.length > 0
            ? `inspect the group and have a recoverer (${recoverers.join(", ")}) accept it with RecoverGroup`
            : `no project may recover group ${group} of lane ${lane} (its configuration names no recoverer), so it cannot pass this gap: provision a namespace generation whose configuration names a recoverer for it, and move its work there`,
      });
      this.#actors.set(key, actor);
    }
    return actor;
  }

  #member({ project, lane, group }: GroupTarget): void {
    const members = this.namespace.config.lanes.find((l) => l.id === lane)?.groups.get(group);
    if (members === undefined || !members.includes(project)) {
      throw new LaneError("lane_forbidden", `project ${project} is not a member of group ${group} of lane ${lane}`);
    }
  }

  /**
   * Leases up to `max` deliveries; when none is eligible, waits up to
   * `waitMs` for work (a publication, a lease ending, a retry falling due).
   */
  async claim(params: ClaimParams, signal?: AbortSignal): Promise<WorkDelivery[]> {
    this.#member(params);
    const { project, lane, group, max, waitMs } = params;
    const actor = this.#actor(lane, group);
    const deadline = this.now() + waitMs;
    const once = () => new Promise<WorkDelivery[]>((resolve, reject) => actor.enqueue({ kind: "claim", project, max, settle: { resolve, reject, signal } }));
    if (waitMs <= 0) return once();
    const hold = await this.watchers.hold(lane);
    try {
      for (;;) {
        const version = hold.version();
        const leased = await once();
        const remaining = deadline - this.now();
        if (leased.length > 0 || remaining <= 0 || signal?.aborted) return leased;
        const nextDue = actor.nextEligibleAt();
        const sleep = Math.max(1, Math.min(remaining, nextDue === undefined ? remaining : nextDue - this.now() + 5));
        await hold.wait(version, sleep, signal ?? new AbortController().signal);
        if (signal?.aborted) return [];
      }
    } finally {
      hold.release();
    }
  }

  renew(params: ReceiptParams, signal?: AbortSignal) {
    return this.#receipts<{ leaseExpiresAt: number }>(params, (items, settle) => ({ kind: "renew", project: params.project, items, settle }), signal);
  }

  ack(params: ReceiptParams, signal?: AbortSignal) {
    return this.#receipts<Acked>(params, (items, settle) => ({ kind: "ack", project: params.project, items, settle }), signal);
  }

  /**
   * Completes `acks`, then leases up to `max` deliveries without waiting:
   * both reach the group's actor in the same turn, so one compare-and-set
   * serves them, the acknowledgements applied first (the slots and leases
   * they free serve the claim). The acknowledgements keep their own
   * outcomes: one failing as a whole (the broker unavailable) answers its
   * error for each receipt. A claim that fails fails the call, whatever
   * became of the acknowledgements (a repeated ack answers `duplicate`).
   */
  async ackAndClaim(params: AckAndClaimParams, signal?: AbortSignal): Promise<AckAndClaimOutcome> {
    const { project, lane, group, acks, max } = params;
    this.#member(params);
    const acked =
      acks.length === 0
        ? Promise.resolve([])
        : this.ack({ project, lane, group, receipts: acks }, signal).catch((error: unknown) => acks.map(() => ({ error })));
    const work = this.claim({ project, lane, group, max, waitMs: 0 }, signal);
    const [ackOutcomes, leased] = await Promise.all([acked, work]);
    return { acks: ackOutcomes, work: leased };
  }

  nack(params: ReceiptParams, signal?: AbortSignal) {
    return this.#receipts<{ retryAt: number; attempt: number; duplicate: boolean }>(params, (items, settle) => ({ kind: "nack", project: params.project, items, settle }), signal);
  }

  /**
   * A receipt operation: the receipts whose sequences fit go to the group's
   * actor; one naming a sequence beyond 2^53 owns nothing and is stale
   * there and then. Outcomes keep the callers' order.
   */
  async #receipts<T>(
    params: ReceiptParams,
    operation: (items: HeldReceipt[], settle: Settle<ReceiptOutcome<T>[]>) => Operation,
    signal?: AbortSignal,
  ): Promise<ReceiptOutcome<T>[]> {
    this.#member(params);
    const held: HeldReceipt[] = [];
    for (const r of params.receipts) if (fits(r.sequence)) held.push({ sequence: Number(r.sequence), receipt: r.receipt });
    const answered =
      held.length === 0
        ? []
        : await new Promise<ReceiptOutcome<T>[]>((resolve, reject) => this.#actor(params.lane, params.group).enqueue(operation(held, { resolve, reject, signal })));
    let next = 0;
    return params.receipts.map((r) => (fits(r.sequence) ? answered[next++]! : { error: stale(r.sequence) }));
  }

  async inspect(params: GroupTarget, signal?: AbortSignal): Promise<GroupInspection> {
    this.#member(params);
    return this.#actor(params.lane, params.group).inspect(this.registry.bounds, signal);
  }

  async recover(params: RecoverParams, signal?: AbortSignal): Promise<RecoveryResult> {
    this.#member(params);
    const { project, lane, group } = params;
    const recoverers = this.namespace.config.lanes.find((l) => l.id === lane)?.recoverers.get(group) ?? [];
    if (!recoverers.includes(project)) {
      throw new LaneError("lane_forbidden", `project ${project} may not recover group ${group} of lane ${lane}`);
    }
    const request = heldRecovery(params);
    return new Promise<RecoveryResult>((resolve, reject) => this.#actor(lane, group).enqueue({ kind: "recover", request, settle: { resolve, reject, signal } }));
  }

  /** Each group's state as this process last saw it, from memory (no broker request): for metrics. */
  observe(): GroupObservation[] {
    const observed: GroupObservation[] = [];
    for (const actor of this.#actors.values()) {
      const one = actor.observe();
      if (one !== undefined) observed.push(one);
    }
    return observed;
  }

  /** Stops every group's watch and the signal subscription. */
  close(): void {
    this.#closed = true;
    this.#signals?.unsubscribe();
    this.#signals = undefined;
    for (const actor of this.#actors.values()) actor.close();
  }
}

/**
 * The admissions record: every group's admitted slot count, so that the
 * sum of their worst-case sizes plus the headroom for the largest single
 * write never exceeds the bucket.
 */
class Admissions {
  readonly #perSlotLimit: number;
  readonly headroom: number;

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
  ) {
    this.#perSlotLimit = slotLimit(namespace.config.bounds);
    this.headroom = admissionHeadroom(namespace.config);
  }

  get slotLimit(): number {
    return this.#perSlotLimit;
  }

  /**
   * Admits `key` for `slots` slots (no-op when it already is). Fails with
   * lane_capacity, changing nothing, when the bucket has no room for it.
   */
  async admit(target: { key: string; lane: string; group: string }, slots: number, signal?: AbortSignal): Promise<void> {
    const bucket = this.namespace.groups;
    const limit = this.namespace.config.bounds.ledgerBytes;
    for (let attempt = 0; attempt < 20; attempt++) {
      const entry = await this.store.kvGet(bucket, ADMISSIONS_KEY, signal);
      const admitted = entry ? decodeAdmissions(entry.value) : {};
      const current = admitted[target.key] ?? 0;
      if (current >= slots) return;
      const next = { ...admitted, [target.key]: slots };
      const total = Object.values(next).reduce((sum, n) => sum + worstCaseLedgerBytes(n), 0);
      if (total + this.headroom > limit) {
        throw new LaneError(
          "lane_capacity",
          current === 0
            ? `the namespace's group bucket (ledger_bytes ${limit}) has no room to admit group ${target.group} of lane ${target.lane}: every admitted group keeps its reserved bytes for good, so admitting more groups needs a larger ledger_bytes (in a new namespace generation)`
            : `the namespace's group bucket (ledger_bytes ${limit}) has no room for another delivery slot of group ${target.group} of lane ${target.lane} (it holds ${current}): completing work (ack) frees the group's own slots for new claims at once; more slots need a larger ledger_bytes (in a new namespace generation)`,
        );
      }
      const value = encodeAdmissions(next);
      const written = entry === undefined ? await this.store.kvCreate(bucket, ADMISSIONS_KEY, value, signal) : await this.store.kvUpdate(bucket, ADMISSIONS_KEY, value, entry.revision, signal);
      if (written !== "exists" && written !== "conflict") return;
      await jitter(attempt);
    }
    throw new LaneError("lane_unavailable", `admission of group ${target.group} of lane ${target.lane} kept conflicting with other admissions; retry`);
  }
}

interface ActorOptions {
  readonly store: LaneStore;
  readonly namespace: Namespace;
  readonly admissions: Admissions;
  readonly lane: string;
  readonly group: string;
  readonly now: () => number;
  /** This process's id on the group's signal subject and in its writer lease. */
  readonly process: string;
  readonly log: Logger;
  /** How this group's gaps can be accepted (said in lane_cursor errors). */
  readonly gapAdvice: string;
}

/** A state as this process last saw it, with its revision. */
interface Cached {
  readonly ledger: Ledger;
  readonly revision: number;
}

/** One group's operations, combined into as few CAS writes as possible. */
class GroupActor {
  readonly #key: string;
  readonly #store: LaneStore;
  readonly #namespace: Namespace;
  readonly #admissions: Admissions;
  readonly #lane: string;
  readonly #group: string;
  readonly #now: () => number;
  readonly #options: ActorOptions;
  #cache: Cached | undefined;
  #receipts: { secret: Uint8Array; receipts: GroupReceipts } | undefined;
  #queue: Operation[] = [];
  #running = false;
  #closed = false;
  /** Envelopes of recently read records of the lane, by sequence. */
  readonly #records = new Map<number, CachedRecord>();
  /** The lane's records read ahead of the cursor (see ReadAhead). */
  #ahead: ReadAhead | undefined;
  /** Contention with other processes (see the module's comment). */
  readonly #contention = {
    /** Until when this process lets its writes wait for another process's. */
    yieldUntil: 0,
    /** How long each of those writes waits at most. */
    yieldMs: YIELD_MS,
    /** Last sign of contention (epoch ms). */
    lastSeen: 0,
    /** The watch of the group's key, while contended. */
    watch: undefined as { stop: () => void; generation: number } | undefined,
    watchStarting: false,
    /** Not before this time may a watch that failed to start be tried again (epoch ms). */
    watchRetryAt: 0,
    /** Wakes whoever waits for the cache to move. */
    waiters: new Set<() => void>(),
    /** Revisions this process wrote lately (a watch shows them too). */
    own: new Set<number>(),
    /** The value of this process's write in flight: a watch may show it before its acknowledgement arrives. */
    inFlight: undefined as Uint8Array | undefined,
    /** The revision of the last write this process saw from another process. */
    foreignRevision: 0,
  };

  /** The group's writer lease as this process knows it (see group-forwarding.ts and the module's comment). */
  readonly #writer = {
    /** direct: this process writes the group itself; writer: it holds the lease; forwarder: it forwards to `target`. */
    role: "direct" as "direct" | "writer" | "forwarder",
    target: undefined as string | undefined,
    /** The end of the lease of `target` (forwarder) or of this process's own (writer), by the writer's clock. */
    until: 0,
    /** The revision of the lease key this process last wrote (writer). */
    revision: 0,
    renewTimer: undefined as NodeJS.Timeout | undefined,
    /** The look at the lease due when a writer that did not answer has lost its lease (see #lookAgainAt). */
    lookTimer: undefined as NodeJS.Timeout | undefined,
    looking: false,
    lastLook: 0,
    /** The last operation this process's callers or forwarders brought (epoch ms). */
    lastActive: 0,
    /** Writers that did not answer, with the end of the lease they held then: not forwarded to again under that lease. */
    failed: new Map<string, number>(),
    /** When the next lease ends or retry falls due, as the writer said in its last answer. */
    remoteNext: undefined as number | undefined,
  };
  /** Claims held for settlements on their way (see HOLD_MS). */
  #held: Operation[] = [];
  #heldTimer: NodeJS.Timeout | undefined;

  constructor(options: ActorOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#namespace = options.namespace;
    this.#admissions = options.admissions;
    this.#lane = options.lane;
    this.#group = options.group;
    this.#now = options.now;
    this.#key = groupKey(options.lane, options.group);
  }

  enqueue(operation: Operation): void {
    this.#writer.lastActive = this.#now();
    this.#queue.push(operation);
    // Settlements free leases: the claims held for them go with them.
    if (this.#held.length > 0 && operation.kind !== "claim" && operation.kind !== "recover") this.#releaseHeld();
    this.#kick();
  }

  #kick(): void {
    if (this.#running) return;
    // The first operation waits one turn of the event loop, so that the
    // calls arriving together (a burst of acks) share its compare-and-set.
    this.#running = true;
    setImmediate(() => void this.#drain());
  }

  /** Holds claims refused for max_pending until settlements arrive or HOLD_MS passed, once each. */
  #hold(claims: Operation[]): void {
    const now = this.#now();
    for (const claim of claims) if (claim.kind === "claim") claim.holdUntil ??= now + HOLD_MS;
    this.#held.push(...claims);
    // Applied again when the earliest hold ends (then refused, unless something was freed meanwhile).
    clearTimeout(this.#heldTimer);
    const earliest = Math.min(...this.#held.map((op) => (op.kind === "claim" ? (op.holdUntil ?? now) : now)));
    this.#heldTimer = setTimeout(() => {
      this.#heldTimer = undefined;
      this.#releaseHeld();
      this.#kick();
    }, Math.max(1, earliest - now + 1));
  }

  #releaseHeld(): void {
    clearTimeout(this.#heldTimer);
    this.#heldTimer = undefined;
    this.#queue.push(...this.#held.splice(0));
  }

  close(): void {
    this.#closed = true;
    this.#contention.watch?.stop();
    this.#contention.watch = undefined;
    clearTimeout(this.#writer.renewTimer);
    this.#writer.renewTimer = undefined;
    clearTimeout(this.#writer.lookTimer);
    this.#writer.lookTimer = undefined;
    if (this.#held.length > 0) {
      this.#releaseHeld();
      this.#kick();
    }
  }

  /** Another process says a write of its own on this group lost (`streak` times in a row before). */
  onSignal(streak: number): void {
    const c = this.#contention;
    const now = this.#now();
    c.lastSeen = now;
    // Another process writes this group too: one of them should write for both.
    void this.#coordinate();
    if (this.#writer.role === "forwarder") return;
    // One loss is what optimistic writes cost: follow the group, do not wait.
    if (streak < STARVING_STREAK) {
      void this.#ensureWatch();
      return;
    }
    const wait = Math.min(YIELD_MAX_MS, YIELD_MS * 2 ** Math.min(streak - STARVING_STREAK, 10));
    c.yieldMs = c.yieldUntil > now ? Math.max(c.yieldMs, wait) : wait;
    c.lastSeen = now;
    c.yieldUntil = now + CONTENTION_WINDOW_MS + c.yieldMs;
    void this.#ensureWatch();
  }

  /** The group's state as last seen, from memory only; undefined before it was first read. */
  observe(): GroupObservation | undefined {
    const cached = this.#cache;
    if (cached === undefined) return undefined;
    const now = this.#now();
    let leases = 0;
    let oldest: number | undefined;
    for (const d of cached.ledger.deliveries) {
      if (d.status === "leased" && d.dueAt > now) leases += 1;
      // Deliveries are in sequence order, so the first whose record this process read is the oldest known.
      oldest ??= this.#records.get(d.sequence)?.storedAt;
    }
    const unfinished = cached.ledger.deliveries.length;
    return { lane: this.#lane, group: this.#group, leases, retriesWaiting: unfinished - leases, cursor: cached.ledger.cursor, unfinished, oldestUnfinishedStoredAt: oldest };
  }

  /** When the next lease ends or retry falls due, from the last state seen (or the writer's last answer, while forwarding). */
  nextEligibleAt(): number | undefined {
    const now = this.#now();
    const remote = this.#writer.remoteNext;
    if (this.#writer.role === "forwarder" && remote !== undefined && remote > now) return remote;
    let next: number | undefined;
    for (const d of this.#cache?.ledger.deliveries ?? []) if (d.dueAt > now && (next === undefined || d.dueAt < next)) next = d.dueAt;
    return next;
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0) {
        const batch = this.#queue.splice(0);
        const target = this.#forwardTarget(batch);
        const failed = (error: unknown) => {
          for (const op of batch) op.settle.reject(error);
        };
        // Forwards do not wait for each other: the writer orders them (its compare-and-set decides).
        if (target !== undefined) void this.#forward(batch, target).catch(failed);
        else await this.#apply(batch).catch(failed);
      }
    } finally {
      this.#running = false;
    }
  }

  #receiptsFor(ledger: Ledger): GroupReceipts {
    if (this.#receipts === undefined || !Buffer.from(this.#receipts.secret).equals(Buffer.from(ledger.secret))) {
      this.#receipts = { secret: ledger.secret, receipts: new GroupReceipts(ledger.secret, this.#lane, this.#group) };
    }
    return this.#receipts.receipts;
  }

  #draftOf(ledger: Ledger, bounds: LaneBounds): LedgerDraft {
    return new LedgerDraft(ledger, { bounds, now: this.#now(), receipts: this.#receiptsFor(ledger), gapAdvice: this.#options.gapAdvice });
  }

  /** Remembers a state if it is newer than the one this process holds, and wakes whoever waits for it. */
  #remember(state: Cached): void {
    if (this.#cache !== undefined && this.#cache.revision >= state.revision) return;
    this.#cache = state;
    for (const wake of [...this.#contention.waiters]) wake();
  }

  async #load(signal?: AbortSignal): Promise<Cached | undefined> {
    const entry = await this.#store.kvGet(this.#namespace.groups, this.#key, signal);
    if (entry === undefined) return undefined;
    const state = { ledger: decodeLedger(entry.value), revision: entry.revision };
    this.#saw(entry.revision, entry.value);
    // A read is the truth as of now, even when a watch showed a later revision meanwhile: keep the newer.
    this.#remember(state);
    return this.#cache!.revision >= state.revision ? this.#cache : state;
  }

  /** The group's state, created (one admitted slot) on its first claim. */
  async #stateFor(create: boolean, signal?: AbortSignal): Promise<Cached | undefined> {
    const current = this.#cache ?? (await this.#load(signal));
    if (current !== undefined || !create) return current;
    // An initial poll reserves one reusable slot: its first claim needs no growth.
    await this.#admissions.admit({ key: this.#key, lane: this.#lane, group: this.#group }, 1, signal);
    const ledger = emptyLedger(1);
    const created = await this.#store.kvCreate(this.#namespace.groups, this.#key, encodeLedger(ledger), signal);
    if (created === "exists") return this.#load(signal);
    this.#remember({ ledger, revision: created });
    return this.#cache;
  }

  async #apply(arrived: Operation[]): Promise<void> {
    // Operations that arrived together are concurrent: any order is a valid
    // one. Settlements go first, so that the acks travelling with a claim
    // free the slots and leases it may take.
    const batch = [...arrived.filter((op) => op.kind !== "claim"), ...arrived.filter((op) => op.kind === "claim")];
    const bounds = this.#namespace.config.bounds;
    const signal = anySignal(batch.map((op) => op.settle.signal));
    const claims = batch.filter((op) => op.kind === "claim");
    const wanted = claims.reduce((n, c) => n + (c.kind === "claim" ? c.max : 0), 0);
    const recovers = batch.some((op) => op.kind === "recover");
    let grownTo = 0;
    let capacityError: unknown;
    // A recovery quotes a revision: compare it with the state as it is now, not as this process last saw it.
    let reload = recovers;
    for (let attempt = 0; ; attempt++) {
      await this.#yieldTurn(signal);
      if (reload) {
        reload = false;
        await this.#load(signal);
      }
      const state = await this.#stateFor(claims.length > 0, signal);
      if (state === undefined) {
        // No state and no claim: nothing was ever leased in this group.
        for (const op of batch) settleUninitialized(op);
        return;
      }
      const draft = this.#draftOf(state.ledger, bounds);
      if (grownTo > 0) draft.growTo(grownTo);
      // A recovery needs the lane's range; a claim asks for it only when what it read ahead cannot prove the work is there.
      let range = recovers ? await this.#range(signal) : undefined;
      const candidates =
        claims.length > 0
          ? await this.#candidates(draft, wanted, settlements(batch), signal, async () => (range ??= await this.#range(signal)))
          : undefined;
      const outcomes: (() => void)[] = [];
      const leasedBy = new Map<Operation, number>();
      const held: Operation[] = [];
      let shortfall = 0;
      let blockedBy: "slots" | "history" | undefined;
      for (const op of batch) {
        const rollback = op.kind === "claim" || op.kind === "recover" ? draft.mark() : undefined;
        try {
          const outcome = this.#one(op, draft, candidates, range, state.revision, (leased, blocked) => {
            leasedBy.set(op, leased);
            if (blocked !== undefined && op.kind === "claim") {
              shortfall += Math.max(1, op.max - leased);
              blockedBy ??= blocked;
            }
          });
          if (outcome === HOLD) {
            rollback?.();
            held.push(op);
            outcomes.push(() => undefined);
          } else {
            outcomes.push(outcome);
          }
        } catch (error) {
          rollback?.();
          outcomes.push(() => op.settle.reject(error));
        }
      }
      // Fresh work waits for slots (or for the completion-history budget more slots bring): admit as many as the claims miss (once per batch), then apply again.
      if (shortfall > 0 && grownTo === 0 && capacityError === undefined) {
        const limit = this.#admissions.slotLimit;
        if (draft.slots < limit) {
          try {
            grownTo = Math.min(limit, draft.slotsFor(shortfall));
            await this.#admissions.admit({ key: this.#key, lane: this.#lane, group: this.#group }, grownTo, signal);
            continue;
          } catch (error) {
            grownTo = 0;
            if (!(error instanceof LaneError && error.reason === "lane_capacity")) throw error;
            capacityError = error;
          }
        } else {
          capacityError = blockedBy === "history" ? this.#historyFull(draft) : this.#slotsFull(draft);
        }
      }
      if (draft.changed) {
        const ledger = draft.toLedger();
        const value = encodeLedger(ledger);
        this.#contention.inFlight = value;
        const written = await this.#store.kvUpdate(this.#namespace.groups, this.#key, value, state.revision, signal).finally(() => (this.#contention.inFlight = undefined));
        if (written === "conflict") {
          // Another process wrote the group: follow it, tell it, and apply
          // again on the state it wrote. Its write may have used the slots
          // admitted here: admit again if short.
          grownTo = 0;
          if (signal?.aborted) throw new LaneError("lane_canceled", "the call was canceled while its group ledger was contended");
          await this.#conflicted(state.revision, attempt, signal);
          continue;
        }
        this.#wrote(written);
        this.#remember({ ledger, revision: written });
      }
      for (const [i, answer] of outcomes.entries()) {
        const op = batch[i]!;
        // A claim that got nothing because no slot could be admitted learns why.
        if (op.kind === "claim" && capacityError !== undefined && leasedBy.get(op) === 0) op.settle.reject(capacityError);
        else answer();
      }
      if (held.length > 0) this.#hold(held);
      return;
    }
  }

  #slotsFull(draft: LedgerDraft): LaneError {
    const bounds = this.#namespace.config.bounds;
    return new LaneError(
      "lane_capacity",
      `group ${this.#group} of lane ${this.#lane} holds ${draft.deliveries.length} unfinished deliveries (leased, waiting for a retry, or released), its limit (max_ledger ${bounds.maxLedger} within the 512 KiB state bound): completing work (ack) frees slots at once; deliveries waiting for a retry keep theirs, and those whose records left retention free theirs only when a recoverer retires them`,
    );
  }

  #historyFull(draft: LedgerDraft): LaneError {
    const oldest = draft.history.buckets[0];
    const frees = oldest === undefined ? "" : `; the oldest leaves at ${new Date(oldest.lastAt + this.#namespace.config.bounds.ackRetentionMs).toISOString()}`;
    return new LaneError(
      "lane_capacity",
      `the completion history of group ${this.#group} of lane ${this.#lane} is full (${draft.historyBytes()} of ${historyBudget(draft.slots)} bytes, with ${COMPLETION_RESERVE_BYTES} kept for the completion of each of its ${draft.deliveries.length} unfinished deliveries): completions out of sequence order and at later attempts take its room until their history bucket leaves ack_retention${frees}`,
    );
  }

  // ------------------------------------------------------------- contention between processes

  /** Tells this process's writes from another's, for the turns (see #yieldTurn). */
  #saw(revision: number, value: Uint8Array): void {
    const c = this.#contention;
    // This process's own write, shown before its acknowledgement arrived, is not another process's turn.
    if (c.inFlight !== undefined && Buffer.from(c.inFlight).equals(Buffer.from(value))) this.#wrote(revision);
    if (!c.own.has(revision)) c.foreignRevision = Math.max(c.foreignRevision, revision);
  }

  /** Records a revision this process wrote. */
  #wrote(revision: number): void {
    const own = this.#contention.own;
    own.add(revision);
    if (own.size > 64) own.delete(own.values().next().value!);
  }

  /** A CAS lost to another process: tell it, follow the group, and wait to be shown the newer state. */
  async #conflicted(revision: number, attempt: number, signal?: AbortSignal): Promise<void> {
    const c = this.#contention;
    c.lastSeen = this.#now();
    void this.#coordinate();
    await this.#signal(attempt);
    await this.#ensureWatch(signal);
    if (!(await this.#waitNewer(revision, CONFLICT_WAIT_MS, signal))) {
      await this.#load(signal);
      // Not followed (the watch could not start): repeated losses back off a little.
      if (attempt >= 3 && c.watch === undefined) await jitter(attempt - 3);
    }
  }

  /** Waits until the cache holds a revision above `revision`; false after `ms`. */
  #waitNewer(revision: number, ms: number, signal?: AbortSignal): Promise<boolean> {
    const newer = () => (this.#cache?.revision ?? 0) > revision;
    if (newer()) return Promise.resolve(true);
    if (this.#contention.watch === undefined) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.#contention.waiters.delete(wake);
        resolve(newer());
      };
      const wake = () => {
        if (newer()) done();
      };
      const onAbort = () => done();
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#contention.waiters.add(wake);
    });
  }

  /**
   * While another process says it lost to this one, each write waits until
   * this process has seen a write of another process (or YIELD_MS passed).
   */
  async #yieldTurn(signal?: AbortSignal): Promise<void> {
    const c = this.#contention;
    const now = this.#now();
    if (c.yieldUntil <= now) {
      if (c.watch !== undefined && now - c.lastSeen > WATCH_IDLE_MS) {
        c.watch.stop();
        c.watch = undefined;
      }
      return;
    }
    const seen = c.foreignRevision;
    if ((this.#cache?.revision ?? 0) <= seen) {
      // The last write seen is another process's: it is this process's turn.
      return;
    }
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        c.waiters.delete(wake);
        resolve();
      };
      const wake = () => {
        if (c.foreignRevision > seen) done();
      };
      const timer = setTimeout(done, c.yieldMs);
      signal?.addEventListener("abort", done, { once: true });
      c.waiters.add(wake);
    });
  }

  /** Tells the other processes on this group that a CAS of this one lost (`streak` times in a row before). */
  async #signal(streak: number): Promise<void> {
    try {
      const nc = await this.#store.connection();
      nc.publish(groupSignalSubject(this.#namespace.config.namespace, this.#lane, this.#group), `${this.#options.process} ${streak}`);
    } catch {
      // Not connected: the retry will report the broker.
    }
  }

  /** Follows the group's key while contended: every write of any process refreshes the cache. */
  async #ensureWatch(signal?: AbortSignal): Promise<void> {
    const c = this.#contention;
    if (this.#writer.role === "forwarder") return; // it does not write the group: nothing to follow
    if (this.#closed || c.watchStarting || (c.watch !== undefined && c.watch.generation === this.#store.generation) || this.#now() < c.watchRetryAt) return;
    c.watch?.stop();
    c.watch = undefined;
    c.watchStarting = true;
    const generation = this.#store.generation;
    try {
      const stop = await this.#store.watchKey(
        this.#namespace.groups,
        this.#key,
        (value, revision) => {
          this.#saw(revision, value);
          if (revision <= (this.#cache?.revision ?? 0)) return;
          let ledger: Ledger;
          try {
            ledger = decodeLedger(value);
          } catch {
            return; // a value this Laneway refuses: the next read reports it
          }
          this.#remember({ ledger, revision });
        },
        () => {
          if (c.watch?.generation === generation) c.watch = undefined;
        },
        signal,
      );
      c.watch = { stop, generation };
      if (this.#closed) stop();
    } catch {
      // Not watched: conflicts read the key instead, and the watch is tried again a little later.
      c.watchRetryAt = this.#now() + 5_000;
    } finally {
      c.watchStarting = false;
    }
  }

  // ------------------------------------------------------------- one writer per group (group-forwarding.ts)

  /** The process to forward this batch to, or undefined to apply it here. */
  #forwardTarget(batch: readonly Operation[]): string | undefined {
    const w = this.#writer;
    if (w.role !== "forwarder" || w.target === undefined) return undefined;
    // Forwarded operations are applied where they arrive (never forwarded on); a recovery quotes a revision and is applied here.
    for (const op of batch) if (op.forwarded === true || op.kind === "recover") return undefined;
    return w.target;
  }

  #leaseKey(): string {
    return writerLeaseKey(this.#lane, this.#group);
  }

  #become(role: "direct" | "writer" | "forwarder", target?: string, until = 0): void {
    const w = this.#writer;
    const previous = w.role;
    const previousTarget = w.target;
    w.role = role;
    w.target = role === "forwarder" ? target : undefined;
    w.until = until;
    if (role !== "writer") {
      clearTimeout(w.renewTimer);
      w.renewTimer = undefined;
    }
    if (role === "forwarder") {
      // It no longer writes the group: nothing to follow, nobody to let go first.
      this.#contention.watch?.stop();
      this.#contention.watch = undefined;
      this.#contention.yieldUntil = 0;
    }
    if (role === "writer" && w.renewTimer === undefined) this.#scheduleRenewal();
    if (role !== previous || target !== previousTarget) {
      const fields = { lane: this.#lane, group: this.#group, process: this.#options.process };
      if (role === "writer") this.#options.log.info("this process writes the work group for the Laneway processes sharing it (writer lease)", fields);
      else if (role === "forwarder") this.#options.log.info("this process forwards the work group's operations to its writer", { ...fields, writer: target });
    }
  }

  /**
   * Another process writes this group too: finds its writer. A live lease
   * of another process makes this one forward to it; a lease that is absent
   * or over is taken by a compare-and-set of the lease key (the loser reads
   * the winner's). A writer that did not answer is not forwarded to again
   * under the same lease: this process writes directly until it ends.
   */
  async #coordinate(): Promise<void> {
    const w = this.#writer;
    const me = this.#options.process;
    if (this.#closed || w.looking || this.#now() - w.lastLook < COORDINATE_MIN_MS) return;
    w.looking = true;
    w.lastLook = this.#now();
    const bucket = metaBucket(this.#namespace.config.namespace);
    try {
      for (let attempt = 0; attempt < 3; attempt++) {
        const entry = await this.#store.kvGet(bucket, this.#leaseKey());
        const lease = entry === undefined ? undefined : decodeWriterLease(entry.value);
        const now = this.#now();
        if (lease !== undefined && lease.until > now) {
          if (lease.process === me) {
            w.revision = entry!.revision;
            this.#become("writer", undefined, lease.until);
          } else if ((w.failed.get(lease.process) ?? -1) >= lease.until) {
            this.#become("direct");
            this.#lookAgainAt(lease.until);
          } else {
            this.#become("forwarder", lease.process, lease.until);
          }
          return;
        }
        const until = now + WRITER_LEASE_MS;
        const value = encodeWriterLease({ process: me, until });
        const written = entry === undefined ? await this.#store.kvCreate(bucket, this.#leaseKey(), value) : await this.#store.kvUpdate(bucket, this.#leaseKey(), value, entry.revision);
        if (typeof written === "number") {
          w.revision = written;
          this.#become("writer", undefined, until);
          return;
        }
      }
    } catch {
      // The broker did not answer: stay as it is; the next sign of contention looks again.
    } finally {
      w.looking = false;
    }
  }

  /**
   * After a writer that did not answer: looks at the lease again once that
   * writer's lease has ended, so that one of the processes left takes it
   * then, whether or not their writes meet meanwhile.
   */
  #lookAgainAt(until: number): void {
    const w = this.#writer;
    clearTimeout(w.lookTimer);
    w.lookTimer = setTimeout(() => {
      w.lookTimer = undefined;
      if (this.#closed || w.role !== "direct") return;
      w.lastLook = 0;
      void this.#coordinate();
    }, Math.max(0, until - this.#now()) + COORDINATE_MIN_MS);
    w.lookTimer.unref?.();
  }

  /** While this process writes for others, it renews its lease every third of it; an idle group's lease lapses. */
  #scheduleRenewal(): void {
    const w = this.#writer;
    w.renewTimer = setTimeout(() => {
      w.renewTimer = undefined;
      void this.#renew();
    }, WRITER_LEASE_MS / 3);
    w.renewTimer.unref?.();
  }

  async #renew(): Promise<void> {
    const w = this.#writer;
    if (this.#closed || w.role !== "writer") return;
    const now = this.#now();
    if (now - w.lastActive > WRITER_LEASE_MS) {
      // Nobody used the group for a whole lease: let it lapse; the next contention elects a writer again.
      this.#become("direct");
      return;
    }
    const until = now + WRITER_LEASE_MS;
    try {
      const written = await this.#store.kvUpdate(metaBucket(this.#namespace.config.namespace), this.#leaseKey(), encodeWriterLease({ process: this.#options.process, until }), w.revision);
      if (w.role !== "writer") return;
      if (written === "conflict") {
        // Taken over (this process was too slow to renew): find the writer.
        this.#become("direct");
        w.lastLook = 0;
        void this.#coordinate();
        return;
      }
      w.revision = written;
      w.until = until;
    } catch {
      // Not renewed this time: the lease may lapse, and another process take it (then writes conflict and this one looks again).
    }
    if (w.role === "writer" && w.renewTimer === undefined) this.#scheduleRenewal();
  }

  /**
   * Sends the batch to the group's writer and answers each operation as it
   * answered. A writer that does not answer within FORWARD_TIMEOUT_MS (or
   * has no subscription any more: it ended) is not asked again under its
   * lease: this batch and the next are written here, optimistically.
   * Operations the writer applied but whose answer was lost are at least
   * once, as for a caller whose response was lost: a lease runs out and is
   * delivered again; an ack or nack applied again answers duplicate.
   */
  async #forward(batch: Operation[], target: string): Promise<void> {
    const w = this.#writer;
    let answer: ForwardAnswer;
    try {
      const nc = await this.#store.connection();
      const request: ForwardedBatch = { ops: batch.map(wireOperation) };
      const timeout = Math.min(FORWARD_TIMEOUT_MS, this.#namespace.config.bounds.operationTimeoutMs);
      const reply = await nc.request(forwardSubject(this.#namespace.config.namespace, this.#lane, this.#group, target), encodeJson(request), { timeout });
      answer = decodeJson<ForwardAnswer>(reply.data);
      if (!Array.isArray(answer.results) || answer.results.length !== batch.length) throw new Error("an answer of another shape");
    } catch (error) {
      if (w.role === "forwarder" && w.target === target) {
        this.#options.log.info("the work group's writer did not answer: this process writes the group itself until the writer lease ends", {
          lane: this.#lane,
          group: this.#group,
          process: this.#options.process,
          writer: target,
        });
        w.failed.set(target, w.until);
        if (w.failed.size > 16) w.failed.delete(w.failed.keys().next().value!);
        this.#become("direct");
        this.#lookAgainAt(w.failed.get(target)!);
      }
      // Whether the writer applied the batch is unknown unless nobody listened
      // on its subject (it had ended). Claims and renewals are applied here
      // again: a claim applied twice leases one more delivery that runs out,
      // a renewal extends what it extended. Acks and nacks are not: the
      // writer may have completed them, and applied again after the
      // completion left ack_retention they would answer lane_stale for work
      // that was done. Their callers learn that the outcome is unknown and
      // send them again, as after any lost answer.
      const undelivered = error instanceof RequestError && error.isNoResponders();
      const again = undelivered ? batch : batch.filter((op) => op.kind === "claim" || op.kind === "renew");
      if (again.length < batch.length) {
        const unknown = new LaneError(
          "lane_unavailable",
          "the work group's writing process did not answer, so whether it applied this ack or nack is unknown: send it again with the same receipt (an ack it applied answers duplicate)",
        );
        for (const op of batch) if (!again.includes(op)) op.settle.reject(unknown);
      }
      // Applied here (or forwarded to a writer found meanwhile), in turn with this process's other operations.
      this.#queue.unshift(...again);
      this.#kick();
      return;
    }
    if (w.role === "forwarder" && w.target === target) {
      if (answer.writer === target) w.until = Math.max(w.until, answer.until ?? 0);
      else if (answer.writer !== undefined && answer.writer !== this.#options.process) this.#become("forwarder", answer.writer, answer.until ?? 0);
      else {
        // The target no longer writes the group: write it here, and look for its writer when writes conflict.
        this.#become("direct");
      }
    }
    w.remoteNext = answer.next;
    for (const [i, op] of batch.entries()) {
      try {
        await this.#settleForwarded(op, answer.results[i]!);
      } catch (error) {
        op.settle.reject(error);
      }
    }
  }

  async #settleForwarded(op: Operation, result: WireResult): Promise<void> {
    if ("err" in result) return op.settle.reject(errorOf(result.err));
    if (op.kind === "claim") {
      if (!("claim" in result)) throw new Error("the writer answered a claim with another operation's result");
      const deliveries: WorkDelivery[] = [];
      for (const d of result.claim) {
        const record = d.r !== undefined ? recordOfWire(d.r, d.s) : await this.#readRecord(d.s);
        deliveries.push({ record, receipt: d.receipt, attempt: d.a, leaseExpiresAt: d.e });
      }
      op.settle.resolve(deliveries);
      return;
    }
    if (op.kind === "recover" || !("items" in result) || result.items.length !== op.items.length) throw new Error("the writer answered a receipt operation with another operation's result");
    const outcomes = result.items.map((item) => ("ok" in item ? { ok: item.ok } : { error: errorOf(item.err) }));
    (op.settle as Settle<ReceiptOutcome<unknown>[]>).resolve(outcomes);
  }

  /** A leased record the writer's answer had no room for. */
  async #readRecord(sequence: number): Promise<LaneRecord> {
    const cached = this.#records.get(sequence);
    if (cached !== undefined) return recordOf(cached.envelope, sequence);
    const stored = await this.#store.bySequence(this.#namespace.streams.get(this.#lane)!, sequence);
    const envelope = stored === undefined ? undefined : decodeEnvelope(stored.data);
    if (envelope === undefined) throw new LaneError("lane_unavailable", `the record of delivery ${sequence} could not be read; its lease runs out and it is delivered again`);
    return recordOf(envelope, sequence);
  }

  /**
   * Operations another process forwarded to this one as the group's writer:
   * applied here with this process's own (never forwarded on), answered
   * with each outcome, when the next lease ends, and whom this process
   * takes for the writer now.
   */
  async onForward(data: Uint8Array, respond: (answer: Uint8Array) => void): Promise<void> {
    let batch: ForwardedBatch;
    try {
      batch = decodeJson<ForwardedBatch>(data);
      if (!Array.isArray(batch.ops)) return;
    } catch {
      return; // not a batch of this version: no answer, and the forwarder writes the group itself
    }
    const w = this.#writer;
    w.lastActive = this.#now();
    // Forwarded to while not writing (a lease that lapsed): take the lease again.
    if (w.role !== "writer") void this.#coordinate();
    const results = await Promise.all(batch.ops.map((op) => this.#applyForwarded(op)));
    let room = ANSWER_RECORD_BYTES;
    const fitted = results.map((result) =>
      "claim" in result
        ? {
            claim: result.claim.map((d) => {
              const size = (d.r?.payload.length ?? 0) + 512;
              if (room < size) return { s: d.s, receipt: d.receipt, a: d.a, e: d.e };
              room -= size;
              return d;
            }),
          }
        : result,
    );
    const answer: ForwardAnswer = {
      results: fitted,
      ...(this.nextEligibleAt() === undefined ? {} : { next: this.nextEligibleAt() }),
      ...(w.role === "writer" ? { writer: this.#options.process, until: w.until } : w.role === "forwarder" ? { writer: w.target, until: w.until } : {}),
    };
    respond(encodeJson(answer));
  }

  #applyForwarded(op: ForwardedOperation): Promise<WireResult> {
    return new Promise<WireResult>((resolve) => {
      const fail = (error: unknown) => resolve({ err: wireError(error) });
      if (op.k === "claim") {
        const max = Math.min(64, Math.max(1, Math.floor(Number(op.max) || 1)));
        this.enqueue({
          kind: "claim",
          project: op.p,
          max,
          forwarded: true,
          settle: { resolve: (deliveries) => resolve({ claim: deliveries.map(wireDelivery) }), reject: fail, signal: undefined },
        });
        return;
      }
      const items = op.items.filter(([sequence]) => Number.isSafeInteger(sequence)).map(([sequence, receipt]) => ({ sequence, receipt: String(receipt) }));
      if (items.length !== op.items.length) return fail(new Error("a forwarded receipt of another shape"));
      const settle: Settle<ReceiptOutcome<unknown>[]> = {
        resolve: (outcomes) => resolve({ items: outcomes.map((o) => ("ok" in o ? { ok: o.ok } : { err: wireError(o.error) })) }),
        reject: fail,
        signal: undefined,
      };
      this.enqueue({ kind: op.k, project: op.p, items, forwarded: true, settle } as Operation);
    });
  }

  // ------------------------------------------------------------- reads of the lane

  async #range(signal?: AbortSignal): Promise<LaneRange> {
    const { first, last } = await this.#store.range(this.#namespace.streams.get(this.#lane)!, signal);
    return { firstRetained: first > 0 && first <= last ? first : last + 1, last };
  }

  /** Applies one operation to the draft; returns how to answer it once the CAS succeeded. */
  #one(
    op: Operation,
    draft: LedgerDraft,
    candidates: ClaimCandidates | undefined,
    range: LaneRange | undefined,
    revision: number,
    claimed: (leased: number, blocked: "slots" | "history" | undefined) => void,
  ): (() => void) | typeof HOLD {
    switch (op.kind) {
      case "claim": {
        const { leased, blocked } = draft.claim(op.project, op.max, candidates!);
        // A claim that leased nothing because the group holds max_pending live leases is capacity (429), not "no work".
        if (leased.length === 0 && draft.liveLeases() >= this.#namespace.config.bounds.maxPending) {
          // Acks on their way (sent with this claim, arriving after it) may free leases: hold it once for them.
          if ((op.holdUntil === undefined || this.#now() < op.holdUntil) && draft.liveLeasesOf(op.project) > 0) return HOLD;
          const maxPending = this.#namespace.config.bounds.maxPending;
          const next = draft.nextEligibleAt();
          throw new LaneError(
            "lane_capacity",
            `group ${this.#group} of lane ${this.#lane} holds max_pending (${maxPending}) live leases: ack or nack work, or wait for a lease to end${next === undefined ? "" : ` (the next ends at ${new Date(next).toISOString()})`}`,
          );
        }
        // Fresh work that needed a slot asks for one even when a retry took
        // this claim's turn instead (the retry turn is committed first), or
        // the group could never grow while a rejected item stays ready, and
        // it would starve fresh work.
        claimed(leased.length, blocked);
        const deliveries = leased.map((l) => this.#delivery(l));
        return () => op.settle.resolve(deliveries);
      }
      case "renew":
        return this.#each(op, (item) => draft.renew(op.project, item.sequence, item.receipt));
      case "ack":
        return this.#each(op, (item) => draft.ack(op.project, item.sequence, item.receipt));
      case "nack":
        return this.#each(op, (item) => draft.nack(op.project, item.sequence, item.receipt));
      case "recover": {
        const request = { ...op.request };
        const digest = draft.receipts.recoveryDigest(recoveryBody(request));
        const existing = draft.recoveries.find((r) => r.id === request.id);
        if (existing !== undefined) {
          if (existing.recoverer !== request.project || !Buffer.from(existing.bodyDigest).equals(Buffer.from(digest))) {
            throw new LaneError("lane_conflict", `recovery id ${request.id} was used with a different body or by another project: use a new id`);
          }
          const result = resultOf(existing);
          return () => op.settle.resolve(result);
        }
        if (request.revision !== revision) {
          throw new LaneError(
            "lane_conflict",
            `the group changed since revision ${request.revision} (it is at ${revision}): inspect it again and submit with a new request id if the recovery changes`,
          );
        }
        const record = draft.recover(request, digest, range!.firstRetained);
        const result = resultOf(record);
        return () => op.settle.resolve(result);
      }
    }
  }

  /** Receipt operations: one outcome per item; a failed item changes nothing. */
  #each<T>(op: { items: HeldReceipt[]; settle: Settle<ReceiptOutcome<T>[]> }, apply: (item: HeldReceipt) => T): () => void {
    const results: ReceiptOutcome<T>[] = op.items.map((item) => {
      try {
        return { ok: apply(item) };
      } catch (error) {
        return { error };
      }
    });
    return () => op.settle.resolve(results);
  }

  #delivery(leased: Leased): WorkDelivery {
    const cached = this.#records.get(leased.sequence);
    if (cached === undefined) throw new Error(`the record of delivery ${leased.sequence} was not read before it was leased`);
    return { record: recordOf(cached.envelope, leased.sequence), receipt: leased.receipt, attempt: leased.attempt, leaseExpiresAt: leased.leaseExpiresAt };
  }

  /**
   * How many records a read asks for beyond what the claims want: as many
   * as they want (at least 64); eight times as many while another process
   * works the group too, whose claims move the cursor past what this one
   * read (at most one scan, 512 records).
   */
  #readAheadFor(want: number, now: number): number {
    const contended = now - this.#contention.lastSeen < WATCH_IDLE_MS;
    return contended ? Math.min(SCAN_LIMIT, Math.max(READ_AHEAD, 8 * want)) : Math.max(READ_AHEAD, want);
  }

  /** Whether a record stored at `storedAt` is surely still retained now (see RETAINED_MARGIN_MS). */
  #surelyRetained(storedAt: number, now: number): boolean {
    const bounds = this.#namespace.config.bounds;
    return storedAt + bounds.retentionMs - Math.max(RETAINED_MARGIN_MS, bounds.operationTimeoutMs) > now;
  }

  /**
   * Reads what a claim may lease: the retained work after the cursor (up to
   * `wanted` records, reading at most 512 from the stream), and the records
   * of eligible retries. Fresh work comes first from what earlier claims
   * read ahead; the stream is read for the rest, `wanted` records and as
   * many more, paging on (in doubling pages) only while events are skipped;
   * the work read beyond `wanted` is kept for the next claims.
   *
   * The lane's range (a STREAM.INFO) is asked for only when the read-ahead
   * cannot answer: when the claims want more than it holds, or when its
   * records are too close to the end of their retention to prove that no
   * unclaimed work after the cursor has left (a gap is lane_cursor).
   */
  async #candidates(draft: LedgerDraft, wanted: number, settling: number, signal: AbortSignal | undefined, rangeOf: () => Promise<LaneRange>): Promise<ClaimCandidates> {
    const stream = this.#namespace.streams.get(this.#lane)!;
    const now = draft.now;
    // As many as before the read-ahead (one scan of 512 records could offer no more), however many the claims want.
    const want = Math.min(Math.max(wanted, 1), SCAN_LIMIT);
    const fresh: number[] = [];
    let examinedThrough = draft.cursor;
    const start = draft.cursor + 1;
    let next = start;
    let range: LaneRange | undefined;
    const ahead = this.#ahead;
    // Every record from the read-ahead's start on was read; while the oldest is surely retained, so is every later one (records leave only from the front).
    const aheadRetained = ahead !== undefined && ahead.from <= start && start <= ahead.through + 1 && this.#surelyRetained(ahead.oldestStoredAt, now);
    if (!aheadRetained) range = await rangeOf();
    if (ahead !== undefined && ahead.from <= start && start <= ahead.through && (aheadRetained || start >= range!.firstRetained)) {
      // What lies behind the cursor is of no use any more.
      const behind = ahead.work.findIndex((s) => s >= start);
      ahead.work.splice(0, behind < 0 ? ahead.work.length : behind);
      ahead.from = start;
      let through = range === undefined ? ahead.through : Math.min(ahead.through, range.last);
      for (const sequence of ahead.work) {
        if (sequence > through) break;
        const cached = this.#records.get(sequence);
        if (cached === undefined) {
          // Evicted from the record cache: read again from it.
          through = sequence - 1;
          break;
        }
        // Refreshed, so that the records read below cannot evict it before it is leased.
        this.#cacheRecord(sequence, cached);
        fresh.push(sequence);
        if (fresh.length >= want) {
          through = sequence;
          break;
        }
      }
      if (through >= next) {
        examinedThrough = through;
        next = through + 1;
      }
    }
    if (fresh.length < want) {
      // More is wanted than was read ahead. When what was read ahead proves
      // the cursor retained (so is every later record), the read itself
      // finds where the lane ends (a short read); otherwise ask how far the
      // lane goes, and where it starts.
      if (!aheadRetained) range ??= await rangeOf();
      const { firstRetained, last } = range ?? { firstRetained: start, last: Number.POSITIVE_INFINITY };
      let budget = SCAN_LIMIT;
      let page = 0;
      while (next >= firstRetained && fresh.length < want && next <= last && budget > 0) {
        // Each page after the first doubles, so that a run of events costs few reads.
        page = Math.max(want - fresh.length + this.#readAheadFor(want, now), page * 2);
        const count = Math.min(last - next + 1, budget, page);
        budget -= count;
        const records = await this.#store.readFrom(stream, next, count, signal);
        const from = next;
        const work: number[] = [];
        let stop = false;
        for (const record of records) {
          if (record.sequence !== next) {
            stop = true; // a gap: claims stop at it, the scan resumes there next time
            break;
          }
          const envelope = decodeEnvelope(record.data);
          const needed = fresh.length < want;
          if (envelope === undefined) {
            if (needed) throw new Error(`record ${record.sequence} of a lane stream is not a Laneway envelope`);
            stop = true; // read ahead only: the claim that reaches it fails
            break;
          }
          next += 1;
          if (envelope.kind === "work") {
            this.#cacheRecord(record.sequence, { envelope, storedAt: record.storedAt });
            work.push(record.sequence);
            if (needed) fresh.push(record.sequence);
          }
          if (needed) examinedThrough = record.sequence;
        }
        this.#readAhead(from, next - 1, work, records[0]?.storedAt ?? now);
        // A short read (a gap, or records not yet readable) ends the scan: what came is what it examined.
        if (stop || records.length < count) break;
      }
    }
    // Nothing but events up to `examinedThrough`: the cursor may pass them.
    if (fresh.length === 0 && examinedThrough > draft.cursor) {
      draft.cursor = examinedThrough;
      draft.changed = true;
    }
    const retained = new Set<number>();
    // The retries a claim may pick, in the order its rotation picks them.
    const eligible = draft.deliveries.filter((d) => isEligible(d, now));
    const pivot = eligible.findIndex((d) => d.sequence > draft.rotation);
    const rotated = pivot <= 0 ? eligible : [...eligible.slice(pivot), ...eligible.slice(0, pivot)];
    // Operations applied before the claims in this batch (a nack of an
    // expired lease, an ack, a retirement) can each make one of these
    // ineligible, moving the claims further along the rotation.
    for (const delivery of rotated.slice(0, Math.max(wanted, 1) + settling)) {
      const cached = this.#records.get(delivery.sequence);
      if (cached !== undefined && this.#surelyRetained(cached.storedAt, now)) {
        // Refreshed, so that remembering the records read below cannot evict it before it is leased.
        this.#cacheRecord(delivery.sequence, cached);
        retained.add(delivery.sequence);
        continue;
      }
      // Records leave only by age, from the front: below the first retained
      // sequence a record is gone, even when this process still remembers it.
      range ??= await rangeOf();
      if (delivery.sequence < range.firstRetained) continue;
      if (cached !== undefined) {
        this.#cacheRecord(delivery.sequence, cached);
        retained.add(delivery.sequence);
        continue;
      }
      const record = await this.#store.bySequence(stream, delivery.sequence, signal);
      const envelope = record ? decodeEnvelope(record.data) : undefined;
      if (envelope !== undefined) {
        this.#cacheRecord(delivery.sequence, { envelope, storedAt: record!.storedAt });
        retained.add(delivery.sequence);
      }
    }
    // Without the range, the read-ahead proved that nothing after the cursor left retention.
    return { fresh, firstRetained: range?.firstRetained ?? start, lastSequence: range?.last ?? examinedThrough, retained: (s) => retained.has(s) };
  }

  /** Records that sequences `from` through `through` were read, contiguously, with the work among them. */
  #readAhead(from: number, through: number, work: number[], storedAt: number): void {
    if (through < from) return;
    const ahead = this.#ahead;
    if (ahead !== undefined && ahead.from <= from && from <= ahead.through + 1) {
      // Continues (or rereads the end of) what was read: keep what lies before `from`.
      const before = ahead.work.findIndex((s) => s >= from);
      if (before >= 0) ahead.work.splice(before);
      ahead.work.push(...work);
      ahead.through = through;
    } else {
      this.#ahead = { from, through, work, oldestStoredAt: storedAt };
    }
    const current = this.#ahead!;
    // The record cache cannot hold more work than this: end the read-ahead before the rest.
    if (current.work.length > RECORD_CACHE) {
      current.through = current.work[RECORD_CACHE]! - 1;
      current.work.splice(RECORD_CACHE);
    }
  }

  #cacheRecord(sequence: number, record: CachedRecord): void {
    // The map's order is its recency: the oldest entry is evicted first.
    this.#records.delete(sequence);
    this.#records.set(sequence, record);
    if (this.#records.size > RECORD_CACHE) {
      const oldest = this.#records.keys().next().value;
      if (oldest !== undefined) this.#records.delete(oldest);
    }
  }

  async inspect(bounds: LaneBounds, signal?: AbortSignal): Promise<GroupInspection> {
    const [state, range] = await Promise.all([this.#load(signal), this.#range(signal)]);
    const { firstRetained, last } = range;
    const base = { lane: this.#lane, group: this.#group, firstRetained, lastSequence: last, maxLedger: bounds.maxLedger };
    if (state === undefined) {
      return {
        ...base,
        revision: 0,
        cursor: 0,
        missingThrough: 0,
        slots: 0,
        liveLeases: 0,
        recoveries: 0,
        recoveryHistory: [],
        deliveries: [],
        completions: [],
        historyBytes: 0,
        historyBudget: 0,
      };
    }
    const draft = this.#draftOf(state.ledger, bounds);
    const now = draft.now;
    return {
      ...base,
      revision: state.revision,
      cursor: state.ledger.cursor,
      missingThrough: state.ledger.missingThrough,
      slots: state.ledger.slots,
      liveLeases: draft.liveLeases(),
      recoveries: draft.recoveries.length,
      recoveryHistory: [...draft.recoveries].sort((a, b) => a.recordedAt - b.recordedAt).map(resultOf),
      deliveries: draft.deliveries.map((d) => ({
        sequence: d.sequence,
        project: d.holder,
        attempt: d.attempt,
        state: inspectedState(d, now),
        ...(d.status === "leased" ? { leaseExpiresAt: d.dueAt } : { retryAt: d.dueAt }),
        retained: d.sequence >= firstRetained && d.sequence <= last,
      })),
      completions: draft.history.buckets.map((b) => {
        const ranges: { first: number; last: number }[] = [];
        for (let i = 0; i < b.ranges.length; i += 2) ranges.push({ first: b.ranges[i]!, last: b.ranges[i + 1]! });
        return { firstAckedAt: b.firstAt, lastAckedAt: b.lastAt, completed: b.completed, ranges, retried: b.retried.map((sequence, i) => ({ sequence, attempt: b.attempts[i]! })) };
      }),
      historyBytes: draft.historyBytes(),
      historyBudget: historyBudget(draft.slots),
    };
  }
}

function wireOperation(op: Operation): ForwardedOperation {
  switch (op.kind) {
    case "claim":
      return { k: "claim", p: op.project, max: op.max };
    case "renew":
    case "ack":
    case "nack":
      return { k: op.kind, p: op.project, items: op.items.map((item) => [item.sequence, item.receipt] as const) };
    case "recover":
      throw new Error("a recovery is never forwarded");
  }
}

function wireDelivery(delivery: WorkDelivery): WireDelivery {
  return { s: delivery.record.sequence, receipt: delivery.receipt, a: delivery.attempt, e: delivery.leaseExpiresAt, r: wireRecord(delivery.record) };
}

/** What #one answers for a claim held for settlements on their way. */
const HOLD = Symbol("hold");

/** How many deliveries the batch's receipt operations and recoveries name. */
function settlements(batch: readonly Operation[]): number {
  let n = 0;
  for (const op of batch) {
    if (op.kind === "renew" || op.kind === "ack" || op.kind === "nack") n += op.items.length;
    else if (op.kind === "recover") n += op.request.expired.length + op.request.missing.length;
  }
  return n;
}

function settleUninitialized(op: Operation): void {
  switch (op.kind) {
    case "renew":
    case "ack":
    case "nack":
      op.settle.resolve(op.items.map((item) => ({ error: stale(item.sequence) })));
      return;
    case "recover":
      op.settle.reject(new LaneError("lane_conflict", "this group has no ledger yet (revision 0): there is nothing to recover"));
      return;
    case "claim":
      op.settle.resolve([]);
  }
}

function resultOf(record: RecoveryRecord): RecoveryResult {
  return {
    id: record.id,
    project: record.recoverer,
    cursorThrough: record.cursorThrough,
    missingThrough: record.missingThrough,
    expirations: record.expirations.map((x) => ({ project: x.project, sequence: x.sequence, attempt: x.attempt })),
    revision: record.revision,
    recordedAt: record.recordedAt,
  };
}

function anySignal(signals: (AbortSignal | undefined)[]): AbortSignal | undefined {
  // The batch stops waiting only when every caller has gone.
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length === 0 || present.length !== signals.length) return undefined;
  if (present.length === 1) return present[0];
  const controller = new AbortController();
  let remaining = present.length;
  for (const signal of present) {
    const onAbort = () => {
      remaining -= 1;
      if (remaining === 0) controller.abort(signal.reason);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  }
  return controller.signal;
}

async function jitter(attempt: number): Promise<void> {
  const ms = Math.min(200, 5 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random());
  await new Promise((resolve) => setTimeout(resolve, ms));
}
