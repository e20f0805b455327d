import type { StreamConfig, StreamInfo } from "@nats-io/jetstream";
import { DiscardPolicy, StorageType } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { CoreStartupError } from "../errors/core-error.js";
import type { Logger } from "../log/logger.js";
import type { BrokerConnection } from "../nats/index.js";
import { LaneError } from "./errors.js";
import { LaneStore } from "./lane-store.js";
import { GENERATION_KEY, groupBucket, laneSubjects, metaBucket, reservationBucket, streamName } from "./names.js";
import { serializeRegistry } from "./registry-document.js";
import type { LanesConfig } from "./types.js";
import { minimumLedgerBytes } from "./ledger-capacity.js";

/**
 * The namespace generation: the registry and the delivery bounds, stored in
 * the namespace itself, and the streams and buckets they imply.
 *
 * Startup first reads everything that exists and compares it with what the
 * configuration implies — the stored registry text, every lane stream's and
 * bucket's configuration. Anything incompatible is a `state_conflict` and
 * nothing is created or rewritten; only when all of it is compatible are the
 * missing streams and buckets created and the generation stored. A broker
 * that cannot be reached is `unavailable`. The generation is immutable: a
 * new registry or new bounds need a new namespace (operators migrate and
 * retire the old one).
 */

/**
 * The internal state format: a writer of another format is refused. Format 4
 * stores records as binary RecordEnvelope messages (envelope.ts); format 3
 * stored them as JSON.
 */
export const STATE_FORMAT = 4;

/** How long startup waits for the broker before it reports it unavailable. */
const CONNECT_WAIT_MS = 15_000;

/** The largest envelope of a record: base64 of the payload plus the fixed fields, provenance and ids. */
export function maxEnvelopeBytes(maxPayload: number): number {
  return Math.ceil(maxPayload / 3) * 4 + 8_192;
}

export interface Namespace {
  readonly config: LanesConfig;
  readonly replicas: number;
  /** Lane id → its stream name. */
  readonly streams: ReadonlyMap<string, string>;
  readonly reservations: string;
  /** The shared group-ledger bucket. */
  readonly groups: string;
}

interface Wanted {
  readonly what: string;
  readonly stream: string;
  readonly config: Partial<StreamConfig> & { name: string };
}

/** The KV bucket settings of the namespace, by bucket. */
function bucketSettings(config: LanesConfig, replicas: number) {
  const ns = config.namespace;
  return [
    { what: "the namespace generation bucket", bucket: metaBucket(ns), history: 1, ttlMs: 0 },
    // A reservation lives as long as the records it fences.
    { what: "the publish reservation bucket", bucket: reservationBucket(ns), history: 1, ttlMs: config.bounds.retentionMs },
    // Group ledgers share ledger_bytes; admission keeps headroom in it (work-groups.ts).
    { what: "the group ledger bucket", bucket: groupBucket(ns), history: 1, ttlMs: 0, maxBytes: config.bounds.ledgerBytes },
  ].map((b) => ({ maxBytes: -1, ...b, replicas }));
}

export async function openNamespace(broker: BrokerConnection, config: LanesConfig, replicas: number, log: Logger): Promise<Namespace> {
  checkLedgerBytes(config);
  await waitConnected(broker);
  const store = new LaneStore(broker, config.bounds.operationTimeoutMs, replicas);
  const ns = config.namespace;
  const generationText = JSON.stringify({ state_format: STATE_FORMAT, registry: serializeRegistry(config) });
  const streams = new Map(config.lanes.map((lane) => [lane.id, streamName(ns, lane.id)]));
  const wantedStreams: Wanted[] = config.lanes.map((lane) => ({
    what: `the stream of lane ${lane.id}`,
    stream: streams.get(lane.id)!,
    config: LaneStore.laneStreamConfig({
      name: streams.get(lane.id)!,
      subjects: laneSubjects(ns, lane.id),
      retentionMs: config.bounds.retentionMs,
      maxRecords: config.bounds.maxRecords,
      maxBytes: config.bounds.maxBytes,
      duplicateWindowMs: config.bounds.duplicateWindowMs,
      replicas,
      maxMessageBytes: maxEnvelopeBytes(config.bounds.maxPayload),
    }),
  }));
  const buckets = bucketSettings(config, replicas);

  try {
    // 1. Read and compare everything; change nothing.
    const existingStreams = new Map<string, StreamInfo | undefined>();
    for (const wanted of wantedStreams) {
      const info = await store.streamInfo(wanted.stream);
      existingStreams.set(wanted.stream, info);
      if (info !== undefined) compareStream(wanted, info);
    }
    const existingBuckets = new Map<string, StreamInfo | undefined>();
    for (const bucket of buckets) {
      const info = await store.streamInfo(`KV_${bucket.bucket}`);
      existingBuckets.set(bucket.bucket, info);
      if (info !== undefined) compareBucket(bucket, info);
    }
    if (existingBuckets.get(metaBucket(ns)) !== undefined) {
      const stored = await store.kvGet(metaBucket(ns), GENERATION_KEY);
      if (stored !== undefined && stored.string() !== generationText) throw generationConflict(ns, stored.string());
    }

    // 2. Everything present is compatible: create what is missing.
    const kvm = new Kvm(broker.jetstream());
    for (const bucket of buckets) {
      if (existingBuckets.get(bucket.bucket) !== undefined) continue;
      await store.run(
        () =>
          kvm.create(bucket.bucket, {
            history: bucket.history,
            replicas: bucket.replicas,
            storage: StorageType.File,
            // Direct gets may be answered by a follower; a replicated bucket is read from its leader.
            allow_direct: bucket.replicas === 1,
            ...(bucket.ttlMs > 0 ? { ttl: bucket.ttlMs } : {}),
            ...(bucket.maxBytes > 0 ? { max_bytes: bucket.maxBytes } : {}),
          }),
        "creating a bucket",
      );
    }
    for (const wanted of wantedStreams) {
      if (existingStreams.get(wanted.stream) !== undefined) continue;
      try {
        await store.addStream(wanted.config);
      } catch (error) {
        // Another Laneway may have created it meanwhile: compatible is fine.
        const info = await store.streamInfo(wanted.stream);
        if (info === undefined) throw error;
        compareStream(wanted, info);
      }
    }
    const created = await store.kvCreate(metaBucket(ns), GENERATION_KEY, Buffer.from(generationText, "utf8"));
    if (created === "exists") {
      const stored = await store.kvGet(metaBucket(ns), GENERATION_KEY);
      if (stored?.string() !== generationText) throw generationConflict(ns, stored?.string());
    } else {
      log.info("lanes namespace generation stored", { namespace: ns, lanes: config.lanes.length });
    }
  } catch (error) {
    if (error instanceof CoreStartupError) throw error;
    if (error instanceof LaneError && (error.reason === "lane_unavailable" || error.reason === "lane_timeout")) {
      throw new CoreStartupError("lanes", "unavailable", `lanes: the message broker is unavailable while opening namespace ${ns}`, { cause: error });
    }
    throw new CoreStartupError("lanes", "unavailable", `lanes: namespace ${ns} could not be opened on the message broker`, { cause: error });
  }
  return { config, replicas, streams, reservations: reservationBucket(ns), groups: groupBucket(ns) };
}

/**
 * ledger_bytes must hold the headroom of the largest single write plus at
 * least one group with one slot, or no group could ever be admitted.
 */
function checkLedgerBytes(config: LanesConfig): void {
  const needed = minimumLedgerBytes(config);
  if (config.bounds.ledgerBytes < needed) {
    throw new CoreStartupError(
      "lanes",
      "state_conflict",
      `lanes: ledger_bytes is ${config.bounds.ledgerBytes}, but this registry and max_ledger need at least ${needed} to admit one group`,
    );
  }
}

async function waitConnected(broker: BrokerConnection): Promise<void> {
  if (broker.state === "connected") return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new CoreStartupError("lanes", "unavailable", "lanes: the message broker is unavailable: check --nats-url (or the lanes url) and its credentials"));
    }, CONNECT_WAIT_MS);
    const stop = broker.onStateChange((change) => {
      if (change.state === "connected") {
        clearTimeout(timer);
        stop();
        resolve();
      } else if (change.state === "closed") {
        clearTimeout(timer);
        stop();
        reject(new CoreStartupError("lanes", "unavailable", "lanes: the message broker connection is closed"));
      }
    });
    if (broker.state === "connected") {
      clearTimeout(timer);
      stop();
      resolve();
    }
  });
}

function generationConflict(namespace: string, stored: string | undefined): CoreStartupError {
  let format: unknown;
  try {
    format = (JSON.parse(stored ?? "{}") as { state_format?: unknown }).state_format;
  } catch {
    format = undefined;
  }
  const why =
    format !== STATE_FORMAT
      ? `it was written in another state format (${typeof format === "number" ? format : "unknown"}; this Laneway writes ${STATE_FORMAT})`
      : "it holds another registry or other bounds";
  return new CoreStartupError(
    "lanes",
    "state_conflict",
    `lanes: namespace ${namespace} already holds a different generation: ${why}; the registry and bounds of a namespace are immutable, so use a new namespace for this configuration`,
  );
}

/** The stream fields a lane's configuration decides; any difference is a conflict. */
const streamFields = [
  "subjects",
  "retention",
  "storage",
  "discard",
  "max_age",
  "max_msgs",
  "max_bytes",
  "max_msg_size",
  "duplicate_window",
  "num_replicas",
  "allow_direct",
  "deny_delete",
  "deny_purge",
] as const;

function compareStream(wanted: Wanted, info: StreamInfo): void {
  const actual = info.config as unknown as Record<string, unknown>;
  const expected = wanted.config as unknown as Record<string, unknown>;
  const differing = streamFields.filter((field) => JSON.stringify(actual[field] ?? null) !== JSON.stringify(expected[field] ?? null));
  if (differing.length > 0) {
    throw new CoreStartupError("lanes", "state_conflict", `lanes: ${wanted.what} exists with a different configuration (${differing.join(", ")}); nothing was changed`);
  }
}

function compareBucket(bucket: { what: string; history: number; ttlMs: number; replicas: number; maxBytes: number }, info: StreamInfo): void {
  const config = info.config;
  const differing: string[] = [];
  if (config.max_bytes !== bucket.maxBytes) differing.push("max_bytes");
  if (config.max_msgs_per_subject !== bucket.history) differing.push("history");
  if (config.max_age !== bucket.ttlMs * 1_000_000) differing.push("ttl");
  if (config.num_replicas !== bucket.replicas) differing.push("replicas");
  if (config.storage !== StorageType.File) differing.push("storage");
  if (config.discard !== DiscardPolicy.New) differing.push("discard");
  if (differing.length > 0) {
    throw new CoreStartupError("lanes", "state_conflict", `lanes: ${bucket.what} exists with a different configuration (${differing.join(", ")}); nothing was changed`);
  }
}
