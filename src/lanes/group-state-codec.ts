import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  AdmissionsSchema,
  CompletionBucketSchema,
  DeliverySchema,
  DeliveryState,
  ExpirationSchema,
  GroupStateSchema,
  RecoverySchema,
  Turn,
  type GroupState,
} from "../../gen/laneway/lane/storage/v1/group_state_pb.js";
import { MAX_BUCKETS, type CompletionBucket } from "./completion-history.js";
import { LaneError } from "./errors.js";
import { GROUP_STATE_FORMAT, MAX_RECOVERIES, MAX_RETIREMENTS, type Delivery, type Ledger, type RecoveryRecord } from "./group-ledger.js";
import { RECEIPT_SECRET_BYTES } from "./receipts.js";

/**
 * The group bucket's values in state format 4: a group's state and the
 * admissions record, as the typed Protobuf messages of
 * proto/laneway/lane/storage/v1/group_state.proto, and back.
 *
 * Everything read back passes a schema check before the state machine sees
 * it: the format, the secret's length, sequences and times within 2^53,
 * deliveries in increasing order and within the slots, valid states and
 * turns, at most 17 history buckets of increasing, non-touching ranges,
 * at most 64 recoveries of at most 16 retirements. A value that starts with
 * `{` is the JSON of state format 3 (or older): refused with lane_conflict,
 * naming its format. Anything else unreadable is lane_unavailable. Nothing
 * here ever rewrites a value it refused.
 */

const OPEN_BRACE = 0x7b;

/** The refusal of a value written by another state format. */
function otherFormat(what: string, format: unknown): LaneError {
  return new LaneError("lane_conflict", `${what} was written in state format ${typeof format === "number" ? format : "unknown"}; this Laneway reads format ${GROUP_STATE_FORMAT}`);
}

function unreadable(what: string, why: string): LaneError {
  return new LaneError("lane_unavailable", `${what} in the namespace is unreadable (${why})`);
}

/** A JSON value (state format 3 or older): read its `f` to name the format. */
function refuseJson(bytes: Uint8Array, what: string): never {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch {
    throw unreadable(what, "it is neither state format 4 nor the JSON of an older format");
  }
  throw otherFormat(what, (value as { f?: unknown } | null)?.f);
}

const big = (n: number) => BigInt(n);

function safe(value: bigint, field: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${field} is beyond 2^53`);
  return Number(value);
}

// ---------------------------------------------------------------- group state

function bucketMessage(bucket: CompletionBucket) {
  const ranges: bigint[] = [];
  let previousEnd = -1;
  for (let i = 0; i < bucket.ranges.length; i += 2) {
    const start = bucket.ranges[i]!;
    const end = bucket.ranges[i + 1]!;
    ranges.push(big(previousEnd < 0 ? start : start - previousEnd - 1), big(end - start));
    previousEnd = end;
  }
  const retried: bigint[] = [];
  let previous = 0;
  for (const sequence of bucket.retried) {
    retried.push(big(sequence - previous));
    previous = sequence;
  }
  return create(CompletionBucketSchema, {
    firstAckedAtMs: big(bucket.firstAt),
    lastAckedAtMs: big(bucket.lastAt),
    completed: big(bucket.completed),
    ranges,
    retried,
    retriedAttempts: [...bucket.attempts],
  });
}

export function encodeLedger(ledger: Ledger): Uint8Array {
  const message = create(GroupStateSchema, {
    format: GROUP_STATE_FORMAT,
    receiptSecret: ledger.secret,
    cursor: big(ledger.cursor),
    freshThrough: big(ledger.freshThrough),
    rotation: big(ledger.rotation),
    turn: ledger.turn === "fresh" ? Turn.FRESH : Turn.RETRY,
    missingThrough: big(ledger.missingThrough),
    slots: ledger.slots,
    deliveries: ledger.deliveries.map((d) =>
      create(DeliverySchema, {
        sequence: big(d.sequence),
        holder: d.holder,
        attempt: d.attempt,
        state: d.status === "leased" ? DeliveryState.LEASED : DeliveryState.RETRY,
        dueAtMs: big(d.dueAt),
        passed: big(d.passed),
      }),
    ),
    completions: ledger.completions.map(bucketMessage),
    recoveries: ledger.recoveries.map((r) =>
      create(RecoverySchema, {
        id: r.id,
        recoverer: r.recoverer,
        bodyDigest: r.bodyDigest,
        recordedAtMs: big(r.recordedAt),
        revision: big(r.revision),
        cursorThrough: big(r.cursorThrough),
        missingThrough: big(r.missingThrough),
        expirations: r.expirations.map((x) => create(ExpirationSchema, { project: x.project, sequence: big(x.sequence), attempt: x.attempt })),
      }),
    ),
  });
  return toBinary(GroupStateSchema, message);
}

const LEDGER = "a group ledger";

export function decodeLedger(bytes: Uint8Array): Ledger {
  if (bytes[0] === OPEN_BRACE) refuseJson(bytes, LEDGER);
  let message: GroupState;
  try {
    message = fromBinary(GroupStateSchema, bytes);
  } catch {
    throw unreadable(LEDGER, "it does not decode as state format 4");
  }
  if (message.format !== GROUP_STATE_FORMAT) throw otherFormat(LEDGER, message.format);
  try {
    return checkedLedger(message);
  } catch (error) {
    throw unreadable(LEDGER, `it breaks state format 4: ${(error as Error).message}`);
  }
}

/** The schema check: everything the state machine relies on. */
function checkedLedger(m: GroupState): Ledger {
  if (m.receiptSecret.length !== RECEIPT_SECRET_BYTES) throw new Error("its receipt secret is not 32 bytes");
  if (m.slots < 1) throw new Error("it has no slot");
  const turn = m.turn === Turn.FRESH ? "fresh" : m.turn === Turn.RETRY ? "retry" : undefined;
  if (turn === undefined) throw new Error("its turn is not set");
  const cursor = safe(m.cursor, "the cursor");
  const freshThrough = safe(m.freshThrough, "fresh_through");
  if (freshThrough > cursor) throw new Error("fresh_through is beyond the cursor");
  if (m.deliveries.length > m.slots) throw new Error("it holds more deliveries than slots");
  let previous = 0;
  const deliveries: Delivery[] = m.deliveries.map((d) => {
    const sequence = safe(d.sequence, "a delivery's sequence");
    if (sequence <= previous || sequence > cursor) throw new Error("its deliveries are not in increasing order within the cursor");
    previous = sequence;
    if (d.attempt < 1) throw new Error("a delivery has no attempt");
    if (d.holder.length === 0 || d.holder.length > 64) throw new Error("a delivery has no holder");
    const status = d.state === DeliveryState.LEASED ? "leased" : d.state === DeliveryState.RETRY ? "retry" : undefined;
    if (status === undefined) throw new Error("a delivery's state is not set");
    const passed = safe(d.passed, "a delivery's passed records");
    if (passed >= sequence) throw new Error("a delivery passed records before the lane's start");
    return { sequence, holder: d.holder, attempt: d.attempt, status, dueAt: safe(d.dueAtMs, "a due time"), passed };
  });
  if (m.completions.length > MAX_BUCKETS) throw new Error(`it holds more than ${MAX_BUCKETS} completion buckets`);
  const completions: CompletionBucket[] = m.completions.map((b) => {
    const firstAt = safe(b.firstAckedAtMs, "a bucket's time");
    const lastAt = safe(b.lastAckedAtMs, "a bucket's time");
    if (lastAt < firstAt) throw new Error("a bucket ends before it starts");
    if (b.ranges.length % 2 !== 0) throw new Error("a bucket's ranges are not pairs");
    const ranges: number[] = [];
    let end = -1;
    for (let i = 0; i < b.ranges.length; i += 2) {
      const gap = safe(b.ranges[i]!, "a range");
      if (i > 0 && gap < 1) throw new Error("a bucket's ranges touch");
      const start = i === 0 ? gap : end + 1 + gap;
      end = start + safe(b.ranges[i + 1]!, "a range");
      if (start < 1 || end > Number.MAX_SAFE_INTEGER) throw new Error("a range is out of bounds");
      ranges.push(start, end);
    }
    if (b.retried.length !== b.retriedAttempts.length) throw new Error("a bucket's retried attempts do not match its sequences");
    const retried: number[] = [];
    let sequence = 0;
    for (const [i, delta] of b.retried.entries()) {
      const step = safe(delta, "a retried sequence");
      if (step < 1) throw new Error("a bucket's retried sequences are not increasing");
      sequence += step;
      if (b.retriedAttempts[i]! < 2) throw new Error("a retried completion has an attempt below 2");
      retried.push(sequence);
    }
    return Object.freeze({
      firstAt,
      lastAt,
      completed: safe(b.completed, "a completion count"),
      ranges: Object.freeze(ranges),
      retried: Object.freeze(retried),
      attempts: Object.freeze([...b.retriedAttempts]),
    });
  });
  if (m.recoveries.length > MAX_RECOVERIES) throw new Error(`it holds more than ${MAX_RECOVERIES} recoveries`);
  const recoveries: RecoveryRecord[] = m.recoveries.map((r) => {
    if (r.bodyDigest.length !== 32) throw new Error("a recovery's digest is not 32 bytes");
    if (r.expirations.length > MAX_RETIREMENTS) throw new Error(`a recovery retired more than ${MAX_RETIREMENTS} deliveries`);
    return {
      id: r.id,
      recoverer: r.recoverer,
      bodyDigest: r.bodyDigest,
      recordedAt: safe(r.recordedAtMs, "a recovery's time"),
      revision: safe(r.revision, "a revision"),
      cursorThrough: safe(r.cursorThrough, "a recovery's cursor"),
      missingThrough: safe(r.missingThrough, "a recovery's checkpoint"),
      expirations: r.expirations.map((x) => ({ project: x.project, sequence: safe(x.sequence, "a retired sequence"), attempt: x.attempt })),
    };
  });
  return {
    secret: m.receiptSecret,
    cursor,
    freshThrough,
    rotation: safe(m.rotation, "the rotation"),
    turn,
    missingThrough: safe(m.missingThrough, "the checkpoint"),
    slots: m.slots,
    deliveries,
    completions,
    recoveries,
  };
}

// ---------------------------------------------------------------- admissions

const ADMISSIONS = "the group admissions record";

/** Group key → admitted slots. */
export type AdmittedSlots = Readonly<Record<string, number>>;

export function encodeAdmissions(slots: AdmittedSlots): Uint8Array {
  return toBinary(AdmissionsSchema, create(AdmissionsSchema, { format: GROUP_STATE_FORMAT, slots: { ...slots } }));
}

export function decodeAdmissions(bytes: Uint8Array): AdmittedSlots {
  if (bytes[0] === OPEN_BRACE) refuseJson(bytes, ADMISSIONS);
  let message;
  try {
    message = fromBinary(AdmissionsSchema, bytes);
  } catch {
    throw unreadable(ADMISSIONS, "it does not decode as state format 4");
  }
  if (message.format !== GROUP_STATE_FORMAT) throw otherFormat(ADMISSIONS, message.format);
  for (const value of Object.values(message.slots)) if (value < 1) throw unreadable(ADMISSIONS, "it admits a group with no slot");
  return message.slots;
}
