import { createHash, randomBytes } from "node:crypto";
import { LaneError } from "./errors.js";
import type { LaneBounds } from "./types.js";

/**
 * A work group's cursor/lease ledger: the state machine of one group's
 * deliveries, as pure functions over a value that lives in one JetStream KV
 * key. The group's KV compare-and-set (work-groups.ts) is the ownership
 * linearization point: an operation here changes a copy, and only a
 * successful CAS of that copy makes it true.
 *
 * A delivery is one work record as this group sees it:
 *
 *   (fresh work after the cursor)
 *        │ claim (attempt 1)
 *        ▼
 *     leased ──renew──► leased (new expiry)
 *      │  │ └─lease expires─► eligible for retry (still holds its receipt)
 *      │  └─nack─► retry (due at retry_at) ──due─► eligible for retry
 *      └─ack─► acked ──ack_retention passes─► pruned (slot free again)
 *   eligible for retry ──claim (attempt n+1, new receipt)─► leased
 *   eligible + record left retention ──recover (retire)─► removed
 *
 * Every lease has its own random receipt (64 hex), a bearer secret that
 * binds lane and group (it lives in this group's ledger), the holder (its
 * project), the sequence and the ownership generation (a new receipt per
 * lease). The ledger keeps only the receipt's SHA-256, so neither an
 * inspection nor a leaked ledger value reveals a receipt.
 */

export const LEDGER_FORMAT = 3;

export type DeliveryStatus = "leased" | "retry" | "acked";

export interface Delivery {
  /** The work record's stream sequence. */
  readonly s: number;
  /** The project that holds (or last held) it. */
  readonly p: string;
  /** The attempt, from 1. */
  readonly a: number;
  readonly st: DeliveryStatus;
  /** Lease expiry (epoch ms), while leased. */
  readonly le?: number;
  /** When a nacked delivery becomes eligible again (epoch ms). */
  readonly ra?: number;
  /** When it was first acknowledged (epoch ms). */
  readonly aa?: number;
  /** SHA-256 of the current receipt, base64url. */
  readonly r: string;
}

/** One retired delivery, as a recovery records it (never an acknowledgement). */
export interface Expiration {
  readonly p: string;
  readonly s: number;
  readonly a: number;
}

/** A stored recovery: the request's id, principal and body hash, and the result every retry gets. */
export interface RecoveryRecord {
  readonly id: string;
  /** The recoverer. */
  readonly p: string;
  /** SHA-256 of the request body (revision, cursor_through, expired, missing), base64url. */
  readonly h: string;
  /** Recorded at (epoch ms). */
  readonly at: number;
  /** The revision the recovery was applied to. */
  readonly rev: number;
  /** The accepted cursor. */
  readonly ct: number;
  /** The missing-prefix checkpoint after it. */
  readonly mt: number;
  readonly x: readonly Expiration[];
}

export interface Ledger {
  readonly f: number;
  /** The last stream sequence taken as fresh work (or accepted by a recovery). */
  readonly cursor: number;
  /** Where the next retry search starts (a sequence; it rotates). */
  readonly rotation: number;
  /** Whose turn it is when both retries and fresh work are ready. */
  readonly turn: "retry" | "fresh";
  /** The accepted missing-prefix checkpoint. */
  readonly missing: number;
  /** Reusable delivery slots: a nonshrinking high-water mark. */
  readonly slots: number;
  readonly d: readonly Delivery[];
  readonly rec: readonly RecoveryRecord[];
}

/** The most recovery records a group keeps within ack_retention. */
export const MAX_RECOVERIES = 64;
/** The most deliveries one recovery may retire. */
export const MAX_RETIREMENTS = 16;
/** The serialized ledger bound of the specification. */
export const MAX_LEDGER_BYTES = 512 * 1024;

export function emptyLedger(slots: number): Ledger {
  return { f: LEDGER_FORMAT, cursor: 0, rotation: 0, turn: "retry", missing: 0, slots, d: [], rec: [] };
}

export function encodeLedger(ledger: Ledger): Uint8Array {
  return Buffer.from(JSON.stringify(ledger), "utf8");
}

export function decodeLedger(bytes: Uint8Array): Ledger {
  let value: Ledger;
  try {
    value = JSON.parse(Buffer.from(bytes).toString("utf8")) as Ledger;
  } catch {
    throw new LaneError("lane_unavailable", "a group ledger in the namespace is unreadable");
  }
  if (value.f !== LEDGER_FORMAT) {
    throw new LaneError("lane_conflict", `a group ledger was written in state format ${String(value.f)}; this Laneway reads format ${LEDGER_FORMAT}`);
  }
  return value;
}

export function receiptHash(receipt: string): string {
  return createHash("sha256").update(receipt, "utf8").digest("base64url");
}

export function newReceipt(): string {
  return randomBytes(32).toString("hex");
}

// ---------------------------------------------------------------- sizes

const maxNumber = 9_007_199_254_740_991; // the widest JSON number a field may hold
const maxTime = 9_999_999_999_999; // 13-digit epoch milliseconds
const maxId = "x".repeat(64);
const maxHash = "x".repeat(43);

/**
 * The most bytes a group ledger of `slots` slots can ever serialize to:
 * every field of every delivery at its widest, all 64 recovery records
 * with 16 retirements each, plus what JetStream stores around a KV value
 * (subject, headers, record overhead). Admission accounts this size, so a
 * group's writes never need more than it was admitted for.
 */
export function worstCaseLedgerBytes(slots: number): number {
  const delivery: Delivery = { s: maxNumber, p: maxId, a: maxNumber, st: "leased", le: maxTime, ra: maxTime, aa: maxTime, r: maxHash };
  const expiration: Expiration = { p: maxId, s: maxNumber, a: maxNumber };
  const record: RecoveryRecord = {
    id: maxId,
    p: maxId,
    h: maxHash,
    at: maxTime,
    rev: maxNumber,
    ct: maxNumber,
    mt: maxNumber,
    x: Array.from({ length: MAX_RETIREMENTS }, () => expiration),
  };
  const widest: Ledger = {
    f: LEDGER_FORMAT,
    cursor: maxNumber,
    rotation: maxNumber,
    turn: "fresh",
    missing: maxNumber,
    slots: maxNumber,
    d: Array.from({ length: slots }, () => delivery),
    rec: Array.from({ length: MAX_RECOVERIES }, () => record),
  };
  return encodeLedger(widest).byteLength + 1_024;
}

/** The most slots a group may hold: max_ledger, and what fits in the 512 KiB bound. */
export function slotLimit(bounds: Pick<LaneBounds, "maxLedger">): number {
  let slots = bounds.maxLedger;
  while (slots > 1 && worstCaseLedgerBytes(slots) > MAX_LEDGER_BYTES) slots -= 1;
  return slots;
}

// ---------------------------------------------------------------- the state machine

/** What a claim could lease, prepared from the stream before the ledger is changed. */
export interface ClaimCandidates {
  /** Retained work records after the cursor, in sequence order (fresh work). */
  readonly fresh: readonly number[];
  /** Whether `fresh` reaches as far as the stream's end (no more fresh work beyond it now). */
  readonly freshComplete: boolean;
  /** The first retained sequence of the lane (0 when empty). */
  readonly firstRetained: number;
  /** The lane's last sequence. */
  readonly lastSequence: number;
  /** Sequences whose records are retained (for retries). */
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
  /** SHA-256 of the body (see recoveryBodyHash). */
  readonly bodyHash: string;
}

/** The hash that tells a retried recovery from a changed one: revision, cursor and retirements. */
export function recoveryBodyHash(request: Omit<RecoveryRequest, "id" | "project" | "bodyHash">): string {
  const body = JSON.stringify({
    revision: request.revision,
    cursorThrough: request.cursorThrough,
    expired: request.expired.map((e) => [e.sequence, receiptHash(e.receipt)]),
    missing: [...request.missing],
  });
  return createHash("sha256").update(body).digest("base64url");
}

/** One delivery leased by a claim, with the receipt returned to the holder. */
export interface Leased {
  readonly sequence: number;
  readonly attempt: number;
  readonly leaseExpiresAt: number;
  readonly receipt: string;
}

/** A ledger being changed by one CAS worth of operations. */
export class LedgerDraft {
  cursor: number;
  rotation: number;
  turn: "retry" | "fresh";
  missing: number;
  slots: number;
  deliveries: Delivery[];
  recoveries: RecoveryRecord[];
  changed = false;

  constructor(
    ledger: Ledger,
    readonly bounds: LaneBounds,
    readonly now: number,
  ) {
    this.cursor = ledger.cursor;
    this.rotation = ledger.rotation;
    this.turn = ledger.turn;
    this.missing = ledger.missing;
    this.slots = ledger.slots;
    this.deliveries = [...ledger.d];
    this.recoveries = [...ledger.rec];
    this.#prune();
  }

  toLedger(): Ledger {
    return {
      f: LEDGER_FORMAT,
      cursor: this.cursor,
      rotation: this.rotation,
      turn: this.turn,
      missing: this.missing,
      slots: this.slots,
      d: [...this.deliveries].sort((x, y) => x.s - y.s),
      rec: this.recoveries,
    };
  }

  /** Acknowledgements and recovery records older than ack_retention leave the ledger; their slots stay. */
  #prune(): void {
    const horizon = this.now - this.bounds.ackRetentionMs;
    const kept = this.deliveries.filter((d) => d.st !== "acked" || (d.aa ?? 0) > horizon);
    if (kept.length !== this.deliveries.length) {
      this.deliveries = kept;
      this.changed = true;
    }
    const recoveries = this.recoveries.filter((r) => r.at > horizon);
    if (recoveries.length !== this.recoveries.length) {
      this.recoveries = recoveries;
      this.changed = true;
    }
  }

  liveLeases(): number {
    return this.deliveries.filter((d) => d.st === "leased" && (d.le ?? 0) > this.now).length;
  }

  /** Deliveries a claim may lease again: expired leases and due retries. */
  eligibleRetries(): Delivery[] {
    return this.deliveries.filter((d) => (d.st === "leased" && (d.le ?? 0) <= this.now) || (d.st === "retry" && (d.ra ?? 0) <= this.now));
  }

  /** When the next delivery becomes eligible (a lease ends or a retry falls due), if any. */
  nextEligibleAt(): number | undefined {
    let next: number | undefined;
    for (const d of this.deliveries) {
      const at = d.st === "leased" ? d.le : d.st === "retry" ? d.ra : undefined;
      if (at !== undefined && at > this.now && (next === undefined || at < next)) next = at;
    }
    return next;
  }

  /**
   * Leases up to `max` deliveries for `project`, alternating retries and
   * fresh work as the specification says. Returns what it leased and
   * whether more fresh work waits for a slot this ledger does not have.
   */
  claim(project: string, max: number, candidates: ClaimCandidates): { leased: Leased[]; needsSlot: boolean } {
    const leased: Leased[] = [];
    let needsSlot = false;
    const fresh = candidates.fresh.filter((s) => s > this.cursor);
    let freshIndex = 0;
    // Unclaimed work after the cursor has left retention: explicit, until recovered.
    // (A lane whose records all expired retains nothing: first retained 0.)
    if (this.cursor < candidates.lastSequence && (candidates.firstRetained === 0 || this.cursor + 1 < candidates.firstRetained)) {
      throw new LaneError(
        "lane_cursor",
        `records after cursor ${this.cursor} of this group left retention before they were claimed (the first retained is ${candidates.firstRetained}): inspect the group and recover the gap`,
      );
    }
    while (leased.length < max) {
      if (this.liveLeases() >= this.bounds.maxPending) break;
      const retries = this.eligibleRetries();
      const nextFresh = fresh[freshIndex];
      const freshReady = nextFresh !== undefined;
      const slotFree = this.deliveries.length < this.slots;
      let take: "retry" | "fresh" | undefined;
      if (retries.length > 0 && (!freshReady || this.turn === "retry")) take = "retry";
      else if (freshReady && slotFree) take = "fresh";
      else if (freshReady && !slotFree) {
        // Fresh work needs a new slot. With retries waiting, their turn is
        // committed first, so a failed admission cannot pin the group to
        // unsuccessful fresh attempts.
        needsSlot = true;
        if (retries.length > 0) take = "retry";
        else break;
      } else if (retries.length > 0) take = "retry";
      if (take === undefined) break;
      if (take === "retry") {
        const chosen = this.#rotate(retries);
        if (!candidates.retained(chosen.s)) {
          throw new LaneError(
            "lane_cursor",
            `delivery ${chosen.s} of this group left retention before it was acknowledged: inspect the group and recover it`,
          );
        }
        leased.push(this.#lease(chosen.s, project, chosen.a + 1, chosen));
        this.rotation = chosen.s;
        if (freshReady) this.turn = "fresh";
      } else {
        const sequence = nextFresh!;
        freshIndex += 1;
        this.cursor = sequence;
        leased.push(this.#lease(sequence, project, 1, undefined));
        if (retries.length > 0) this.turn = "retry";
      }
    }
    if (leased.length > 0) this.changed = true;
    return { leased, needsSlot };
  }

  /** The first eligible retry after the rotation cursor, wrapping around. */
  #rotate(retries: readonly Delivery[]): Delivery {
    const ordered = [...retries].sort((x, y) => x.s - y.s);
    return ordered.find((d) => d.s > this.rotation) ?? ordered[0]!;
  }

  #lease(sequence: number, project: string, attempt: number, previous: Delivery | undefined): Leased {
    const receipt = newReceipt();
    const leaseExpiresAt = this.now + this.bounds.leaseMs;
    const delivery: Delivery = { s: sequence, p: project, a: attempt, st: "leased", le: leaseExpiresAt, r: receiptHash(receipt) };
    if (previous) this.deliveries = this.deliveries.map((d) => (d === previous ? delivery : d));
    else this.deliveries.push(delivery);
    return { sequence, attempt, leaseExpiresAt, receipt };
  }

  /** The delivery a receipt owns, or lane_stale. */
  #owned(project: string, sequence: number, receipt: string): { index: number; delivery: Delivery } {
    const hash = receiptHash(receipt);
    const index = this.deliveries.findIndex((d) => d.s === sequence);
    const delivery = this.deliveries[index];
    if (delivery === undefined || delivery.p !== project || delivery.r !== hash) throw stale(sequence);
    return { index, delivery };
  }

  renew(project: string, sequence: number, receipt: string): { leaseExpiresAt: number } {
    const { index, delivery } = this.#owned(project, sequence, receipt);
    if (delivery.st !== "leased" || (delivery.le ?? 0) <= this.now) throw stale(sequence);
    const leaseExpiresAt = this.now + this.bounds.leaseMs;
    this.deliveries[index] = { ...delivery, le: leaseExpiresAt };
    this.changed = true;
    return { leaseExpiresAt };
  }

  ack(project: string, sequence: number, receipt: string): { ackedAt: number; duplicate: boolean } {
    const { index, delivery } = this.#owned(project, sequence, receipt);
    if (delivery.st === "acked") return { ackedAt: delivery.aa!, duplicate: true };
    // A leased delivery, also one whose lease expired but that nobody has
    // claimed again (its receipt still owns it); a nacked one was given up.
    if (delivery.st !== "leased") throw stale(sequence);
    this.deliveries[index] = { s: delivery.s, p: delivery.p, a: delivery.a, st: "acked", aa: this.now, r: delivery.r };
    this.changed = true;
    return { ackedAt: this.now, duplicate: false };
  }

  nack(project: string, sequence: number, receipt: string): { retryAt: number; attempt: number; duplicate: boolean } {
    const { index, delivery } = this.#owned(project, sequence, receipt);
    if (delivery.st === "retry") return { retryAt: delivery.ra!, attempt: delivery.a, duplicate: true };
    if (delivery.st !== "leased") throw stale(sequence);
    const retryAt = this.now + retryDelayMs(this.bounds, delivery.a);
    this.deliveries[index] = { s: delivery.s, p: delivery.p, a: delivery.a, st: "retry", ra: retryAt, r: delivery.r };
    this.changed = true;
    return { retryAt, attempt: delivery.a, duplicate: false };
  }

  /**
   * Explicit recovery (the specification's "same-namespace group
   * recovery"): accepts an expired cursor gap and retires expired,
   * unacknowledged deliveries whose records left retention, without
   * acknowledging them. The caller checked the capability and the revision;
   * `firstRetained` is the lane's first retained sequence now.
   */
  recover(request: RecoveryRequest, firstRetained: number, lastSequence: number): RecoveryRecord {
    if (this.recoveries.length >= MAX_RECOVERIES) {
      throw new LaneError("lane_capacity", `this group holds ${MAX_RECOVERIES} recovery records: wait for ack_retention to prune the oldest`);
    }
    const gap = firstRetained > 0 ? this.cursor + 1 < firstRetained && this.cursor < lastSequence : this.cursor < lastSequence;
    const boundary = firstRetained > 0 ? firstRetained - 1 : lastSequence;
    const expectedCursor = gap ? boundary : this.cursor;
    if (request.cursorThrough !== expectedCursor) {
      throw new LaneError(
        "lane_invalid",
        gap
          ? `cursor_through must be ${boundary}, the expired prefix boundary (first retained ${firstRetained} - 1)`
          : `cursor_through must be the current cursor ${this.cursor}: there is no expired gap, and it cannot advance across retained work`,
      );
    }
    const sequences = [...request.expired.map((e) => e.sequence), ...request.missing];
    if (sequences.length > MAX_RETIREMENTS) throw new LaneError("lane_invalid", `at most ${MAX_RETIREMENTS} deliveries per recovery`);
    if (new Set(sequences).size !== sequences.length) throw new LaneError("lane_invalid", "a recovery names each delivery at most once");
    const retire = (sequence: number): Delivery => {
      const delivery = this.deliveries.find((d) => d.s === sequence);
      if (delivery === undefined) throw new LaneError("lane_invalid", `delivery ${sequence} is not in this group's ledger`);
      if (delivery.st === "acked") throw new LaneError("lane_invalid", `delivery ${sequence} is acknowledged: only unacknowledged deliveries can be retired`);
      if (delivery.st === "leased" && (delivery.le ?? 0) > this.now) throw new LaneError("lane_invalid", `delivery ${sequence} holds a live lease: it cannot be retired`);
      if (firstRetained > 0 && sequence >= firstRetained) throw new LaneError("lane_invalid", `delivery ${sequence} is still retained: only deliveries missing from retention can be retired`);
      return delivery;
    };
    const retired: Delivery[] = [];
    for (const entry of request.expired) {
      const delivery = retire(entry.sequence);
      if (delivery.r !== receiptHash(entry.receipt)) throw stale(entry.sequence);
      retired.push(delivery);
    }
    for (const sequence of request.missing) retired.push(retire(sequence));
    const gone = new Set(retired.map((d) => d.s));
    this.deliveries = this.deliveries.filter((d) => !gone.has(d.s));
    if (gap) this.cursor = boundary;
    this.missing = Math.max(this.missing, gap ? boundary : 0, ...retired.map((d) => d.s));
    const record: RecoveryRecord = {
      id: request.id,
      p: request.project,
      h: request.bodyHash,
      at: this.now,
      rev: request.revision,
      ct: this.cursor,
      mt: this.missing,
      x: retired.map((d) => ({ p: d.p, s: d.s, a: d.a })),
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

function stale(sequence: number): LaneError {
  return new LaneError(
    "lane_stale",
    `the receipt does not own delivery ${sequence} of this group (its lease was reassigned, completed, released or retired, or it belongs to another project or group)`,
  );
}
