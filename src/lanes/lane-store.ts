import { DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { JetStreamClient, JetStreamManager, StreamConfig, StreamInfo } from "@nats-io/jetstream";
import { Bucket, Kvm, type KV, type KvEntry } from "@nats-io/kv";
import {
  BrokerConnection,
  classifyNatsError,
  JetStreamErrorCode,
  JetStreamRejectedError,
  type NatsFailure,
} from "../nats/index.js";
import { LaneError } from "./errors.js";

/**
 * The lanes core's one door to JetStream: streams, direct reads, ordered
 * reads and the KV buckets, over Laneway's broker connection, with every
 * broker operation bounded by the namespace's `operation_timeout` and by the
 * caller's cancellation.
 *
 * Broker failures become LaneErrors here and nowhere else: an unavailable
 * broker, a full stream or an account limit is `lane_unavailable` (never an
 * accepted publication), a timeout is `lane_timeout`, a cancellation
 * `lane_canceled`. A JetStream refusal that a caller handles itself (a
 * subject or KV compare-and-set conflict) is returned as a value, not
 * thrown. The backend's own text never reaches a message.
 */

/** The handles of one live connection, rebuilt after a reconnect. */
interface Handles {
  readonly generation: number;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly kvm: Kvm;
  readonly buckets: Map<string, KV>;
}

/** One stored record as read from a stream. */
export interface StoredRecord {
  readonly sequence: number;
  readonly subject: string;
  readonly data: Uint8Array;
}

/** A stream's retained range: `first` is `last + 1` when nothing is retained. */
export interface StreamRange {
  readonly first: number;
  readonly last: number;
}

export class LaneStore {
  #handles: Handles | undefined;

  /**
   * On a replicated namespace every read goes to the stream's leader: a
   * direct get may be answered by a follower that has not yet applied the
   * write this process just made (a record read back, a reservation
   * rechecked), which would look like a conflict.
   */
  readonly #leaderReads: boolean;

  constructor(
    private readonly broker: BrokerConnection,
    private readonly timeoutMs: number,
    replicas = 1,
  ) {
    this.#leaderReads = replicas > 1;
  }

  /** One message of a stream, by sequence or last on a subject; null when none. */
  async #getMessage(stream: string, query: { seq: number } | { last_by_subj: string }) {
    const { jsm } = await this.#current();
    if (!this.#leaderReads) return jsm.direct.getMessage(stream, query);
    try {
      return await jsm.streams.getMessage(stream, query);
    } catch (error) {
      if (isCode(error, JetStreamErrorCode.NoMessageFound)) return null;
      throw error;
    }
  }

  /** The broker's current connection generation (a new value means earlier subscriptions are gone). */
  get generation(): number {
    return this.broker.generation;
  }

  /** The NATS connection, for core subscriptions (lane watchers). */
  connection() {
    return this.run(async () => this.broker.connection(), "connecting to the message broker");
  }

  async #current(): Promise<Handles> {
    const nc = this.broker.connection();
    const generation = this.broker.generation;
    if (this.#handles?.generation === generation) return this.#handles;
    const jsm = await jetstreamManager(nc, { timeout: this.timeoutMs, checkAPI: false });
    const js = jetstream(nc, { timeout: this.timeoutMs });
    this.#handles = { generation, js, jsm, kvm: new Kvm(js), buckets: new Map() };
    return this.#handles;
  }

  /**
   * Runs a broker operation, translating its failure. `signal` ends the
   * wait at once (the operation itself may still complete at the broker).
   */
  async run<T>(operation: () => Promise<T>, action: string, signal?: AbortSignal): Promise<T> {
    const generation = this.broker.generation;
    try {
      return await raceSignal(operation(), signal);
    } catch (error) {
      const translated = laneErrorOf(error, action, signal);
      // nats.js fails requests pending when a connection closes with a bare
      // `RequestError("connection closed")` that carries no typed cause; an
      // operation whose connection was lost while it ran is unavailable,
      // never an internal error.
      if (!(translated instanceof LaneError) && classifyNatsError(translated).kind === "unknown" && (this.broker.state !== "connected" || this.broker.generation !== generation)) {
        throw new LaneError("lane_unavailable", `the message broker is unavailable (${action}); retry with the same id`, { cause: translated });
      }
      throw translated;
    }
  }

  // ------------------------------------------------------------- streams

  streamInfo(name: string, signal?: AbortSignal): Promise<StreamInfo | undefined> {
    return this.run(
      async () => {
        const { jsm } = await this.#current();
        try {
          return await jsm.streams.info(name);
        } catch (error) {
          if (isCode(error, JetStreamErrorCode.StreamNotFound)) return undefined;
          throw error;
        }
      },
      "reading a stream",
      signal,
    );
  }

  addStream(config: Partial<StreamConfig> & { name: string }): Promise<StreamInfo> {
    return this.run(async () => (await this.#current()).jsm.streams.add(config), "creating a stream");
  }

  async range(name: string, signal?: AbortSignal): Promise<StreamRange> {
    const info = await this.streamInfo(name, signal);
    if (info === undefined) throw new LaneError("lane_unavailable", "the lane's stream is missing on the message broker");
    return { first: info.state.first_seq, last: info.state.last_seq };
  }

  /**
   * Appends one message with a message id and an expected last sequence for
   * its subject. Returns the acknowledgement, or `subject_taken` when the
   * subject already holds a message (the caller reads and compares it).
   */
  append(
    subject: string,
    data: Uint8Array,
    options: { msgID: string; expectLastSubjectSequence: number },
    signal?: AbortSignal,
  ): Promise<{ sequence: number; duplicate: boolean } | "subject_taken"> {
    return this.run(
      async () => {
        const { js } = await this.#current();
        try {
          const ack = await js.publish(subject, data, {
            msgID: options.msgID,
            expect: { lastSubjectSequence: options.expectLastSubjectSequence },
            timeout: this.timeoutMs,
            retries: 0,
          });
          return { sequence: ack.seq, duplicate: ack.duplicate };
        } catch (error) {
          if (isCode(error, JetStreamErrorCode.WrongLastSequence)) return "subject_taken" as const;
          throw error;
        }
      },
      "publishing a record",
      signal,
    );
  }

  /** One message by sequence; undefined when it is not retained. */
  bySequence(stream: string, sequence: number, signal?: AbortSignal): Promise<StoredRecord | undefined> {
    return this.run(
      async () => {
        const message = await this.#getMessage(stream, { seq: sequence });
        return message === null || message.seq !== sequence ? undefined : { sequence: message.seq, subject: message.subject, data: message.data };
      },
      "reading a record",
      signal,
    );
  }

  /** The last message on a subject; undefined when there is none. */
  lastOnSubject(stream: string, subject: string, signal?: AbortSignal): Promise<StoredRecord | undefined> {
    return this.run(
      async () => {
        const message = await this.#getMessage(stream, { last_by_subj: subject });
        return message === null ? undefined : { sequence: message.seq, subject: message.subject, data: message.data };
      },
      "reading a record",
      signal,
    );
  }

  /**
   * Up to `count` retained messages from `from` on, in sequence order, read
   * with one ordered consumer (a gap in the sequences shows as a jump).
   */
  readFrom(stream: string, from: number, count: number, signal?: AbortSignal): Promise<StoredRecord[]> {
    return this.run(
      async () => {
        const { js } = await this.#current();
        const consumer = await js.consumers.get(stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
        const records: StoredRecord[] = [];
        try {
          const messages = await consumer.fetch({ max_messages: count, expires: Math.max(1_000, Math.min(this.timeoutMs, 5_000)) });
          for await (const message of messages) {
            records.push({ sequence: message.seq, subject: message.subject, data: message.data });
            if (records.length >= count) break;
          }
        } finally {
          // The ordered consumer would otherwise stay on the server for its
          // 5-minute inactivity threshold: one per read, thousands under load.
          void Promise.resolve()
            .then(() => consumer.delete())
            .catch(() => undefined);
        }
        return records;
      },
      "reading records",
      signal,
    );
  }

  // ------------------------------------------------------------- KV buckets

  /** A bucket handle on the live connection (the bucket must exist). */
  async #bucket(name: string): Promise<KV> {
    const handles = await this.#current();
    let bucket = handles.buckets.get(name);
    if (bucket === undefined) {
      bucket = await handles.kvm.open(name, { bindOnly: true, timeout: this.timeoutMs });
      // Replicated: read keys from the leader (see #leaderReads).
      if (this.#leaderReads && bucket instanceof Bucket) bucket.direct = false;
      handles.buckets.set(name, bucket);
    }
    return bucket;
  }

  kvGet(bucket: string, key: string, signal?: AbortSignal): Promise<KvEntry | undefined> {
    return this.run(
      async () => {
        const entry = await (await this.#bucket(bucket)).get(key);
        return entry === null || entry.operation !== "PUT" ? undefined : entry;
      },
      "reading a key",
      signal,
    );
  }

  /** Creates a key that must not exist; `exists` when it does. */
  kvCreate(bucket: string, key: string, value: Uint8Array, signal?: AbortSignal): Promise<number | "exists"> {
    return this.run(
      async () => {
        try {
          return await (await this.#bucket(bucket)).create(key, value);
        } catch (error) {
          if (isCode(error, JetStreamErrorCode.WrongLastSequence)) return "exists" as const;
          throw error;
        }
      },
      "writing a key",
      signal,
    );
  }

  /** Replaces a key at an expected revision; `conflict` when it moved. */
  kvUpdate(bucket: string, key: string, value: Uint8Array, revision: number, signal?: AbortSignal): Promise<number | "conflict"> {
    return this.run(
      async () => {
        try {
          return await (await this.#bucket(bucket)).update(key, value, revision);
        } catch (error) {
          if (isCode(error, JetStreamErrorCode.WrongLastSequence)) return "conflict" as const;
          throw error;
        }
      },
      "writing a key",
      signal,
    );
  }

  /** Deletes a key if it is still at `revision`; false when it moved. */
  kvDeleteAt(bucket: string, key: string, revision: number, signal?: AbortSignal): Promise<boolean> {
    return this.run(
      async () => {
        try {
          await (await this.#bucket(bucket)).delete(key, { previousSeq: revision });
          return true;
        } catch (error) {
          if (isCode(error, JetStreamErrorCode.WrongLastSequence)) return false;
          throw error;
        }
      },
      "writing a key",
      signal,
    );
  }

  /** The configuration a lane stream must have; compared field by field at startup. */
  static laneStreamConfig(input: {
    name: string;
    subjects: string;
    retentionMs: number;
    maxRecords: number;
    maxBytes: number;
    duplicateWindowMs: number;
    replicas: number;
    maxMessageBytes: number;
  }): Partial<StreamConfig> & { name: string } {
    return {
      name: input.name,
      subjects: [input.subjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_age: input.retentionMs * 1_000_000,
      max_msgs: input.maxRecords,
      max_bytes: input.maxBytes,
      max_msg_size: input.maxMessageBytes,
      max_msgs_per_subject: -1,
      duplicate_window: input.duplicateWindowMs * 1_000_000,
      num_replicas: input.replicas,
      allow_direct: true,
      deny_delete: true,
      deny_purge: true,
    };
  }
}

function isCode(error: unknown, code: number): boolean {
  const failure = classifyNatsError(error);
  return failure instanceof JetStreamRejectedError && failure.code === code;
}

/** Resolves or rejects with `promise`, or rejects with the signal's reason as soon as it aborts. */
function raceSignal<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** Capacity and storage refusals of the broker: a full stream or bucket, an account or server limit. */
const capacityCodes: ReadonlySet<number> = new Set([
  JetStreamErrorCode.StoreFailed,
  JetStreamErrorCode.StorageResourcesExceeded,
  JetStreamErrorCode.InsufficientResources,
  JetStreamErrorCode.MemoryResourcesExceeded,
  JetStreamErrorCode.AccountResourcesExceeded,
  JetStreamErrorCode.MessageTooBig,
]);

/** The LaneError for a failed broker operation; never carries the backend's text. */
export function laneErrorOf(error: unknown, action: string, signal?: AbortSignal): unknown {
  if (error instanceof LaneError) return error;
  if (signal?.aborted && (error === signal.reason || isAbort(error))) {
    const timedOut = isTimeoutReason(signal.reason);
    return new LaneError(timedOut ? "lane_timeout" : "lane_canceled", timedOut ? `the deadline passed while ${action}` : `the call was canceled while ${action}`);
  }
  const failure: NatsFailure = classifyNatsError(error);
  // nats.js names its own request timeout `TimeoutError` too: only an abort
  // the broker classifier does not recognise is a cancellation.
  if (isAbort(error) && failure.kind === "unknown") return new LaneError("lane_canceled", `the call was canceled while ${action}`);
  switch (failure.kind) {
    case "unavailable":
      return new LaneError("lane_unavailable", `the message broker is unavailable (${action}); retry with the same id`, { cause: failure });
    case "timeout":
      return new LaneError("lane_timeout", `the message broker did not answer in time (${action}); retry with the same id`, { cause: failure });
    case "jetstream":
      if (capacityCodes.has((failure as JetStreamRejectedError).code)) {
        return new LaneError("lane_unavailable", `the message broker refused the write for lack of capacity (${action}); nothing was accepted`, { cause: failure });
      }
      return failure;
    default:
      // Permissions, invalid requests and the unknown: a fault of this
      // deployment, reported as internal (and logged by class and code).
      return failure;
  }
}

function isAbort(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

/** A signal aborted because a deadline passed carries a `TimeoutError` (AbortSignal.timeout, or the server's adapter). */
function isTimeoutReason(reason: unknown): boolean {
  return reason instanceof Error && reason.name === "TimeoutError";
}
