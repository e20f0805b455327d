import { COMPLETION_RESERVE_BYTES, contentBytes, HistoryDraft, type CompletionBucket } from "./completion-history.js";
import { LaneError } from "./errors.js";
import { GroupReceipts, newReceiptSecret } from "./receipts.js";
import type { LaneBounds } from "./types.js";

/**
 * A work group's state machine: pure functions over the value that lives
 * in one JetStream KV key per group (state format 4, stored as the typed
 * message of proto/laneway/lane/storage/v1/group_state.proto). The group's
 * KV compare-and-set (work-groups.ts) is the ownership linearization point:
 * an operation here changes a draft, and only a successful CAS of that
 * draft makes it true.
 *
 * A delivery is one work record as this group sees it:
 *
 *   (fresh work after the cursor)
 *        │ claim (attempt 1)
 *        ▼
 *     leased ──renew──► leased (new expiry)
 *      │  │ └─lease expires─► released: eligible for a retry (its receipt may still ack it)
 *      │  └─nack─► retry scheduled ──retry_at─► released
 *      └─ack─► completed: leaves its slot at once, into the completion history
 *   released ──claim (attempt n+1, a new receipt)─► leased
 *   released + record left retention ──recover (retire)─► removed (an expiration, not a completion)
 *
 * Only unfinished deliveries (leased, scheduled, released) occupy the
 * group's delivery slots; `max_ledger` bounds them. A completion is kept in
 * the completion history (completion-history.ts): time buckets of sequence
 * ranges and retried attempts whose stored size stays within a fixed budget
 * (`HISTORY_BYTES`) however many items complete within ack_retention. A
 * repeated ack with the receipt that completed a delivery is a duplicate
 * for at least ack_retention; then, and for any other receipt, stale.
 *
 * Receipts are not stored (receipts.ts): each is an HMAC under the group's
 * secret of lane, group, holder, sequence and attempt — the ownership
 * generation, which every lease increments — and is verified by
 * recomputing it for the caller and the attempt the state holds.
 */

/** The group state format this Laneway reads and writes. */
export const GROUP_STATE_FORMAT = 4;

/** Where an unfinished delivery stands, as stored. */
export type DeliveryStatus = "leased" | "retry";

/** One unfinished delivery. */
export interface Delivery {
  /** The work record's stream sequence. */
  readonly sequence: number;
  /** The project that holds (or last held) it. */
  readonly holder: string;
  /** The attempt, from 1: the ownership generation. */
  readonly attempt: number;
  readonly status: DeliveryStatus;
  /** Lease expiry (leased) or when the retry falls due (retry), epoch ms. */
  readonly dueAt: number;
  /** The events right before `sequence` its fresh lease passed: its completion covers them. */
  readonly passed: number;
}

/** One retired delivery, as a recovery records it (never an acknowledgement). */
export interface Expiration {
  readonly project: string;
  readonly sequence: number;
  readonly attempt: number;
}

/** A stored recovery: the request's id, recoverer and body digest, and the result every retry gets. */
export interface RecoveryRecord {
  readonly id: string;
  readonly recoverer: string;
  /** HMAC of the request body under the group's secret (32 bytes). */
  readonly bodyDigest: Uint8Array;
  readonly recordedAt: number;
  /** The revision the request quoted. */
  readonly revision: number;
  readonly cursorThrough: number;
  readonly missingThrough: number;
  readonly expirations: readonly Expiration[];
}

/** A group's whole state (state format 4), decoded. */
export interface Ledger {
  /** The receipt secret (32 bytes). */
  readonly secret: Uint8Array;
  /** The last sequence examined for fresh work (taken, passed as events, or accepted by a recovery). */
  readonly cursor: number;
  /** The last sequence taken as fresh work or accepted by a recovery (≤ cursor). */
  readonly freshThrough: number;
  /** Where the next retry search starts (a sequence; it rotates). */
  readonly rotation: number;
  /** Whose turn it is when both retries and fresh work are ready. */
  readonly turn: "retry" | "fresh";
  /** The accepted missing-prefix checkpoint. */
  readonly missingThrough: number;
  /** Reusable delivery slots: a nonshrinking high-water mark. */
  readonly slots: number;
  /** Unfinished deliveries, in sequence order. */
  readonly deliveries: readonly Delivery[];
  /** The completion history, oldest bucket first. */
  readonly completions: readonly CompletionBucket[];
  readonly recoveries: readonly RecoveryRecord[];
}

/** The most recovery records a group keeps within ack_retention. */
export const MAX_RECOVERIES = 64;
/** The most deliveries one recovery may retire. */
export const MAX_RETIREMENTS = 16;
/** The serialized ledger bound of the specification. */
export const MAX_LEDGER_BYTES = 512 * 1024;
/**
 * The stored bytes of a group's completion history (its buckets' ranges
 * and retried attempts, delta-encoded) may reach its budget: a base for
 * every group, and more per delivery slot. Work completed in order costs a
 * few bytes per bucket however long it runs; what takes room is each
 * completion out of sequence order (a range of its own until its
 * neighbours complete) and each completion at a later attempt, until their
 * bucket leaves ack_retention. A slot adds to the budget because a group
 * with more unfinished deliveries completes more of them out of order.
 */
export const HISTORY_BASE_BYTES = 36 * 1024;
export const HISTORY_SLOT_BYTES = 128;

/** The completion-history budget of a group of `slots` slots. */
export function historyBudget(slots: number): number {
  return HISTORY_BASE_BYTES + HISTORY_SLOT_BYTES * slots;
}

export function emptyLedger(slots: number, secret: Uint8Array = newReceiptSecret()): Ledger {
  return { secret, cursor: 0, freshThrough: 0, rotation: 0, turn: "retry", missingThrough: 0, slots, deliveries: [], completions: [], recoveries: [] };
}

/**
 * Where an unfinished delivery stands as InspectGroup shows it: `leased`
 * while its lease is live, `retry_scheduled` while a nack's retry is not
 * due, `released` once it is eligible for a retry claim (its lease ended, or
 * its retry fell due).
 */
export type InspectedState = "leased" | "retry_scheduled" | "released";

export function inspectedState(delivery: Delivery, now: number): InspectedState {
  if (delivery.dueAt <= now) return "released";
  return delivery.status === "leased" ? "leased" : "retry_scheduled";
}

/** Whether a delivery may be leased again now: an expired lease or a due retry. */
export function isEligible(delivery: Delivery, now: number): boolean {
  return delivery.dueAt <= now;
}

/** The stored bytes of a history's content (what HISTORY_BYTES bounds). */
const frozenBytes = new WeakMap<CompletionBucket, number>();
export function historyBytes(buckets: readonly CompletionBucket[]): number {
  let total = 0;
  for (const bucket of buckets) {
    let bytes = frozenBytes.get(bucket);
    if (bytes === undefined) {
      bytes = contentBytes(bucket);
      if (Object.isFrozen(bucket)) frozenBytes.set(bucket, bytes);
    }
    total += bytes;
  }
  return total;
}

// ---------------------------------------------------------------- the state machine

/** What a claim could lease, prepared from the stream before the ledger is changed. */
export interface ClaimCandidates {
  /** Retained work records after the cursor, in sequence order (fresh work). */
  readonly fresh: readonly number[];
  /** The first retained sequence of the lane; `lastSequence + 1` when nothing is retained. */
  readonly firstRetained: number;
  /** The lane's last sequence. */
  readonly lastSequence: number;
  /** Whether a retry's record is retained. */
  readonly retained: (sequence: number) => boolean;
}

/** A recovery request, checked against the contract's rules already. */
export interface RecoveryRequest {
  readonly id: string;
  /** The authenticated recoverer. */
  readonly project: string;
  readonly revision: number;
  readonly cursorThrough: number;
  readonly expired: readonly { readonly sequence: number; readonly receipt: string }[];
  readonly missing: readonly number[];
}

/** The canonical body of a recovery request: what tells a retry from a changed request. */
export function recoveryBody(request: Pick<RecoveryRequest, "revision" | "cursorThrough" | "expired" | "missing">): string {
  return JSON.stringify([request.revision, request.cursorThrough, request.expired.map((e) => [e.sequence, e.receipt]), [...request.missing]]);
}

/** One delivery leased by a claim, with the receipt returned to the holder. */
export interface Leased {
  readonly sequence: number;
  readonly attempt: number;
  readonly leaseExpiresAt: number;
  readonly receipt: string;
}

/** What a claim leased, and what kept it from leasing more fresh work. */
export interface ClaimOutcome {
  readonly leased: Leased[];
  /**
   * Fresh work waited for more slots: for a delivery slot (`slots`), or for
   * room in the completion history (`history`) — more slots bring both.
   */
  readonly blocked: "slots" | "history" | undefined;
}

/** How a draft is made. */
export interface DraftContext {
  readonly bounds: LaneBounds;
  readonly now: number;
  readonly receipts: GroupReceipts;
  /** Said in lane_cursor errors: how this group's gaps can be accepted. */
  readonly gapAdvice: string;
}

/** A ledger being changed by one CAS worth of operations. */
export class LedgerDraft {
  readonly secret: Uint8Array;
  cursor: number;
  freshThrough: number;
  rotation: number;
  turn: "retry" | "fresh";
  missingThrough: number;
  slots: number;
  /** Unfinished deliveries, in sequence order. */
  deliveries: Delivery[];
  readonly history: HistoryDraft;
  recoveries: RecoveryRecord[];
  changed = false;
  readonly bounds: LaneBounds;
  readonly now: number;
  readonly receipts: GroupReceipts;
  readonly #gapAdvice: string;

  constructor(ledger: Ledger, context: DraftContext) {
    this.bounds = context.bounds;
    this.now = context.now;
    this.receipts = context.receipts;
    this.#gapAdvice = context.gapAdvice;
    this.secret = ledger.secret;
    this.cursor = ledger.cursor;
    this.freshThrough = ledger.freshThrough;
    this.rotation = ledger.rotation;
    this.turn = ledger.turn;
    this.missingThrough = ledger.missingThrough;
    this.slots = ledger.slots;
    this.deliveries = [...ledger.deliveries];
    this.history = new HistoryDraft(ledger.completions, this.bounds.ackRetentionMs);
    this.recoveries = [...ledger.recoveries];
    this.#prune();
  }

  toLedger(): Ledger {
    return {
      secret: this.secret,
      cursor: this.cursor,
      freshThrough: this.freshThrough,
      rotation: this.rotation,
      turn: this.turn,
      missingThrough: this.missingThrough,
      slots: this.slots,
      deliveries: [...this.deliveries],
      // Buckets are frozen once they belong to a stored state: later drafts copy before changing them.
      completions: this.history.buckets.map((b) => (Object.isFrozen(b) ? b : Object.freeze({ ...b, ranges: Object.freeze([...b.ranges]), retried: Object.freeze([...b.retried]), attempts: Object.freeze([...b.attempts]) }))),
      recoveries: [...this.recoveries],
    };
  }

  /** Completion buckets and recovery records older than ack_retention leave the state. */
  #prune(): void {
    if (this.history.prune(this.now)) this.changed = true;
    const horizon = this.now - this.bounds.ackRetentionMs;
    if (this.recoveries.some((r) => r.recordedAt <= horizon)) {
      this.recoveries = this.recoveries.filter((r) => r.recordedAt > horizon);
      this.changed = true;
    }
  }

  /** What a claim changes: restored when a claim or recovery fails part-way. */
  mark(): () => void {
    const saved = {
      cursor: this.cursor,
      freshThrough: this.freshThrough,
      rotation: this.rotation,
      turn: this.turn,
      missingThrough: this.missingThrough,
      slots: this.slots,
      deliveries: [...this.deliveries],
      recoveries: [...this.recoveries],
      changed: this.changed,
    };
    return () => Object.assign(this, saved);
  }

  liveLeases(): number {
    let live = 0;
    for (const d of this.deliveries) if (d.status === "leased" && d.dueAt > this.now) live += 1;
    return live;
  }

  /** The live leases one project holds. */
  liveLeasesOf(project: string): number {
    let live = 0;
    for (const d of this.deliveries) if (d.holder === project && d.status === "leased" && d.dueAt > this.now) live += 1;
    return live;
  }

  /** The stored bytes of the completion history now. */
  historyBytes(): number {
    return historyBytes(this.history.buckets);
  }

  /** Whether `added` more unfinished deliveries would leave room for every unfinished delivery's completion. */
  #historyRoom(added: number): boolean {
    return this.historyBytes() + COMPLETION_RESERVE_BYTES * (this.deliveries.length + added) <= historyBudget(this.slots);
  }

  /**
   * The slots that would let `extra` more fresh deliveries in: one slot
   * each, and a completion-history budget that keeps room for every
   * unfinished delivery's completion.
   */
  slotsFor(extra: number): number {
    const deliveries = this.deliveries.length + extra;
    const forHistory = Math.ceil((this.historyBytes() + COMPLETION_RESERVE_BYTES * deliveries - HISTORY_BASE_BYTES) / HISTORY_SLOT_BYTES);
    return Math.max(this.slots, deliveries, forHistory);
  }

  /** When the next delivery becomes eligible (a lease ends or a retry falls due), if any. */
  nextEligibleAt(): number | undefined {
    let next: number | undefined;
    for (const d of this.deliveries) if (d.dueAt > this.now && (next === undefined || d.dueAt < next)) next = d.dueAt;
    return next;
  }

  /** The index of the unfinished delivery of `sequence`, or -1. */
  #indexOf(sequence: number): number {
    let low = 0;
    let high = this.deliveries.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (this.deliveries[mid]!.sequence < sequence) low = mid + 1;
      else high = mid;
    }
    return this.deliveries[low]?.sequence === sequence ? low : -1;
  }

  /**
   * Leases up to `max` deliveries for `project`, alternating retries and
   * fresh work as the specification says. Returns what it leased and what
   * kept more fresh work from being leased.
   */
  claim(project: string, max: number, candidates: ClaimCandidates): ClaimOutcome {
    const leased: Leased[] = [];
    let blocked: ClaimOutcome["blocked"];
    // Unclaimed work after the cursor has left retention: explicit, until recovered.
    if (this.cursor + 1 < candidates.firstRetained) {
      throw new LaneError(
        "lane_cursor",
        `records after cursor ${this.cursor} of this group left retention before they were claimed (the first retained is ${candidates.firstRetained}): ${this.#gapAdvice}`,
      );
    }
    const fresh = candidates.fresh;
    let freshIndex = 0;
    while (freshIndex < fresh.length && fresh[freshIndex]! <= this.cursor) freshIndex += 1;
    let live = this.liveLeases();
    // The retries a claim may pick, in the order the rotation picks them.
    const eligible = this.deliveries.filter((d) => isEligible(d, this.now));
    while (leased.length < max && live < this.bounds.maxPending) {
      const freshReady = freshIndex < fresh.length;
      const retryReady = eligible.length > 0;
      const slotFree = this.deliveries.length < this.slots;
      let take: "retry" | "fresh" | undefined;
      if (retryReady && (!freshReady || this.turn === "retry")) take = "retry";
      else if (freshReady && slotFree && this.#historyRoom(1)) take = "fresh";
      else if (freshReady) {
        // Fresh work needs a new slot, or room in the completion history.
        // With retries waiting, their turn is committed first, so a failed
        // admission cannot pin the group to unsuccessful fresh attempts.
        blocked ??= slotFree ? "history" : "slots";
        if (retryReady) take = "retry";
        else break;
      } else if (retryReady) take = "retry";
      if (take === undefined) break;
      if (take === "retry") {
        const position = eligible.findIndex((d) => d.sequence > this.rotation);
        const chosen = eligible.splice(position < 0 ? 0 : position, 1)[0]!;
        if (!candidates.retained(chosen.sequence)) {
          throw new LaneError("lane_cursor", `delivery ${chosen.sequence} of this group left retention before it was acknowledged: ${this.#gapAdvice}`);
        }
        leased.push(this.#lease(chosen, project, chosen.attempt + 1, chosen.passed));
        this.rotation = chosen.sequence;
        if (freshReady) this.turn = "fresh";
      } else {
        const sequence = fresh[freshIndex]!;
        freshIndex += 1;
        leased.push(this.#lease(undefined, project, 1, sequence - this.freshThrough - 1, sequence));
        this.cursor = sequence;
        this.freshThrough = sequence;
        if (retryReady) this.turn = "retry";
      }
      live += 1;
    }
    if (leased.length > 0) this.changed = true;
    return { leased, blocked };
  }

  #lease(previous: Delivery | undefined, project: string, attempt: number, passed: number, freshSequence?: number): Leased {
    const sequence = previous?.sequence ?? freshSequence!;
    const leaseExpiresAt = this.now + this.bounds.leaseMs;
    const delivery: Delivery = { sequence, holder: project, attempt, status: "leased", dueAt: leaseExpiresAt, passed };
    if (previous !== undefined) this.deliveries[this.#indexOf(sequence)] = delivery;
    else this.deliveries.push(delivery); // fresh work lies beyond every unfinished delivery: order is kept
    return { sequence, attempt, leaseExpiresAt, receipt: this.receipts.receipt(project, sequence, attempt) };
  }

  /** The unfinished delivery a receipt owns, or lane_stale. */
  #owned(project: string, sequence: number, receipt: string): number {
    const index = this.#indexOf(sequence);
    const delivery = this.deliveries[index];
    if (delivery === undefined || delivery.holder !== project || !this.receipts.verify(receipt, project, sequence, delivery.attempt)) throw stale(sequence);
    return index;
  }

  renew(project: string, sequence: number, receipt: string): { leaseExpiresAt: number } {
    const index = this.#owned(project, sequence, receipt);
    const delivery = this.deliveries[index]!;
    if (delivery.status !== "leased" || delivery.dueAt <= this.now) throw stale(sequence);
    const leaseExpiresAt = this.now + this.bounds.leaseMs;
    this.deliveries[index] = { ...delivery, dueAt: leaseExpiresAt };
    this.changed = true;
    return { leaseExpiresAt };
  }

  /**
   * Completes a delivery: it leaves its slot at once and enters the
   * completion history. A repeat with the receipt that completed it is a
   * duplicate, answered with its history bucket's last acknowledgement time
   * (never before the original completion, at most ack_retention/16 after).
   */
  ack(project: string, sequence: number, receipt: string): { ackedAt: number; duplicate: boolean } {
    const index = this.#indexOf(sequence);
    if (index < 0) {
      const completed = this.history.find(sequence);
      if (completed !== undefined && this.receipts.verify(receipt, project, sequence, completed.attempt)) {
        return { ackedAt: completed.bucket.lastAt, duplicate: true };
      }
      throw stale(sequence);
    }
    this.#owned(project, sequence, receipt);
    const delivery = this.deliveries[index]!;
    // A leased delivery, also one whose lease expired but that nobody has
    // claimed again (its receipt still owns it); a nacked one was given up.
    if (delivery.status !== "leased") throw stale(sequence);
    this.deliveries.splice(index, 1);
    this.history.record({ from: sequence - delivery.passed, sequence, attempt: delivery.attempt, now: this.now });
    this.changed = true;
    return { ackedAt: this.now, duplicate: false };
  }

  nack(project: string, sequence: number, receipt: string): { retryAt: number; attempt: number; duplicate: boolean } {
    const index = this.#owned(project, sequence, receipt);
    const delivery = this.deliveries[index]!;
    if (delivery.status === "retry") return { retryAt: delivery.dueAt, attempt: delivery.attempt, duplicate: true };
    const retryAt = this.now + retryDelayMs(this.bounds, delivery.attempt);
    this.deliveries[index] = { ...delivery, status: "retry", dueAt: retryAt };
    this.changed = true;
    return { retryAt, attempt: delivery.attempt, duplicate: false };
  }

  /**
   * Explicit recovery (the specification's "same-namespace group
   * recovery"): accepts an expired cursor gap and retires expired,
   * unacknowledged deliveries whose records left retention, without
   * acknowledging them. The caller checked the capability, the revision and
   * the request's idempotency; `firstRetained` is the lane's first retained
   * sequence now (`lastSequence + 1` when it retains nothing).
   */
  recover(request: RecoveryRequest, bodyDigest: Uint8Array, firstRetained: number): RecoveryRecord {
    if (this.recoveries.length >= MAX_RECOVERIES) {
      const oldest = Math.min(...this.recoveries.map((r) => r.recordedAt));
      throw new LaneError(
        "lane_capacity",
        `this group holds ${MAX_RECOVERIES} recovery records, the most kept within ack_retention: the oldest leaves at ${new Date(oldest + this.bounds.ackRetentionMs).toISOString()}`,
      );
    }
    const boundary = firstRetained - 1;
    const gap = this.cursor < boundary;
    const expectedCursor = gap ? boundary : this.cursor;
    if (request.cursorThrough !== expectedCursor) {
      throw new LaneError(
        "lane_invalid",
        gap
          ? `cursor_through must be ${boundary}, the expired prefix boundary (first_retained ${firstRetained} - 1)`
          : `cursor_through must be the current cursor ${this.cursor}: there is no expired gap (first_retained ${firstRetained} - 1 is not beyond it), and it cannot advance across retained work`,
      );
    }
    const sequences = [...request.expired.map((e) => e.sequence), ...request.missing];
    if (sequences.length > MAX_RETIREMENTS) throw new LaneError("lane_invalid", `at most ${MAX_RETIREMENTS} deliveries per recovery`);
    if (new Set(sequences).size !== sequences.length) throw new LaneError("lane_invalid", "a recovery names each delivery at most once");
    const retire = (sequence: number): Delivery => {
      const delivery = this.deliveries[this.#indexOf(sequence)];
      if (delivery === undefined) {
        if (this.history.find(sequence) !== undefined) {
          throw new LaneError("lane_invalid", `delivery ${sequence} is completed (or is not work this group leased): only unacknowledged deliveries can be retired`);
        }
        throw new LaneError("lane_invalid", `delivery ${sequence} is not an unfinished delivery of this group`);
      }
      if (delivery.status === "leased" && delivery.dueAt > this.now) throw new LaneError("lane_invalid", `delivery ${sequence} holds a live lease: it cannot be retired`);
      if (sequence >= firstRetained) throw new LaneError("lane_invalid", `delivery ${sequence} is still retained: only deliveries missing from retention can be retired`);
      return delivery;
    };
    const retired: Delivery[] = [];
    for (const entry of request.expired) {
      const delivery = retire(entry.sequence);
      // The caller's own original receipt: the MAC binds the holder.
      if (delivery.holder !== request.project || !this.receipts.verify(entry.receipt, request.project, entry.sequence, delivery.attempt)) throw stale(entry.sequence);
      retired.push(delivery);
    }
    for (const sequence of request.missing) retired.push(retire(sequence));
    const gone = new Set(retired.map((d) => d.sequence));
    this.deliveries = this.deliveries.filter((d) => !gone.has(d.sequence));
    if (gap) {
      this.cursor = boundary;
      this.freshThrough = boundary;
    }
    this.missingThrough = Math.max(this.missingThrough, gap ? boundary : 0, ...retired.map((d) => d.sequence));
    const record: RecoveryRecord = {
      id: request.id,
      recoverer: request.project,
      bodyDigest,
      recordedAt: this.now,
      revision: request.revision,
      cursorThrough: this.cursor,
      missingThrough: this.missingThrough,
      expirations: retired.map((d) => ({ project: d.holder, sequence: d.sequence, attempt: d.attempt })),
    };
    this.recoveries.push(record);
    this.changed = true;
    return record;
  }

  /** Grows the slot high-water mark (after the shared bucket admitted it). */
  growTo(slots: number): void {
    if (slots > this.slots) {
      this.slots = slots;
      this.changed = true;
    }
  }
}

/** The retry delay after attempt `attempt` was nacked: retry_delay doubled per attempt, capped. */
export function retryDelayMs(bounds: Pick<LaneBounds, "retryDelayMs" | "maxRetryDelayMs">, attempt: number): number {
  const doubled = bounds.retryDelayMs * 2 ** Math.min(Math.max(attempt - 1, 0), 40);
  return Math.min(doubled, bounds.maxRetryDelayMs);
}

/** The refusal of a receipt that does not own its delivery (never names the receipt). */
export function stale(sequence: number | bigint): LaneError {
  return new LaneError(
    "lane_stale",
    `the receipt does not own delivery ${sequence} of this group (its lease was reassigned, completed longer than ack_retention ago, released or retired, or it belongs to another project or group)`,
  );
}
