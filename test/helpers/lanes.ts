/**
 * Helpers for the durable lanes suites: record builders, error inspection,
 * reading a whole lane through Replay, and a read-only snapshot of what a
 * test's own nats-server holds (streams, their configuration and state, KV
 * buckets and their keys), so that a test can prove that startup changed
 * nothing.
 *
 * Everything that calls Laneway goes through the generated client; the
 * broker snapshot is the one place a test talks to NATS directly, and it
 * only reads.
 */
import { randomBytes } from "node:crypto";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { jetstreamManager, type StreamInfo } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { expect } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { LaneService, RecordKind, type LaneRecord, type PublishResponse } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { exampleLanesConfig } from "../../src/lanes/index.js";

export type LaneClient = Client<typeof LaneService>;

/** The JSON text of a value as payload bytes. */
export function jsonPayload(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value), "utf8");
}

/** The payload bytes of a record as text. */
export function text(bytes: Uint8Array | undefined): string {
  return Buffer.from(bytes ?? new Uint8Array()).toString("utf8");
}

/** A publication for `LaneService.publish` on lane `measurements` (override anything). */
export function eventOn(
  id: string,
  payload: unknown,
  overrides: Partial<{ lane: string; kind: RecordKind; schema: string; provenance: string; payload: Uint8Array }> = {},
) {
  return {
    lane: "measurements",
    id,
    kind: RecordKind.EVENT,
    schema: "temperature-v1",
    payload: jsonPayload(payload),
    provenance: "",
    ...overrides,
  };
}

/** The failure of a call that must fail, as a ConnectError. */
export async function failure(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("the call succeeded but was expected to fail");
}

/** The reason of a Laneway error detail (undefined when there is none). */
export function reasonOf(error: ConnectError): string | undefined {
  return error.findDetails(ErrorDetailSchema)[0]?.reason;
}

/** Asserts that a call fails with exactly this code and reason; returns the error. */
export async function expectLaneError(call: () => Promise<unknown>, code: Code, reason: string): Promise<ConnectError> {
  const error = await failure(call);
  expect({ code: Code[error.code], reason: reasonOf(error) }, error.rawMessage).toEqual({ code: Code[code], reason });
  return error;
}

/** The first message of a Follow stream (the stream stays open until `abort`). */
export async function firstFollowMessage(
  client: LaneClient,
  lane: string,
  cursor: bigint,
  abort: AbortController,
): Promise<{ events: LaneRecord[]; cursor: bigint; rest: AsyncIterator<{ events: LaneRecord[]; cursor: bigint }> }> {
  const iterator = client.follow({ lane, cursor }, { signal: abort.signal })[Symbol.asyncIterator]();
  const first = await iterator.next();
  if (first.done) throw new Error("the follow stream ended before its first message");
  return { events: first.value.events, cursor: first.value.cursor, rest: iterator };
}

/** Every event of a lane from `cursor` on, page by page, with the pages' cursors and event counts. */
export async function replayAll(
  client: LaneClient,
  lane: string,
  cursor = 0n,
): Promise<{ events: LaneRecord[]; pages: { cursor: bigint; events: number }[]; lastSequence: bigint; firstRetained: bigint }> {
  const events: LaneRecord[] = [];
  const pages: { cursor: bigint; events: number }[] = [];
  let position = cursor;
  for (let guard = 0; guard < 10_000; guard++) {
    const page = await client.replay({ lane, cursor: position });
    events.push(...page.events);
    pages.push({ cursor: page.cursor, events: page.events.length });
    if (page.cursor >= page.lastSequence) return { events, pages, lastSequence: page.lastSequence, firstRetained: page.firstRetained };
    // Every page must make progress, or the lane cannot be read to its end.
    expect(page.cursor).toBeGreaterThan(position);
    position = page.cursor;
  }
  throw new Error("replay did not reach the end of the lane");
}

/** The events of a lane with this id (from every retained record). */
export async function eventsWithId(client: LaneClient, lane: string, id: string): Promise<LaneRecord[]> {
  return (await replayAll(client, lane)).events.filter((e) => e.id === id);
}

/** The comparable fields of a published record. */
export function recordFields(record: LaneRecord | undefined) {
  if (record === undefined) throw new Error("no record");
  return {
    sequence: record.sequence,
    lane: record.lane,
    project: record.project,
    id: record.id,
    kind: record.kind,
    schema: record.schema,
    payload: text(record.payload),
    provenance: record.provenance,
    createdAt: `${record.createdAt?.seconds}.${record.createdAt?.nanos}`,
  };
}

/** The record of a successful Publish, or a failure. */
export function published(response: PublishResponse) {
  return recordFields(response.record);
}

/** A project token (32–4,096 bytes). */
export function newToken(): string {
  return randomBytes(32).toString("hex");
}

/**
 * The specification's example registry (atlas, beacon; one lane with
 * publishers, subscribers, a group and its recoverers) plus:
 * - cinder, a configured project with no capability on any lane;
 * - `atlas-owned`: owned by atlas, which holds no capability on it
 *   (beacon publishes, beacon subscribes);
 * - `beacon-feed`: only beacon publishes, only atlas subscribes;
 * - `summaries`: atlas publishes, nobody subscribes, beacon is a member
 *   and recoverer of group `digest` (membership grants no event
 *   subscription, ownership no publish).
 * Top-level fields (bounds, namespace) are replaced by `overrides`.
 */
export function registryWithStranger(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const config = exampleLanesConfig(overrides);
  (config.principals as unknown[]).push({ project: "cinder", token_env: "CINDER_LANE_TOKEN" });
  (config.lanes as unknown[]).push(
    { id: "atlas-owned", owner: "atlas", publishers: ["beacon"], subscribers: ["beacon"] },
    { id: "beacon-feed", owner: "beacon", publishers: ["beacon"], subscribers: ["atlas"] },
    { id: "summaries", owner: "beacon", publishers: ["atlas"], groups: { digest: ["beacon"] }, recoverers: { digest: ["beacon"] } },
  );
  return config;
}

// ---------------------------------------------------------------------------
// Read-only broker snapshots

export interface BrokerSnapshot {
  /** Stream name → its configuration and message state (without timestamps that move on their own). */
  readonly streams: Record<string, { config: Record<string, unknown>; messages: number; firstSeq: number; lastSeq: number; bytes: number }>;
}

/** Reads every stream of a broker (KV buckets are streams named `KV_<bucket>`). */
export async function brokerSnapshot(url: string): Promise<BrokerSnapshot> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    const jsm = await jetstreamManager(nc);
    const streams: BrokerSnapshot["streams"] = {};
    for await (const info of jsm.streams.list() as AsyncIterable<StreamInfo>) {
      const { created: _created, ...config } = info.config as unknown as Record<string, unknown>;
      streams[info.config.name] = {
        config,
        messages: info.state.messages,
        firstSeq: info.state.first_seq,
        lastSeq: info.state.last_seq,
        bytes: info.state.bytes,
      };
    }
    return { streams };
  } finally {
    await nc.close();
  }
}

/** Runs `action` with a direct JetStream manager on a test's own broker (for provisioning conflicting state). */
export async function withJetStream<T>(url: string, action: (jsm: Awaited<ReturnType<typeof jetstreamManager>>) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: url, reconnect: false });
  try {
    return await action(await jetstreamManager(nc));
  } finally {
    await nc.close();
  }
}
