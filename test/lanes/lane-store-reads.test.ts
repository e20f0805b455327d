import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneError } from "../../src/lanes/index.js";
import { LaneStore } from "../../src/lanes/lane-store.js";
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
 * large for any pull is an error, never a silent skip.
 */

const STREAM = "READS";
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
