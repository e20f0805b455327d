import { storedRecord } from "./envelope.js";
import { LaneError } from "./errors.js";
import type { LaneStore, StreamRange as StoreRange } from "./lane-store.js";
import type { Namespace } from "./namespace.js";
import type { LaneRegistry } from "./registry.js";
import type { LaneRecord } from "./types.js";

/**
 * Replay: one bounded page of a lane's events after a cursor.
 *
 * The cursor is the last examined stream sequence, counting work records
 * that event replay skips. A page examines at most 512 records and returns
 * at most 128 events (fewer when asked), and reads about PAGE_BYTES of
 * records at most (fewer events when they are large). Cursor 0 starts at
 * the earliest retained record. A cursor beyond the last sequence, or a
 * nonzero cursor whose successor has left retention (an expired gap), is
 * `lane_cursor`, as is a retained record found missing during the scan:
 * nothing is skipped silently.
 */

/**
 * A caller's cursor: the wire's uint64 arrives as a bigint and is compared
 * exactly; once it is known to be at most the lane's last sequence it fits
 * a number.
 */
export type Cursor = number | bigint;

export const MAX_EXAMINED = 512;
export const MAX_EVENTS = 128;

/**
 * Stored bytes one page reads at most (about: it always holds at least one
 * record, and its last read may carry one record more): with large records
 * a page returns fewer events, so that what one reader holds, and what a
 * Follow stream has waiting for its client, stays bounded.
 */
export const PAGE_BYTES = 512 * 1024;

export interface ReplayPage {
  readonly events: readonly LaneRecord[];
  /** The last examined sequence: save it after processing the events. */
  readonly cursor: number;
  /** The first retained sequence; 0 when nothing is retained. */
  readonly firstRetained: number;
  /** The last sequence of the lane; 0 when nothing was ever published. */
  readonly lastSequence: number;
  /** How many records the page examined. */
  readonly examined: number;
}

export class Replayer {
  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
    private readonly registry: LaneRegistry,
  ) {}

  async replay(project: string, lane: string, cursor: Cursor, maxEvents: number, signal?: AbortSignal): Promise<ReplayPage> {
    this.registry.require(project, lane, "subscribe");
    return this.page(lane, cursor, maxEvents === 0 ? MAX_EVENTS : Math.min(maxEvents, MAX_EVENTS), signal);
  }

  /**
   * A page without the capability check (the caller checked it).
   *
   * The page decides on the stream's range as the store last learnt it when
   * that already holds the cursor's successor (the pages of one reader, one
   * after the other), and reads it from the broker otherwise: a caught-up
   * cursor, a first read, a stream not read for a while. Any surprise of
   * the read — a record that is not the one expected first, a read that
   * comes back empty — makes the page start again on a range read fresh,
   * so every cursor rule is decided on the broker's present state, never
   * on a stale one.
   */
  async page(lane: string, requested: Cursor, maxEvents: number, signal?: AbortSignal): Promise<ReplayPage> {
    const stream = this.namespace.streams.get(lane)!;
    const known = this.store.knownRange(stream);
    // Only a known range that holds the page's first record: anything else needs the broker's answer.
    const start = BigInt(requested) === 0n ? Math.max(known?.first ?? 0, 1) : Number(requested) + 1;
    if (known !== undefined && BigInt(requested) < BigInt(known.last) && start <= known.last) {
      const page = await this.#page(stream, lane, requested, maxEvents, known, false, signal);
      if (page !== "stale") return page;
    }
    const page = await this.#page(stream, lane, requested, maxEvents, await this.store.range(stream, signal), true, signal);
    // A fresh range has no surprise left to explain: #page decides it.
    return page as ReplayPage;
  }

  /** A page on `range`; "stale" when `range` is a known one (not `fresh`) that the cursor or the read contradicts. */
  async #page(stream: string, lane: string, requested: Cursor, maxEvents: number, range: StoreRange, fresh: boolean, signal?: AbortSignal): Promise<ReplayPage | "stale"> {
    const { first } = range;
    let { last } = range;
    const firstRetained = first > 0 && first <= last ? first : 0;
    // Compared exactly: a uint64 cursor above 2^53 is quoted as it was sent.
    if (BigInt(requested) > BigInt(last)) {
      throw new LaneError("lane_cursor", `cursor ${requested} is beyond the end of lane ${lane} (its last sequence is ${last})`);
    }
    const cursor = Number(requested);
    if (cursor !== 0 && firstRetained !== 0 && cursor + 1 < firstRetained) {
      if (!fresh) return "stale";
      throw new LaneError(
        "lane_cursor",
        `the records after cursor ${cursor} of lane ${lane} have left retention (the first retained is ${firstRetained}): replay from cursor 0, or from ${firstRetained - 1} to accept the gap`,
      );
    }
    if (cursor !== 0 && firstRetained === 0 && cursor < last) {
      if (!fresh) return "stale";
      throw new LaneError("lane_cursor", `the records after cursor ${cursor} of lane ${lane} have left retention: replay from cursor 0`);
    }
    const start = cursor === 0 ? Math.max(first, 1) : cursor + 1;
    const empty = { events: [], cursor, firstRetained, lastSequence: last, examined: 0 };
    if (start > last) return empty;
    const events: LaneRecord[] = [];
    let examined = 0;
    let bytes = 0;
    let position = cursor;
    let expected = start;
    // Read no more than the page can still use: as many records as events
    // are wanted, then more only while work records were skipped — each
    // read after the first doubles, so that a run of work costs a few reads,
    // not one per record — within the examined bound, the page's bytes and
    // the lane's end.
    let wanted = 0;
    while (events.length < maxEvents && examined < MAX_EXAMINED && expected <= last && bytes < PAGE_BYTES) {
      wanted = Math.max(maxEvents - events.length, wanted * 2);
      const count = Math.min(wanted, MAX_EXAMINED - examined, last - expected + 1);
      const records = await this.store.readFrom(stream, expected, count, signal, PAGE_BYTES - bytes);
      if (!fresh && examined === 0 && (records.length === 0 || records[0]!.sequence !== start)) return "stale";
      for (const record of records) {
        if (record.sequence !== expected) {
          throw new LaneError("lane_cursor", `record ${expected} of lane ${lane} is missing from retention while it was being read: replay again`);
        }
        // Decoded only as far as the page needs (its kind); the rest when a caller asks.
        const stored = storedRecord(record.data, record.sequence);
        if (stored === undefined) throw new Error(`record ${record.sequence} of a lane stream is not a Laneway envelope`);
        examined += 1;
        bytes += record.data.byteLength;
        position = record.sequence;
        expected += 1;
        if (stored.kind === "event") {
          events.push(stored);
          if (events.length >= maxEvents) break;
        }
      }
      // A short read (the page's bytes, or nothing more arrived in time)
      // ends the page: the cursor has passed nothing unread.
      if (records.length < count) break;
      // The end of a range known from earlier pages is not the lane's end:
      // a page that could hold more asks the broker once for the present
      // range and reads on, so that `last_sequence` is never an old one.
      if (!fresh && expected > last && events.length < maxEvents && examined < MAX_EXAMINED && bytes < PAGE_BYTES) {
        fresh = true;
        last = Math.max(last, (await this.store.range(stream, signal)).last);
      }
    }
    // The reads may have learnt of later records (their pending counts).
    const lastSequence = Math.max(last, this.store.knownRange(stream)?.last ?? 0);
    return { events, cursor: position, firstRetained, lastSequence, examined };
  }
}
