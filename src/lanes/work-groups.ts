import { decodeEnvelope, recordOf, type Envelope } from "./envelope.js";
import { LaneError } from "./errors.js";
import {
  decodeLedger,
  emptyLedger,
  encodeLedger,
  LedgerDraft,
  recoveryBodyHash,
  slotLimit,
  worstCaseLedgerBytes,
  type ClaimCandidates,
  type Ledger,
  type Leased,
  type RecoveryRecord,
} from "./group-ledger.js";
import type { LaneStore } from "./lane-store.js";
import { admissionHeadroom } from "./ledger-capacity.js";
import type { LaneWatchers } from "./lane-watcher.js";
import { groupKey } from "./names.js";
import type { Namespace } from "./namespace.js";
import type { LaneRegistry } from "./registry.js";
import type { LaneBounds, LaneRecord } from "./types.js";

/**
 * Work groups: claims, renewals, acknowledgements, nacks, inspection and
 * recovery over each group's ledger (group-ledger.ts) in the namespace's
 * shared group bucket.
 *
 * - One actor per group in this process combines every operation that
 *   arrives while a compare-and-set is in flight into the next one: many
 *   workers acking at once cost one CAS, not one each. A CAS conflict with
 *   another process reloads the ledger and applies the operations again,
 *   with jitter, within the callers' deadlines.
 * - Capacity: the bucket's `ledger_bytes` is shared by every group of the
 *   namespace. A group's value can grow only to the worst-case size of its
 *   slots (every field at its widest, all 64 recovery records), and a
 *   group or a new slot is admitted only when the sum of every admitted
 *   worst case still leaves headroom for the largest single write. That
 *   keeps acknowledgements, nacks, renewals and recoveries — which never
 *   add slots — from ever failing for capacity, and keeps newly admitted
 *   groups from eating the headroom of existing ones. Admissions are
 *   recorded in one key of the bucket (`_admissions`), by CAS.
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

/** A group's ledger as inspection shows it (no receipts). */
export interface GroupInspection {
  readonly lane: string;
  readonly group: string;
  readonly revision: number;
  readonly cursor: number;
  readonly firstRetained: number;
  readonly lastSequence: number;
  readonly missingThrough: number;
  readonly slots: number;
  readonly maxLedger: number;
  readonly liveLeases: number;
  readonly recoveries: number;
  /** The retained recovery results, oldest first. */
  readonly recoveryHistory: readonly RecoveryResult[];
  readonly deliveries: readonly {
    readonly sequence: number;
    readonly project: string;
    readonly attempt: number;
    readonly state: "leased" | "retry_scheduled" | "released" | "acked";
    readonly leaseExpiresAt?: number;
    readonly retryAt?: number;
    readonly ackedAt?: number;
    readonly retained: boolean;
  }[];
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
 * Records a read asks for beyond what the claims still want: the work among
 * them waits in the record cache for the next claims (read-ahead).
 */
const READ_AHEAD = 16;
/** The most records the record cache holds (and so the most work a read-ahead can list). */
const RECORD_CACHE = 4_096;

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
}

type Operation =
  | { kind: "claim"; project: string; max: number; settle: Settle<WorkDelivery[]> }
  | { kind: "renew"; project: string; items: Receipt[]; settle: Settle<ReceiptOutcome<{ leaseExpiresAt: number }>[]> }
  | { kind: "ack"; project: string; items: Receipt[]; settle: Settle<ReceiptOutcome<{ ackedAt: number; duplicate: boolean }>[]> }
  | { kind: "nack"; project: string; items: Receipt[]; settle: Settle<ReceiptOutcome<{ retryAt: number; attempt: number; duplicate: boolean }>[]> }
  | { kind: "recover"; request: RecoverInput; settle: Settle<RecoveryResult> };

interface Settle<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
  readonly signal: AbortSignal | undefined;
}

export interface Receipt {
  readonly sequence: number;
  readonly receipt: string;
}

export interface RecoverInput {
  readonly id: string;
  readonly project: string;
  readonly revision: number;
  readonly cursorThrough: number;
  readonly expired: readonly Receipt[];
  readonly missing: readonly number[];
}

export class WorkGroups {
  readonly #actors = new Map<string, GroupActor>();
  readonly #admissions: Admissions;

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
    private readonly registry: LaneRegistry,
    private readonly watchers: LaneWatchers,
    private readonly now: () => number = Date.now,
  ) {
    this.#admissions = new Admissions(store, namespace);
  }

  #actor(lane: string, group: string): GroupActor {
    const key = groupKey(lane, group);
    let actor = this.#actors.get(key);
    if (actor === undefined) {
      actor = new GroupActor(this.store, this.namespace, this.#admissions, lane, group, this.now);
      this.#actors.set(key, actor);
    }
    return actor;
  }

  #member(project: string, lane: string, group: string): void {
    const members = this.namespace.config.lanes.find((l) => l.id === lane)?.groups.get(group);
    if (members === undefined || !members.includes(project)) {
      throw new LaneError("lane_forbidden", `project ${project} is not a member of group ${group} of lane ${lane}`);
    }
  }

  /**
   * Leases up to `max` deliveries; when none is eligible, waits up to
   * `waitMs` for work (a publication, a lease ending, a retry falling due).
   */
  async claim(project: string, lane: string, group: string, max: number, waitMs: number, signal?: AbortSignal): Promise<WorkDelivery[]> {
    this.#member(project, lane, group);
    const actor = this.#actor(lane, group);
    const deadline = this.now() + waitMs;
    const once = () =>
      new Promise<WorkDelivery[]>((resolve, reject) => actor.enqueue({ kind: "claim", project, max, settle: { resolve, reject, signal } }));
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

  renew(project: string, lane: string, group: string, items: readonly Receipt[], signal?: AbortSignal) {
    this.#member(project, lane, group);
    return new Promise<ReceiptOutcome<{ leaseExpiresAt: number }>[]>((resolve, reject) =>
      void this.#actor(lane, group).enqueue({ kind: "renew", project, items: [...items], settle: { resolve, reject, signal } }),
    );
  }

  ack(project: string, lane: string, group: string, items: readonly Receipt[], signal?: AbortSignal) {
    this.#member(project, lane, group);
    return new Promise<ReceiptOutcome<{ ackedAt: number; duplicate: boolean }>[]>((resolve, reject) =>
      void this.#actor(lane, group).enqueue({ kind: "ack", project, items: [...items], settle: { resolve, reject, signal } }),
    );
  }

  nack(project: string, lane: string, group: string, items: readonly Receipt[], signal?: AbortSignal) {
    this.#member(project, lane, group);
    return new Promise<ReceiptOutcome<{ retryAt: number; attempt: number; duplicate: boolean }>[]>((resolve, reject) =>
      void this.#actor(lane, group).enqueue({ kind: "nack", project, items: [...items], settle: { resolve, reject, signal } }),
    );
  }

  async inspect(project: string, lane: string, group: string, signal?: AbortSignal): Promise<GroupInspection> {
    this.#member(project, lane, group);
    return this.#actor(lane, group).inspect(this.registry.bounds, signal);
  }

  async recover(input: RecoverInput, lane: string, group: string, signal?: AbortSignal): Promise<RecoveryResult> {
    this.#member(input.project, lane, group);
    const recoverers = this.namespace.config.lanes.find((l) => l.id === lane)?.recoverers.get(group) ?? [];
    if (!recoverers.includes(input.project)) {
      throw new LaneError("lane_forbidden", `project ${input.project} may not recover group ${group} of lane ${lane}`);
    }
    return new Promise<RecoveryResult>((resolve, reject) =>
      void this.#actor(lane, group).enqueue({ kind: "recover", request: input, settle: { resolve, reject, signal } }),
    );
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
  async admit(key: string, slots: number, signal?: AbortSignal): Promise<void> {
    const bucket = this.namespace.groups;
    const limit = this.namespace.config.bounds.ledgerBytes;
    for (let attempt = 0; attempt < 20; attempt++) {
      const entry = await this.store.kvGet(bucket, ADMISSIONS_KEY, signal);
      const admitted: Record<string, number> = entry ? ((entry.json() as { g?: Record<string, number> }).g ?? {}) : {};
      if ((admitted[key] ?? 0) >= slots) return;
      const next = { ...admitted, [key]: slots };
      const total = Object.values(next).reduce((sum, n) => sum + worstCaseLedgerBytes(n), 0);
      if (total + this.headroom > limit) {
        throw new LaneError(
          "lane_capacity",
          `the namespace's group ledger bucket (ledger_bytes ${limit}) has no room for another delivery slot of group ${key}: acknowledge work, wait for ack_retention to prune, or provision a larger ledger_bytes`,
        );
      }
      const value = Buffer.from(JSON.stringify({ f: 3, g: next }), "utf8");
      const written = entry === undefined ? await this.store.kvCreate(bucket, ADMISSIONS_KEY, value, signal) : await this.store.kvUpdate(bucket, ADMISSIONS_KEY, value, entry.revision, signal);
      if (written !== "exists" && written !== "conflict") return;
      await jitter(attempt);
    }
    throw new LaneError("lane_unavailable", `admission of group ${key} kept conflicting with other admissions; retry`);
  }
}

/** One group's operations, combined into as few CAS writes as possible. */
class GroupActor {
  readonly #key: string;
  #cache: { ledger: Ledger; revision: number } | undefined;
  #queue: Operation[] = [];
  #running = false;
  /** Envelopes of recently read records of the lane, by sequence. */
  readonly #records = new Map<number, Envelope>();
  /** The lane's records read ahead of the cursor (see ReadAhead). */
  #ahead: ReadAhead | undefined;

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
    private readonly admissions: Admissions,
    private readonly lane: string,
    private readonly group: string,
    private readonly now: () => number,
  ) {
    this.#key = groupKey(lane, group);
  }

  enqueue(operation: Operation): void {
    this.#queue.push(operation);
    if (!this.#running) void this.#drain();
  }

  /** When the next lease ends or retry falls due, from the last ledger seen. */
  nextEligibleAt(): number | undefined {
    if (this.#cache === undefined) return undefined;
    return new LedgerDraft(this.#cache.ledger, this.namespace.config.bounds, this.now()).nextEligibleAt();
  }

  async #drain(): Promise<void> {
    this.#running = true;
    try {
      while (this.#queue.length > 0) {
        const batch = this.#queue.splice(0);
        await this.#apply(batch).catch((error: unknown) => {
          for (const op of batch) op.settle.reject(error);
        });
      }
    } finally {
      this.#running = false;
    }
  }

  async #load(signal?: AbortSignal): Promise<{ ledger: Ledger; revision: number } | undefined> {
    const entry = await this.store.kvGet(this.namespace.groups, this.#key, signal);
    if (entry === undefined) return undefined;
    this.#cache = { ledger: decodeLedger(entry.value), revision: entry.revision };
    return this.#cache;
  }

  /** The group's ledger, created (one admitted slot) on its first claim. */
  async #ledgerFor(create: boolean, signal?: AbortSignal): Promise<{ ledger: Ledger; revision: number } | undefined> {
    const current = this.#cache ?? (await this.#load(signal));
    if (current !== undefined || !create) return current;
    // An initial poll reserves one reusable slot: its first claim needs no growth.
    await this.admissions.admit(this.#key, 1, signal);
    const created = await this.store.kvCreate(this.namespace.groups, this.#key, encodeLedger(emptyLedger(1)), signal);
    if (created === "exists") return this.#load(signal);
    this.#cache = { ledger: emptyLedger(1), revision: created };
    return this.#cache;
  }

  async #apply(batch: Operation[]): Promise<void> {
    const bounds = this.namespace.config.bounds;
    const signal = anySignal(batch.map((op) => op.settle.signal));
    const claims = batch.filter((op) => op.kind === "claim");
    const wanted = claims.reduce((n, c) => n + (c.kind === "claim" ? c.max : 0), 0);
    const needsRange = claims.length > 0 || batch.some((op) => op.kind === "recover");
    let grownTo = 0;
    let capacityError: unknown;
    // A recovery quotes a revision: compare it with the ledger as it is now, not as this process last saw it.
    if (batch.some((op) => op.kind === "recover")) this.#cache = undefined;
    for (let attempt = 0; ; attempt++) {
      const state = await this.#ledgerFor(claims.length > 0, signal);
      if (state === undefined) {
        // No ledger and no claim: nothing was ever leased in this group.
        for (const op of batch) settleUninitialized(op);
        return;
      }
      const draft = new LedgerDraft(state.ledger, bounds, this.now());
      if (grownTo > 0) draft.growTo(grownTo);
      const range = needsRange ? await this.#range(signal) : undefined;
      const candidates = claims.length > 0 ? await this.#candidates(draft, wanted, range!, settlements(batch), signal) : undefined;
      const outcomes: (() => void)[] = [];
      const leasedBy = new Map<Operation, number>();
      let shortfall = 0;
      for (const op of batch) {
        const snapshot = snapshotOf(draft);
        try {
          outcomes.push(
            this.#one(op, draft, candidates, range, state.revision, (leased, missing) => {
              leasedBy.set(op, leased);
              shortfall += missing;
            }),
          );
        } catch (error) {
          restore(draft, snapshot);
          outcomes.push(() => op.settle.reject(error));
        }
      }
      // Fresh work waits for slots: admit as many as the claims miss (once per batch), then apply again.
      if (shortfall > 0 && grownTo === 0 && capacityError === undefined) {
        if (draft.slots < this.admissions.slotLimit) {
          try {
            grownTo = Math.min(this.admissions.slotLimit, draft.slots + shortfall);
            await this.admissions.admit(this.#key, grownTo, signal);
            continue;
          } catch (error) {
            grownTo = 0;
            if (!(error instanceof LaneError && error.reason === "lane_capacity")) throw error;
            capacityError = error;
          }
        } else {
          capacityError = new LaneError(
            "lane_capacity",
            `group ${this.group} of lane ${this.lane} tracks ${draft.slots} deliveries, its limit (max_ledger and the 512 KiB ledger bound): acknowledge work or wait for ack_retention to prune`,
          );
        }
      }
      if (draft.changed) {
        const written = await this.store.kvUpdate(this.namespace.groups, this.#key, encodeLedger(draft.toLedger()), state.revision, signal);
        if (written === "conflict") {
          // Another process wrote the group: reload and apply again. Its
          // write may have used the slots admitted here: admit again if short.
          this.#cache = undefined;
          grownTo = 0;
          if (signal?.aborted) throw new LaneError("lane_canceled", "the call was canceled while its group ledger was contended");
          await jitter(attempt);
          continue;
        }
        this.#cache = { ledger: draft.toLedger(), revision: written };
      }
      for (const [i, answer] of outcomes.entries()) {
        const op = batch[i]!;
        // A claim that got nothing because no slot could be admitted learns why.
        if (op.kind === "claim" && capacityError !== undefined && leasedBy.get(op) === 0) op.settle.reject(capacityError);
        else answer();
      }
      return;
    }
  }

  async #range(signal?: AbortSignal): Promise<{ firstRetained: number; last: number }> {
    const { first, last } = await this.store.range(this.namespace.streams.get(this.lane)!, signal);
    return { firstRetained: first > 0 && first <= last ? first : 0, last };
  }

  /** Applies one operation to the draft; returns how to answer it once the CAS succeeded. */
  #one(
    op: Operation,
    draft: LedgerDraft,
    candidates: ClaimCandidates | undefined,
    range: { firstRetained: number; last: number } | undefined,
    revision: number,
    claimed: (leased: number, slotsMissing: number) => void,
  ): () => void {
    switch (op.kind) {
      case "claim": {
        const { leased, needsSlot } = draft.claim(op.project, op.max, candidates!);
        // A claim that leased nothing because the group holds max_pending live leases is capacity (429), not "no work".
        if (leased.length === 0 && draft.liveLeases() >= this.namespace.config.bounds.maxPending) {
          throw new LaneError(
            "lane_capacity",
            `group ${this.group} of lane ${this.lane} holds max_pending (${this.namespace.config.bounds.maxPending}) live leases: ack or nack work, or wait for leases to end`,
          );
        }
        // Fresh work that needed a slot asks for one even when a retry took
        // this claim's turn instead (the retry turn is committed first), or
        // the group could never grow while a rejected item stays ready, and
        // it would starve fresh work.
        claimed(leased.length, needsSlot ? Math.max(1, op.max - leased.length) : 0);
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
        const request = op.request;
        const bodyHash = recoveryBodyHash(request);
        const existing = draft.recoveries.find((r) => r.id === request.id);
        if (existing !== undefined) {
          if (existing.p !== request.project || existing.h !== bodyHash) {
            throw new LaneError("lane_conflict", `recovery id ${request.id} was used with a different body or by another project: use a new id`);
          }
          const result = resultOf(existing);
          return () => op.settle.resolve(result);
        }
        if (request.revision !== revision) {
          throw new LaneError("lane_conflict", `the group changed since revision ${request.revision} (it is at ${revision}): inspect it again and submit with a new request id if the recovery changes`);
        }
        const record = draft.recover({ ...request, bodyHash }, range!.firstRetained, range!.last);
        const result = resultOf(record);
        return () => op.settle.resolve(result);
      }
    }
  }

  /** Receipt operations: one outcome per item; a failed item changes nothing. */
  #each<T>(op: { items: Receipt[]; settle: Settle<ReceiptOutcome<T>[]> }, apply: (item: Receipt) => T): () => void {
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
    const envelope = this.#records.get(leased.sequence);
    if (envelope === undefined) throw new Error(`the record of delivery ${leased.sequence} was not read before it was leased`);
    return { record: recordOf(envelope, leased.sequence), receipt: leased.receipt, attempt: leased.attempt, leaseExpiresAt: leased.leaseExpiresAt };
  }

  /**
   * Reads what a claim may lease: the retained work after the cursor (up to
   * `wanted` records, reading at most 512 from the stream), and the records
   * of eligible retries. Fresh work comes first from what earlier claims
   * read ahead; the stream is read for the rest, `wanted` records and a
   * little more, paging on (in doubling pages) only while events are
   * skipped; the work read beyond `wanted` is kept for the next claims.
   */
  async #candidates(
    draft: LedgerDraft,
    wanted: number,
    range: { firstRetained: number; last: number },
    settling: number,
    signal?: AbortSignal,
  ): Promise<ClaimCandidates> {
    const stream = this.namespace.streams.get(this.lane)!;
    const { firstRetained, last } = range;
    // As many as before the read-ahead (one scan of 512 records could offer no more), however many the claims want.
    const want = Math.min(Math.max(wanted, 1), SCAN_LIMIT);
    const fresh: number[] = [];
    let examinedThrough = draft.cursor;
    const start = Math.max(draft.cursor + 1, firstRetained || 1);
    if (start <= last && firstRetained > 0 && draft.cursor + 1 >= firstRetained) {
      // Here start is cursor + 1: every sequence from it on is retained (records leave only from the front).
      let next = start;
      const ahead = this.#ahead;
      if (ahead !== undefined && ahead.from <= start && start <= ahead.through) {
        // What lies behind the cursor is of no use any more.
        const behind = ahead.work.findIndex((s) => s >= start);
        ahead.work.splice(0, behind < 0 ? ahead.work.length : behind);
        ahead.from = start;
        let through = Math.min(ahead.through, last);
        for (const sequence of ahead.work) {
          if (sequence > through) break;
          const envelope = this.#records.get(sequence);
          if (envelope === undefined) {
            // Evicted from the record cache: read again from it.
            through = sequence - 1;
            break;
          }
          // Refreshed, so that the records read below cannot evict it before it is leased.
          this.#remember(sequence, envelope);
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
      let budget = SCAN_LIMIT;
      let page = 0;
      while (fresh.length < want && next <= last && budget > 0) {
        // Each page after the first doubles, so that a run of events costs few reads.
        page = Math.max(want - fresh.length + READ_AHEAD, page * 2);
        const count = Math.min(last - next + 1, budget, page);
        budget -= count;
        const records = await this.store.readFrom(stream, next, count, signal);
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
            this.#remember(record.sequence, envelope);
            work.push(record.sequence);
            if (needed) fresh.push(record.sequence);
          }
          if (needed) examinedThrough = record.sequence;
        }
        this.#readAhead(from, next - 1, work);
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
    const eligible = draft.eligibleRetries().sort((x, y) => x.s - y.s);
    const pivot = eligible.findIndex((d) => d.s > draft.rotation);
    const rotated = pivot <= 0 ? eligible : [...eligible.slice(pivot), ...eligible.slice(0, pivot)];
    // Operations applied before the claims in this batch (a nack of an
    // expired lease, an ack, a retirement) can each make one of these
    // ineligible, moving the claims further along the rotation.
    for (const delivery of rotated.slice(0, Math.max(wanted, 1) + settling)) {
      // Records leave only by age, from the front: below the first retained
      // sequence a record is gone, even when this process still remembers it.
      if (firstRetained === 0 || delivery.s < firstRetained) continue;
      const cached = this.#records.get(delivery.s);
      if (cached !== undefined) {
        // Refreshed, so that remembering the records read below cannot evict it before it is leased.
        this.#remember(delivery.s, cached);
        retained.add(delivery.s);
        continue;
      }
      const record = await this.store.bySequence(stream, delivery.s, signal);
      const envelope = record ? decodeEnvelope(record.data) : undefined;
      if (envelope !== undefined) {
        this.#remember(delivery.s, envelope);
        retained.add(delivery.s);
      }
    }
    return { fresh, freshComplete: examinedThrough >= last, firstRetained, lastSequence: last, retained: (s) => retained.has(s) };
  }

  /** Records that sequences `from` through `through` were read, contiguously, with the work among them. */
  #readAhead(from: number, through: number, work: number[]): void {
    if (through < from) return;
    const ahead = this.#ahead;
    if (ahead !== undefined && ahead.from <= from && from <= ahead.through + 1) {
      // Continues (or rereads the end of) what was read: keep what lies before `from`.
      const before = ahead.work.findIndex((s) => s >= from);
      if (before >= 0) ahead.work.splice(before);
      ahead.work.push(...work);
      ahead.through = through;
    } else {
      this.#ahead = { from, through, work };
    }
    const current = this.#ahead!;
    // The record cache cannot hold more work than this: end the read-ahead before the rest.
    if (current.work.length > RECORD_CACHE) {
      current.through = current.work[RECORD_CACHE]! - 1;
      current.work.splice(RECORD_CACHE);
    }
  }

  #remember(sequence: number, envelope: Envelope): void {
    // The map's order is its recency: the oldest entry is evicted first.
    this.#records.delete(sequence);
    this.#records.set(sequence, envelope);
    if (this.#records.size > RECORD_CACHE) {
      const oldest = this.#records.keys().next().value;
      if (oldest !== undefined) this.#records.delete(oldest);
    }
  }

  async inspect(bounds: LaneBounds, signal?: AbortSignal): Promise<GroupInspection> {
    const stream = this.namespace.streams.get(this.lane)!;
    const [state, range] = await Promise.all([this.#load(signal), this.store.range(stream, signal)]);
    const firstRetained = range.first > 0 && range.first <= range.last ? range.first : 0;
    const base = { lane: this.lane, group: this.group, firstRetained, lastSequence: range.last, maxLedger: bounds.maxLedger };
    if (state === undefined) {
      return { ...base, revision: 0, cursor: 0, missingThrough: 0, slots: 0, liveLeases: 0, recoveries: 0, recoveryHistory: [], deliveries: [] };
    }
    const now = this.now();
    const draft = new LedgerDraft(state.ledger, bounds, now);
    return {
      ...base,
      revision: state.revision,
      cursor: state.ledger.cursor,
      missingThrough: state.ledger.missing,
      slots: state.ledger.slots,
      liveLeases: draft.liveLeases(),
      recoveries: draft.recoveries.length,
      recoveryHistory: [...draft.recoveries].sort((a, b) => a.at - b.at).map(resultOf),
      deliveries: draft.deliveries.map((d) => ({
        sequence: d.s,
        project: d.p,
        attempt: d.a,
        state: d.st === "acked" ? "acked" : d.st === "retry" ? ((d.ra ?? 0) <= now ? "released" : "retry_scheduled") : (d.le ?? 0) <= now ? "released" : "leased",
        ...(d.st === "leased" ? { leaseExpiresAt: d.le! } : {}),
        ...(d.st === "retry" ? { retryAt: d.ra! } : {}),
        ...(d.st === "acked" ? { ackedAt: d.aa! } : {}),
        retained: firstRetained > 0 && d.s >= firstRetained,
      })),
    };
  }
}

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
      op.settle.resolve(
        op.items.map((item) => ({
          error: new LaneError("lane_stale", `the receipt does not own delivery ${item.sequence} of this group (its lease was reassigned, completed, released or retired, or it belongs to another project or group)`),
        })),
      );
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
    project: record.p,
    cursorThrough: record.ct,
    missingThrough: record.mt,
    expirations: record.x.map((x) => ({ project: x.p, sequence: x.s, attempt: x.a })),
    revision: record.rev,
    recordedAt: record.at,
  };
}

type Snapshot = Pick<LedgerDraft, "cursor" | "rotation" | "turn" | "missing" | "slots" | "deliveries" | "recoveries" | "changed">;

function snapshotOf(draft: LedgerDraft): Snapshot {
  return {
    cursor: draft.cursor,
    rotation: draft.rotation,
    turn: draft.turn,
    missing: draft.missing,
    slots: draft.slots,
    deliveries: [...draft.deliveries],
    recoveries: [...draft.recoveries],
    changed: draft.changed,
  };
}

function restore(draft: LedgerDraft, snapshot: Snapshot): void {
  Object.assign(draft, snapshot);
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
