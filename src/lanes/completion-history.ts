/**
 * A work group's completion history: what makes a repeated acknowledgement
 * a duplicate for at least ack_retention, in a size that does not grow with
 * the number of completions.
 *
 * Completions are kept in time buckets. The newest bucket takes every
 * acknowledgement until it is ack_retention/16 old; then a new bucket
 * starts. A bucket is pruned once its last acknowledgement is
 * ack_retention old, so at most 17 are ever live. Each bucket holds:
 *
 * - ranges of sequences, merged as they touch: a completed delivery adds
 *   the range from the first record its fresh lease passed (the events
 *   before it) through its own sequence, so work completed in order — even
 *   with events between — stays one range however long it runs;
 * - the sequences completed at an attempt above 1, with their attempt
 *   (every other sequence in a range was completed at attempt 1, or is an
 *   event, for which no receipt exists).
 *
 * Ranges of different buckets never overlap: a delivery's range is the
 * records between the previous fresh lease and its own, and each record is
 * leased fresh once. A bucket's ranges and retries are delta-encoded when
 * stored (group-state-codec.ts), so a range or a retry costs a few bytes;
 * `contentBytes` is that cost, which the group's history budget bounds.
 */

/** One bucket, in memory (absolute sequences). */
export interface CompletionBucket {
  /** First acknowledgement in the bucket (epoch ms). */
  readonly firstAt: number;
  /** Last acknowledgement in the bucket (epoch ms). */
  readonly lastAt: number;
  /** Deliveries completed in the bucket. */
  readonly completed: number;
  /** Flat pairs [start, end, start, end, …], increasing, never touching. */
  readonly ranges: readonly number[];
  /** Sequences completed at an attempt above 1, increasing; each lies in a range. */
  readonly retried: readonly number[];
  /** The completing attempt of each `retried` entry. */
  readonly attempts: readonly number[];
}

/** The most buckets live at once: one per ack_retention/16, and one starting. */
export const MAX_BUCKETS = 17;

/** A bucket spans at most ack_retention / BUCKET_SPANS. */
export const BUCKET_SPANS = 16;

/** The stored size of an unsigned varint. */
export function varintBytes(value: number): number {
  let bytes = 1;
  let rest = value;
  while (rest >= 128) {
    rest = Math.floor(rest / 128);
    bytes += 1;
  }
  return bytes;
}

/** The bytes a bucket's ranges and retries take stored (the packed deltas, without field headers). */
export function contentBytes(bucket: CompletionBucket): number {
  let bytes = 0;
  const r = bucket.ranges;
  let previousEnd = -1;
  for (let i = 0; i < r.length; i += 2) {
    const start = r[i]!;
    const end = r[i + 1]!;
    bytes += varintBytes(previousEnd < 0 ? start : start - previousEnd - 1) + varintBytes(end - start);
    previousEnd = end;
  }
  let previous = 0;
  for (let i = 0; i < bucket.retried.length; i++) {
    bytes += varintBytes(bucket.retried[i]! - previous) + varintBytes(bucket.attempts[i]!);
    previous = bucket.retried[i]!;
  }
  return bytes;
}

/**
 * The most stored bytes one completion can add to the history: a new range
 * (two deltas of up to 8 bytes; the delta after it only shrinks) and a
 * retried entry (a delta and an attempt of up to 5 bytes). A claim admits a
 * delivery only while this much is left for each unfinished delivery, so
 * an acknowledgement never needs room that is not there.
 */
export const COMPLETION_RESERVE_BYTES = 8 + 8 + 8 + 5;

/** Where `sequence` was completed, if the history holds it. */
export interface CompletionFound {
  readonly bucket: CompletionBucket;
  /** The completing attempt (1 unless the bucket lists it as retried). */
  readonly attempt: number;
}

/** The index of the first pair whose start is greater than `sequence`. */
function pairAfter(ranges: readonly number[], sequence: number): number {
  let low = 0;
  let high = ranges.length / 2;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (ranges[mid * 2]! <= sequence) low = mid + 1;
    else high = mid;
  }
  return low;
}

function indexOf(sorted: readonly number[], value: number): number {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (sorted[mid]! < value) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** The bucket and attempt of a completed sequence, or undefined. */
export function findCompletion(buckets: readonly CompletionBucket[], sequence: number): CompletionFound | undefined {
  for (let b = buckets.length - 1; b >= 0; b--) {
    const bucket = buckets[b]!;
    const pair = pairAfter(bucket.ranges, sequence) - 1;
    if (pair < 0 || bucket.ranges[pair * 2 + 1]! < sequence) continue;
    const at = indexOf(bucket.retried, sequence);
    return { bucket, attempt: bucket.retried[at] === sequence ? bucket.attempts[at]! : 1 };
  }
  return undefined;
}

/** The buckets still within ack_retention at `now`. */
export function pruneHistory(buckets: readonly CompletionBucket[], now: number, retentionMs: number): readonly CompletionBucket[] {
  let first = 0;
  while (first < buckets.length && buckets[first]!.lastAt + retentionMs <= now) first += 1;
  return first === 0 ? buckets : buckets.slice(first);
}

/** Inserts [from, to] into flat sorted, non-touching pairs, merging whatever it touches. */
function insertRange(ranges: number[], from: number, to: number): void {
  let start = from;
  let end = to;
  let first = pairAfter(ranges, start);
  // The pair before may touch or overlap.
  if (first > 0 && ranges[(first - 1) * 2 + 1]! >= start - 1) first -= 1;
  let last = first;
  while (last < ranges.length / 2 && ranges[last * 2]! <= end + 1) {
    start = Math.min(start, ranges[last * 2]!);
    end = Math.max(end, ranges[last * 2 + 1]!);
    last += 1;
  }
  ranges.splice(first * 2, (last - first) * 2, start, end);
}

/**
 * The history as one compare-and-set changes it: pruning, then
 * completions. The buckets it started from are never changed; the newest
 * bucket is copied once, on the first completion it takes.
 */
export class HistoryDraft {
  #buckets: CompletionBucket[];
  /** The newest bucket as this draft changes it (its arrays are this draft's own). */
  #own: { firstAt: number; lastAt: number; completed: number; ranges: number[]; retried: number[]; attempts: number[] } | undefined;

  constructor(
    buckets: readonly CompletionBucket[],
    private readonly retentionMs: number,
  ) {
    this.#buckets = [...buckets];
  }

  /** Drops the buckets whose last acknowledgement is ack_retention old at `now`; whether any was. */
  prune(now: number): boolean {
    const kept = pruneHistory(this.#buckets, now, this.retentionMs);
    if (kept.length === this.#buckets.length) return false;
    if (this.#own !== undefined && !kept.includes(this.#own)) this.#own = undefined;
    this.#buckets = [...kept];
    return true;
  }

  get buckets(): readonly CompletionBucket[] {
    return this.#buckets;
  }

  find(sequence: number): CompletionFound | undefined {
    return findCompletion(this.#buckets, sequence);
  }

  /**
   * Records one completion at `now`: the range `from`..`sequence`, and the
   * attempt when above 1. The newest bucket takes it while it is younger
   * than ack_retention/16 (and always once 17 are live, which only a clock
   * going back can cause); otherwise a new bucket starts.
   */
  record(completion: { readonly from: number; readonly sequence: number; readonly attempt: number; readonly now: number }): void {
    const { from, sequence, attempt, now } = completion;
    const newest = this.#buckets[this.#buckets.length - 1];
    const reuse = newest !== undefined && (now - newest.firstAt < this.retentionMs / BUCKET_SPANS || this.#buckets.length >= MAX_BUCKETS);
    let own = this.#own;
    if (!reuse) {
      own = { firstAt: now, lastAt: now, completed: 0, ranges: [], retried: [], attempts: [] };
      this.#buckets.push(own);
    } else if (own === undefined || own !== newest) {
      own = { ...newest, ranges: [...newest.ranges], retried: [...newest.retried], attempts: [...newest.attempts] };
      this.#buckets[this.#buckets.length - 1] = own;
    }
    this.#own = own;
    insertRange(own.ranges, from, sequence);
    if (attempt > 1) {
      const at = indexOf(own.retried, sequence);
      if (own.retried[at] === sequence) own.attempts[at] = attempt;
      else {
        own.retried.splice(at, 0, sequence);
        own.attempts.splice(at, 0, attempt);
      }
    }
    own.firstAt = Math.min(own.firstAt, now);
    own.lastAt = Math.max(own.lastAt, now);
    own.completed += 1;
  }
}
