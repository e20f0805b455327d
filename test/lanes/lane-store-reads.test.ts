import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneError } from "../../src/lanes/index.js";
import { LaneStore, READ_AHEAD_READS } from "../../src/lanes/lane-store.js";
import { ReadBudget } from "../../src/lanes/read-budget.js";
import { BrokerConnection } from "../../src/nats/index.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * The lanes core's flow-controlled reads, against a real nats-server and a
 * plain stream: a read stops at its byte bound but always carries a
 * record, and the next read continues where it stopped; a read that asks
 * for more than the stream holds ends short once the broker's pull
 * expires; a read canceled, or whose connection closes, while its pull
 * waits ends at once with lane_canceled or lane_unavailable; a record too
 * large for any pull is an error, never a silent skip. With kept
 * consumers (the readers' store), the consumer kept for the next read reads
 * ahead: the next reads get their records without a broker answer, a read
 * that takes fewer leaves the rest in order to the reads after it, and
 * every byte held or granted is given back.
 */

const STREAM = "READS";
/** A stream of AHEAD_RECORDS small records for the kept consumers' reads. */
const AHEAD = "AHEAD";
const AHEAD_RECORDS = 200;
const LARGE = 10_000;
const RECORDS = 12;

let nats: NatsServerHandle;
let broker: BrokerConnection;
/** Sized for records of up to 20,000 bytes; its pulls expire after 1 s. */
let store: LaneStore;
/**
 * The store's broker timeout, and so its pulls' expiry, for the reads that
 * must still be waiting when the test ends them: the longest pull (5 s), so
 * that a busy machine cannot let one expire before its cancellation or its
 * connection's close arrives.
 */
const WAITING_TIMEOUT_MS = 5_000;

beforeAll(async () => {
  nats = await startNatsServer();
  broker = await BrokerConnection.open({ servers: nats.url });
  await broker.jetstreamManager().streams.add({ name: STREAM, subjects: ["reads.>"] });
  const js = broker.jetstream();
  for (let i = 1; i <= RECORDS; i++) await js.publish(`reads.${i}`, new Uint8Array(LARGE).fill(i));
  await broker.jetstreamManager().streams.add({ name: AHEAD, subjects: ["ahead.>"] });
  await Promise.all(Array.from({ length: AHEAD_RECORDS }, (_, i) => i + 1).map((i) => js.publish(`ahead.${i}`, new TextEncoder().encode(`record ${i}`), { expect: {} })));
  store = new LaneStore(broker, 1_000, 1, { maxRecordBytes: 20_000 });
});

afterAll(async () => {
  await broker?.close();
  await nats?.remove();
});

function sequences(records: readonly { sequence: number }[]): number[] {
  return records.map((r) => r.sequence);
}

describe("flow-controlled reads", () => {
  test("a read stops at its byte bound, always with at least one record, and the next read goes on from there", async () => {
    const first = await store.readFrom(STREAM, 1, RECORDS, undefined, 25_000);
    expect(first.length).toBeGreaterThanOrEqual(1);
    expect(first.length).toBeLessThan(RECORDS);
    expect(sequences(first)).toEqual(Array.from({ length: first.length }, (_, i) => i + 1));
    expect(first.every((r) => r.data.byteLength === LARGE && r.data[0] === r.sequence)).toBe(true);

    const rest = await store.readFrom(STREAM, first.length + 1, RECORDS - first.length);
    expect(sequences(rest)).toEqual(Array.from({ length: RECORDS - first.length }, (_, i) => first.length + 1 + i));

    // A bound below one record still reads one.
    const one = await store.readFrom(STREAM, 5, 1, undefined, 1);
    expect(sequences(one)).toEqual([5]);
  });

  test("reads sharing a small budget take turns and all complete", async () => {
    const budget = new ReadBudget(30_000);
    const shared = new LaneStore(broker, 1_000, 1, { maxRecordBytes: 20_000, budget });
    const reads = await Promise.all(Array.from({ length: 6 }, (_, i) => shared.readFrom(STREAM, 1 + i, 4)));
    reads.forEach((records, i) => expect(sequences(records)).toEqual([1 + i, 2 + i, 3 + i, 4 + i]));
    expect(budget.available).toBe(30_000);
  });

  test("a read of more than the stream holds returns what it holds once the broker's pull expires", async () => {
    const all = await store.readFrom(STREAM, 1, 100);
    expect(sequences(all)).toEqual(Array.from({ length: RECORDS }, (_, i) => i + 1));
  });

  test("a read canceled while its pull waits ends with lane_canceled", async () => {
    const waiting = new LaneStore(broker, WAITING_TIMEOUT_MS, 1, { maxRecordBytes: 20_000 });
    const abort = new AbortController();
    const reading = waiting.readFrom(STREAM, RECORDS + 1, 5, abort.signal);
    setTimeout(() => abort.abort(new DOMException("the call was canceled", "AbortError")), 50);
    const error = await reading.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LaneError);
    expect((error as LaneError).reason).toBe("lane_canceled");
  });

  test("a read whose connection closes while its pull waits ends with lane_unavailable", async () => {
    const own = await BrokerConnection.open({ servers: nats.url });
    const closing = new LaneStore(own, WAITING_TIMEOUT_MS, 1, { maxRecordBytes: 20_000 });
    const reading = closing.readFrom(STREAM, RECORDS + 1, 5);
    setTimeout(() => void own.close(), 50);
    const error = await reading.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LaneError);
    expect((error as LaneError).reason).toBe("lane_unavailable");
  });

  test("a record larger than the store's largest record is an error, never skipped", async () => {
    const small = new LaneStore(broker, 1_000, 1, { maxRecordBytes: 100 });
    const error = await small.readFrom(STREAM, 1, 1, undefined, 1).catch((e: unknown) => e);
    // A fault of the deployment (startup checks every stream's max_msg_size): internal, not a lane reason.
    expect(error).not.toBeInstanceOf(LaneError);
    expect(String((error as Error).cause)).toMatch(/larger than the stream's max_msg_size/);
    // A budget smaller than one pull of the largest record is refused.
    expect(() => new LaneStore(broker, 1_000, 1, { maxRecordBytes: 20_000, budget: new ReadBudget(1_000) })).toThrow(RangeError);
  });
});

/** Sequences from..to, inclusive. */
function span(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

/** Waits (bounded) until `condition` holds. */
async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Runs `reads` on a store with kept consumers (as the readers' store is),
 * then closes it and waits until every byte it held or was granted is back.
 */
async function withKeptReaders(reads: (readers: LaneStore) => Promise<void>): Promise<void> {
  const budget = new ReadBudget(4 * 1024 * 1024);
  // Kept for a minute, not 2 s: a busy machine's pause between two reads must not drop the consumer.
  const readers = new LaneStore(broker, 1_000, 1, { maxRecordBytes: 20_000, budget, reuseConsumers: true, keepMs: 60_000 });
  try {
    await reads(readers);
  } finally {
    readers.close();
  }
  await until(() => readers.readAheadBytes === 0 && budget.available === budget.capacity, "every byte held or granted is given back");
}

describe("kept consumers read ahead", () => {
  test("the reads after a kept consumer's read get their records without a broker answer", async () => {
    await withKeptReaders(async (readers) => {
      expect(sequences(await readers.readFrom(AHEAD, 1, 10))).toEqual(span(1, 10));
      await until(() => readers.readAheadBytes > 0, "the kept consumer has read ahead");
      // The broker stops answering: what was read ahead is all the next reads may use.
      await nats.pause();
      try {
        for (let from = 11; from < 11 + 10 * READ_AHEAD_READS; from += 10) {
          const records = await readers.readFrom(AHEAD, from, 10);
          expect(sequences(records)).toEqual(span(from, from + 9));
          expect(records.map((r) => new TextDecoder().decode(r.data))).toEqual(span(from, from + 9).map((i) => `record ${i}`));
        }
        expect(readers.readAheadBytes).toBe(0);
      } finally {
        await nats.resume();
      }
      // Once answered again, reading goes on from the same consumer.
      expect(sequences(await readers.readFrom(AHEAD, 11 + 10 * READ_AHEAD_READS, 10))).toEqual(span(51, 60));
    });
  });

  test("a read that takes fewer records than were read ahead leaves the rest, in order, to the reads after it", async () => {
    await withKeptReaders(async (readers) => {
      expect(sequences(await readers.readFrom(AHEAD, 1, 8))).toEqual(span(1, 8));
      await until(() => readers.readAheadBytes > 0, "the kept consumer has read ahead");
      // Fewer than were read ahead, then a byte bound below one record, then more than is left of it.
      expect(sequences(await readers.readFrom(AHEAD, 9, 3))).toEqual(span(9, 11));
      expect(sequences(await readers.readFrom(AHEAD, 12, 5, undefined, 1))).toEqual([12]);
      expect(sequences(await readers.readFrom(AHEAD, 13, 50))).toEqual(span(13, 62));
      // A read that does not start where a kept consumer stands reads from its own.
      expect(sequences(await readers.readFrom(AHEAD, 100, 5))).toEqual(span(100, 104));
      // To the stream's end: what is read ahead never goes beyond it.
      let from = 63;
      while (from <= AHEAD_RECORDS) {
        const records = await readers.readFrom(AHEAD, from, Math.min(25, AHEAD_RECORDS - from + 1));
        expect(sequences(records)).toEqual(span(from, from + records.length - 1));
        expect(records.length).toBeGreaterThan(0);
        from += records.length;
      }
      expect(from).toBe(AHEAD_RECORDS + 1);
    });
  });
});
