/**
 * Helpers for the work-group suites: publishing work, claiming and settling
 * it through the generated client, reading a group's inspection, losing a
 * response on purpose, and a read-only look at the group-ledger bucket.
 *
 * Everything that calls Laneway goes through the generated client. The
 * bucket reader is, like `brokerSnapshot`, a read-only view of the test's
 * own broker.
 */
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { expect } from "vitest";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import {
  DeliveryState,
  RecordKind,
  type Delivery,
  type GroupState,
  type LaneRecord,
  type Work,
} from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { groupBucket, groupKey } from "../../src/lanes/names.js";
import { jsonPayload, reasonOf, type LaneClient } from "./lanes.js";
import { waitFor } from "./wait-for.js";

/** A work publication (override anything). */
export function workOn(lane: string, id: string, payload: unknown = { id }, overrides: Partial<{ schema: string; provenance: string }> = {}) {
  return { lane, id, kind: RecordKind.WORK, schema: "job-v1", payload: jsonPayload(payload), provenance: "", ...overrides };
}

/**
 * Publishes work records (batches of up to 128, `parallel` batches at a
 * time); returns the records in sequence order. Any record's failure fails.
 */
export async function publishWork(
  client: LaneClient,
  lane: string,
  ids: readonly string[],
  options: { schema?: string; parallel?: number; kind?: RecordKind } = {},
): Promise<LaneRecord[]> {
  const chunks: string[][] = [];
  for (let i = 0; i < ids.length; i += 128) chunks.push(ids.slice(i, i + 128));
  const records: LaneRecord[] = [];
  let next = 0;
  const worker = async () => {
    while (next < chunks.length) {
      const chunk = chunks[next++]!;
      const response = await client.publishBatch({
        lane,
        records: chunk.map((id) => ({ id, kind: options.kind ?? RecordKind.WORK, schema: options.schema ?? "job-v1", payload: jsonPayload({ id }) })),
      });
      for (const result of response.results) {
        if (result.outcome.case !== "published") throw new Error(`not published: ${result.outcome.value?.reason} ${result.outcome.value?.message}`);
        records.push(result.outcome.value.record!);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.parallel ?? 1, chunks.length) }, worker));
  return records.sort((a, b) => Number(a.sequence - b.sequence));
}

/** Claims one record (waiting up to `waitMs`); undefined when none was eligible. */
export async function claimOne(client: LaneClient, lane: string, group: string, waitMs = 0): Promise<Work | undefined> {
  const response = await client.claim({ lane, group, wait: waitOf(waitMs) });
  return response.work;
}

export function waitOf(ms: number) {
  return { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 };
}

/** Claims batches until one comes back empty. */
export async function claimAll(client: LaneClient, lane: string, group: string, max = 64): Promise<Work[]> {
  const all: Work[] = [];
  for (;;) {
    const { work } = await client.claimBatch({ lane, group, maxRecords: max });
    if (work.length === 0) return all;
    all.push(...work);
  }
}

/** The (sequence, receipt) pair of a claimed work. */
export function receiptOf(work: Work): { sequence: bigint; receipt: string } {
  return { sequence: work.record!.sequence, receipt: work.receipt };
}

/** The lease expiry of a work, in epoch ms. */
export function leaseEnd(work: Work): number {
  return timestampMs(work.leaseExpiresAt!);
}

export async function inspectGroup(client: LaneClient, lane: string, group: string): Promise<GroupState> {
  return (await client.inspectGroup({ lane, group })).group!;
}

/** An unfinished delivery of an inspection by sequence (undefined when it is completed, retired or was never leased). */
export function deliveryOf(group: GroupState, sequence: bigint): Delivery | undefined {
  return group.deliveries.find((d) => d.sequence === sequence);
}

/** A compact view of a group's unfinished deliveries: [sequence, project, attempt, state name]. */
export function deliveriesView(group: GroupState): [number, string, number, string][] {
  return group.deliveries.map((d) => [Number(d.sequence), d.project, d.attempt, DeliveryState[d.state]]);
}

/**
 * The completion of a work record's sequence in the group's completion
 * history: its attempt and its bucket's last acknowledgement time (what a
 * duplicate ack answers), or undefined when the history does not hold it.
 * (A range also covers the events the completed work passed: ask only about
 * work records.)
 */
export function completionOf(group: GroupState, sequence: bigint): { attempt: number; lastAckedAt: number } | undefined {
  for (const bucket of group.completions) {
    if (!bucket.ranges.some((r) => r.first <= sequence && sequence <= r.last)) continue;
    const retried = bucket.retried.find((r) => r.sequence === sequence);
    return { attempt: retried?.attempt ?? 1, lastAckedAt: timestampMs(bucket.lastAckedAt!) };
  }
  return undefined;
}

/** Where a work record stands in a group: its unfinished delivery's state, ACKED once completed, undefined otherwise. */
export function stateOf(group: GroupState, sequence: bigint): DeliveryState | undefined {
  return deliveryOf(group, sequence)?.state ?? (completionOf(group, sequence) === undefined ? undefined : DeliveryState.ACKED);
}

/** How many deliveries the group's completion history holds (within ack_retention). */
export function completedCount(group: GroupState): number {
  return group.completions.reduce((n, b) => n + Number(b.completed), 0);
}

/** Waits until `sequence` is eligible again (its lease ended or its retry is due), per inspection. */
export async function waitReleased(client: LaneClient, lane: string, group: string, sequence: bigint, timeoutMs = 60_000): Promise<Delivery> {
  return waitFor(
    async () => {
      const d = deliveryOf(await inspectGroup(client, lane, group), sequence);
      return d?.state === DeliveryState.RELEASED ? d : undefined;
    },
    { timeoutMs, intervalMs: 50, what: `delivery ${sequence} to be released` },
  );
}

/** The code and reason of a failure (for comparing with toEqual). */
export function codeAndReason(error: unknown): { code: string; reason: string | undefined } {
  const e = ConnectError.from(error);
  return { code: Code[e.code]!, reason: reasonOf(e) };
}

/**
 * An interceptor that lets the server answer, then loses the answer: the
 * call fails on the client as if the connection dropped after the server
 * had done its work. `lose(method)` says which calls to lose; every lost
 * answer is kept in `lost` (so a test can prove what the server did).
 */
export function responseLoser(lose: (method: string) => boolean): { interceptor: Interceptor; lost: unknown[] } {
  const lost: unknown[] = [];
  const interceptor: Interceptor = (next) => async (req) => {
    const response = await next(req);
    if (!lose(req.method.name)) return response;
    lost.push(response.message);
    throw new ConnectError("the response was lost on its way to the client", Code.Unavailable);
  };
  return { interceptor, lost };
}

/**
 * An interceptor that holds calls of the given methods until `release()`
 * (calls made after the release go through at once).
 */
export function callHolder(methods: readonly string[]): { interceptor: Interceptor; held: () => number; release: () => void } {
  let released = false;
  let waiting: (() => void)[] = [];
  let heldCount = 0;
  const interceptor: Interceptor = (next) => async (req) => {
    if (!released && methods.includes(req.method.name)) {
      heldCount += 1;
      await new Promise<void>((resolve) => waiting.push(resolve));
    }
    return next(req);
  };
  return {
    interceptor,
    held: () => heldCount,
    release() {
      released = true;
      for (const resolve of waiting) resolve();
      waiting = [];
    },
  };
}

/** Read-only: the stored size of one group's ledger value and of the whole group bucket. */
export async function groupBucketUsage(
  url: string,
  namespace: string,
  lane: string,
  group: string,
): Promise<{ valueBytes: number | undefined; bucketBytes: number; bucketMaxBytes: number; keys: number }> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const kvm = new Kvm(nc);
    const kv = await kvm.open(groupBucket(namespace), { bindOnly: true });
    const entry = await kv.get(groupKey(lane, group));
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(`KV_${groupBucket(namespace)}`);
    return {
      valueBytes: entry === null || entry.operation !== "PUT" ? undefined : entry.value.byteLength,
      bucketBytes: info.state.bytes,
      bucketMaxBytes: info.config.max_bytes,
      keys: info.state.messages,
    };
  } finally {
    await nc.close();
  }
}

/**
 * Read-only: the stored message of one group's ledger as JetStream keeps
 * it — its subject, its headers (the compare-and-set's expected-revision
 * header among them) and its value — and the bytes the stream accounts for
 * it (a file store record: 22 bytes of framing and an 8-byte checksum
 * around subject, headers and value).
 */
export async function storedLedgerMessage(
  url: string,
  namespace: string,
  lane: string,
  group: string,
): Promise<{ subjectBytes: number; headerBytes: number; valueBytes: number; recordBytes: number; headers: string[] }> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const jsm = await jetstreamManager(nc);
    const subject = `$KV.${groupBucket(namespace)}.${groupKey(lane, group)}`;
    const message = await jsm.streams.getMessage(`KV_${groupBucket(namespace)}`, { last_by_subj: subject });
    if (message === null) throw new Error(`no stored ledger for ${lane}.${group}`);
    const headerBytes = message.header === undefined ? 0 : encodedHeaderBytes(message.header);
    const headers: string[] = [];
    if (message.header !== undefined) for (const [key, values] of message.header) headers.push(`${key}: ${values.join(",")}`);
    const subjectBytes = Buffer.byteLength(message.subject);
    return { subjectBytes, headerBytes, valueBytes: message.data.byteLength, recordBytes: 22 + subjectBytes + headerBytes + message.data.byteLength + 8, headers };
  } finally {
    await nc.close();
  }
}

/** The wire size of a NATS header block (`NATS/1.0\r\n`, one `key: value\r\n` per value, a blank line). */
function encodedHeaderBytes(header: Iterable<[string, string[]]>): number {
  let bytes = "NATS/1.0\r\n".length + 2;
  for (const [key, values] of header) for (const value of values) bytes += Buffer.byteLength(`${key}: ${value}\r\n`);
  return bytes;
}

/**
 * Provisions a group ledger value directly in the test's own broker (as
 * another writer of the namespace would have left it): for the tests of
 * values Laneway must refuse to read.
 */
export async function putLedgerValue(url: string, namespace: string, lane: string, group: string, value: string): Promise<void> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const kv = await new Kvm(nc).open(groupBucket(namespace), { bindOnly: true });
    await kv.put(groupKey(lane, group), value);
  } finally {
    await nc.close();
  }
}

/** Read-only: a group ledger value as stored (undefined when there is none). */
export async function ledgerValue(url: string, namespace: string, lane: string, group: string): Promise<string | undefined> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const kv = await new Kvm(nc).open(groupBucket(namespace), { bindOnly: true });
    const entry = await kv.get(groupKey(lane, group));
    return entry === null || entry.operation !== "PUT" ? undefined : entry.string();
  } finally {
    await nc.close();
  }
}

/** Retries a call until the broker answers again; every failure meanwhile must be broker trouble (`lane_unavailable`, `lane_timeout`). */
export async function whenBack<T>(call: () => Promise<T>): Promise<T> {
  const seen = new Set<string>();
  const result = await waitFor(
    async () => {
      try {
        return { value: await call() };
      } catch (error) {
        seen.add(reasonOf(ConnectError.from(error)) ?? "none");
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "the broker to answer again" },
  );
  expect([...seen].filter((r) => r !== "lane_unavailable" && r !== "lane_timeout")).toEqual([]);
  return result.value;
}
