import { MAX_BUCKETS } from "./completion-history.js";
import { historyBudget, MAX_LEDGER_BYTES, MAX_RECOVERIES, MAX_RETIREMENTS, type Delivery, type Ledger, type RecoveryRecord } from "./group-ledger.js";
import { encodeAdmissions, encodeLedger } from "./group-state-codec.js";
import { groupKey } from "./names.js";
import { RECEIPT_SECRET_BYTES } from "./receipts.js";
import type { LaneBounds, LanesConfig } from "./types.js";

/**
 * The sizes the shared group bucket's admission accounts: a group state's
 * worst case, the slot limit, and the headroom the bucket always keeps.
 */

const maxNumber = Number.MAX_SAFE_INTEGER; // the widest sequence, count or revision a field may hold
const maxTime = 9_999_999_999_999; // 13-digit epoch milliseconds
const maxAttempt = 0xffff_ffff;
const maxId = "x".repeat(64);

/**
 * What JetStream stores around a KV value (subject, headers — the
 * compare-and-set's decimal expected-revision header among them — and the
 * record's framing), at its widest.
 */
const KV_OVERHEAD_BYTES = 1_024;

/**
 * Per history bucket, what its content adds to the bucket's own encoding
 * beyond the content bytes the budget counts: three packed fields' tags and
 * lengths (1 + 3 bytes each) and the growth of the bucket's length prefix.
 */
const BUCKET_FRAMING_BYTES = 3 * 4 + 2;

let widestFixed: { base: number; perSlot: number } | undefined;

/**
 * The most bytes a group state of `slots` slots can ever take stored:
 * every field of every delivery at its widest, the whole completion-history
 * budget in 17 buckets, all 64 recovery records with 16 retirements each,
 * plus what JetStream stores around a KV value. It does not depend on how
 * many items the group completed. Admission accounts this size, so a
 * group's writes never need more than it was admitted for.
 */
export function worstCaseLedgerBytes(slots: number): number {
  widestFixed ??= (() => {
    const at = (n: number) => encodeLedger(widestLedger(n)).byteLength;
    return { base: at(0), perSlot: at(1) - at(0) };
  })();
  return widestFixed.base + widestFixed.perSlot * slots + historyBudget(slots) + MAX_BUCKETS * BUCKET_FRAMING_BYTES + KV_OVERHEAD_BYTES;
}

/** The widest state of `slots` deliveries (with empty history buckets: their content is the budget). */
export function widestLedger(slots: number): Ledger {
  const delivery: Delivery = { sequence: maxNumber, holder: maxId, attempt: maxAttempt, status: "retry", dueAt: maxTime, passed: maxNumber };
  const recovery: RecoveryRecord = {
    id: maxId,
    recoverer: maxId,
    bodyDigest: new Uint8Array(32),
    recordedAt: maxTime,
    revision: maxNumber,
    cursorThrough: maxNumber,
    missingThrough: maxNumber,
    expirations: Array.from({ length: MAX_RETIREMENTS }, () => ({ project: maxId, sequence: maxNumber, attempt: maxAttempt })),
  };
  return {
    secret: new Uint8Array(RECEIPT_SECRET_BYTES).fill(0xff),
    cursor: maxNumber,
    freshThrough: maxNumber,
    rotation: maxNumber,
    turn: "fresh",
    missingThrough: maxNumber,
    slots: maxAttempt,
    deliveries: Array.from({ length: slots }, () => delivery),
    completions: Array.from({ length: MAX_BUCKETS }, () => ({ firstAt: maxTime, lastAt: maxTime, completed: maxNumber, ranges: [], retried: [], attempts: [] })),
    recoveries: Array.from({ length: MAX_RECOVERIES }, () => recovery),
  };
}

/** The most slots a group may hold: max_ledger, and what fits in the 512 KiB bound. */
export function slotLimit(bounds: Pick<LaneBounds, "maxLedger">): number {
  let slots = bounds.maxLedger;
  while (slots > 1 && worstCaseLedgerBytes(slots) > MAX_LEDGER_BYTES) slots -= 1;
  return slots;
}

/**
 * The bytes the shared group-ledger bucket must always keep free: the
 * largest single ledger write (a group at its slot limit) plus the largest
 * admissions record (every configured group at its limit). JetStream refuses
 * even a same-size overwrite of a KV value when the bucket is full, so this
 * headroom is what lets acknowledgements, nacks, renewals and recoveries
 * never fail for capacity.
 */
export function admissionHeadroom(config: Pick<LanesConfig, "lanes" | "bounds">): number {
  const limit = slotLimit(config.bounds);
  const everyGroup: Record<string, number> = {};
  for (const lane of config.lanes) for (const group of lane.groups.keys()) everyGroup[groupKey(lane.id, group)] = limit;
  const admissionsMax = encodeAdmissions(everyGroup).byteLength + KV_OVERHEAD_BYTES;
  return Math.max(worstCaseLedgerBytes(limit), admissionsMax) + admissionsMax;
}

/** The smallest ledger_bytes that can admit one group of one slot. */
export function minimumLedgerBytes(config: Pick<LanesConfig, "lanes" | "bounds">): number {
  return admissionHeadroom(config) + worstCaseLedgerBytes(1);
}
