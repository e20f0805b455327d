import { AckPolicy, DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import type { JetStreamClient, JetStreamManager, StreamConfig, StreamInfo } from "@nats-io/jetstream";
import { Bucket, Kvm, type KV } from "@nats-io/kv";
import { createInbox, nanos, nuid, type Msg, type NatsConnection } from "@nats-io/transport-node";
import {
  BrokerConnection,
  BrokerUnavailableError,
  classifyNatsError,
  JetStreamErrorCode,
  JetStreamRejectedError,
  type NatsFailure,
} from "../nats/index.js";
import { BrokerRequests, type StoredMessage } from "./broker-requests.js";
import { LaneError } from "./errors.js";
import { ReadBudget } from "./read-budget.js";

/**
 * The lanes core's one door to JetStream: streams, direct reads,
 * flow-controlled reads in sequence order and the KV buckets, over one
 * broker connection (the lanes core has one store per connection), with
 * every broker operation bounded by the namespace's `operation_timeout` and
 * by the caller's cancellation.
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
  /** Appends, key writes and single-message reads (see broker-requests.ts). */
  readonly requests: BrokerRequests;
}

/** A key's stored value and its revision. */
export interface StoredKey {
  readonly revision: number;
  readonly value: Uint8Array;
  string(): string;
  json<T = unknown>(): T;
}

/** One stored record as read from a stream. */
export interface StoredRecord {
  readonly sequence: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** When the stream stored it (the broker's clock, epoch ms): it leaves retention max_age after. */
  readonly storedAt: number;
}

/** A stream's retained range: `first` is `last + 1` when nothing is retained. */
export interface StreamRange {
  readonly first: number;
  readonly last: number;
}

/**
 * Bytes all reads of one LaneStore (one broker connection) may have in
 * flight from the broker at once: a quarter of nats-server's default
 * `max_pending` (64 MB), the most it buffers for a client before it cuts
 * the connection off as a slow consumer.
 */
export const READ_BUDGET_BYTES = 16 * 1024 * 1024;

/** Bytes one pull asks the broker for at most (more only when a single record is larger). */
export const PULL_BYTES = 1024 * 1024;

/** What a pulled message carries besides the stored record (its subject, reply subject and headers), as the broker counts it. */
const PULL_OVERHEAD_BYTES = 4 * 1024;

/** The largest stored envelope any lanes configuration allows (a 1 MiB payload), when the store is not told its own. */
const LARGEST_RECORD_BYTES = Math.ceil(1_048_576 / 3) * 4 + 8_192;

export interface LaneStoreReads {
  /** The budget reads share; default one of READ_BUDGET_BYTES for this store alone. */
  readonly budget?: ReadBudget;
  /** The largest stored record of the namespace's streams (their `max_msg_size`), so that every pull can carry one. */
  readonly maxRecordBytes?: number;
  /**
   * Keep a read's consumer for a moment once the read is over, and let the
   * next read that starts where it stopped continue with it (the pages of
   * one reader, one after the other): one pull per page at most instead
   * of a consumer created, pulled and deleted, and the kept consumer reads
   * ahead for that next read (see readFrom). Off by default (every read
   * creates and deletes its own).
   */
  readonly reuseConsumers?: boolean;
  /** How long a kept consumer waits for the read that continues it (default IDLE_READER_MS). */
  readonly keepMs?: number;
}

/** How long a finished read's consumer waits for the read that continues it before it is deleted. */
export const IDLE_READER_MS = 2_000;

/** Finished reads' consumers kept at once, at most (the oldest is deleted first). */
export const MAX_IDLE_READERS = 512;

/**
 * Bytes of records that kept consumers have read ahead and no read has
 * taken yet, at most (a read ahead starts only below it).
 */
export const READ_AHEAD_BYTES = 8 * 1024 * 1024;

/** How many reads of the size just made one read ahead holds (within PULL_BYTES): one broker request for that many pages. */
export const READ_AHEAD_READS = 4;

/** A consumer a finished read left positioned at `next`. */
interface IdleReader {
  readonly stream: string;
  readonly name: string;
  /** The first sequence the next read gets from it (the first record read ahead, if any). */
  readonly next: number;
  readonly generation: number;
  readonly since: number;
  /** The records read ahead from `next` on; undefined when the pull failed (the consumer is then of no use). */
  readonly ahead?: Promise<Pulled | undefined>;
}

export class LaneStore {
  #handles: Handles | undefined;
  readonly #budget: ReadBudget;
  /** The least a pull asks for: one record of the largest size, with what the broker counts besides it. */
  readonly #minimumPull: number;

  /**
   * On a replicated namespace every read goes to the stream's leader: a
   * direct get may be answered by a follower that has not yet applied the
   * write this process just made (a record read back, a reservation
   * rechecked), which would look like a conflict.
   */
  readonly #leaderReads: boolean;

  /** Finished reads' consumers by `<stream> <next sequence>`, oldest first within a key (see LaneStoreReads.reuseConsumers). */
  readonly #idle = new Map<string, IdleReader[]>();
  #idleCount = 0;
  #sweeper: NodeJS.Timeout | undefined;
  readonly #reuse: boolean;
  readonly #keepMs: number;
  /** Bytes of records read ahead by kept consumers and not taken by a read (see READ_AHEAD_BYTES). */
  #aheadBytes = 0;

  /**
   * What this store last learnt of each stream's range (from a stream info,
   * or from the pending count of a record a read delivered). Both ends only
   * grow (lane streams deny deletes and purges; expiry moves `first` up), so
   * a known range is a lower bound of the present one.
   */
  readonly #ranges = new Map<string, StreamRange>();

  constructor(
    private readonly broker: BrokerConnection,
    private readonly timeoutMs: number,
    replicas = 1,
    reads: LaneStoreReads = {},
  ) {
    this.#leaderReads = replicas > 1;
    this.#reuse = reads.reuseConsumers === true;
    this.#keepMs = reads.keepMs ?? IDLE_READER_MS;
    this.#minimumPull = (reads.maxRecordBytes ?? LARGEST_RECORD_BYTES) + PULL_OVERHEAD_BYTES;
    this.#budget = reads.budget ?? new ReadBudget(Math.max(READ_BUDGET_BYTES, this.#minimumPull));
    if (this.#budget.capacity < this.#minimumPull) throw new RangeError("a read budget must hold at least one pull of the largest record");
  }

  /** One message of a stream, by sequence or last on a subject; null when none. */
  async #getMessage(stream: string, query: { seq: number } | { last_by_subj: string }): Promise<StoredMessage | null> {
    const { requests } = await this.#current();
    return this.#leaderReads ? requests.leaderGet(stream, query) : requests.directGet(stream, query);
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
    const requests = new BrokerRequests(nc, this.broker.inboxPrefix, this.timeoutMs);
    this.#handles = { generation, js, jsm, kvm: new Kvm(js), buckets: new Map(), requests };
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
      // The broker did not answer or refused while the connection is up: its
      // node may have lost its peers; the connection checks and moves if so.
      if (!signal?.aborted && translated instanceof LaneError && (translated.reason === "lane_timeout" || translated.reason === "lane_unavailable") && this.broker.state === "connected") {
        this.broker.suspectJetStream();
      }
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

  /**
   * Runs one request of the pipe (an append, a key write, a single read):
   * like `run`, but `signal` is checked before the request starts instead
   * of raced against it. The call that passed the signal is bounded by its
   * own deadline (lanes-core.ts answers at once when it passes); a request
   * already sent ends within the operation timeout, and no further request
   * of an aborted call starts. Racing every request added and removed a
   * listener on the call's signal, which a batch shares among up to 128
   * records (each addition walks the listeners already there).
   */
  #request<T>(operation: () => Promise<T>, action: string, signal: AbortSignal | undefined): Promise<T> {
    if (signal?.aborted) return Promise.reject(laneErrorOf(signal.reason, action, signal));
    return this.run(operation, action);
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
    const range = { first: info.state.first_seq, last: info.state.last_seq };
    this.#learn(name, range.first, range.last);
    return range;
  }

  /**
   * The stream's range as this store last learnt it, without a broker
   * request; undefined when it never read it. A lower bound of both ends:
   * records may have been published (and expired) since.
   */
  knownRange(name: string): StreamRange | undefined {
    return this.#ranges.get(name);
  }

  #learn(name: string, first: number, last: number): void {
    const known = this.#ranges.get(name);
    if (known === undefined) this.#ranges.set(name, { first, last });
    else if (first > known.first || last > known.last) this.#ranges.set(name, { first: Math.max(first, known.first), last: Math.max(last, known.last) });
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
    return this.#request(
      async () => {
        const { requests } = await this.#current();
        try {
          const ack = await requests.publish(subject, data, { msgID: options.msgID, expectLastSubjectSequence: options.expectLastSubjectSequence });
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
    return this.#request(
      async () => {
        const message = await this.#getMessage(stream, { seq: sequence });
        return message === null || message.seq !== sequence ? undefined : { sequence: message.seq, subject: message.subject, data: message.data, storedAt: message.time };
      },
      "reading a record",
      signal,
    );
  }

  /** The last message on a subject; undefined when there is none. */
  lastOnSubject(stream: string, subject: string, signal?: AbortSignal): Promise<StoredRecord | undefined> {
    return this.#request(
      async () => {
        const message = await this.#getMessage(stream, { last_by_subj: subject });
        return message === null ? undefined : { sequence: message.seq, subject: message.subject, data: message.data, storedAt: message.time };
      },
      "reading a record",
      signal,
    );
  }

  /**
   * Up to `count` retained messages from `from` on, in sequence order (a
   * gap in the sequences shows as a jump), and about `maxBytes` of them at
   * most: the read stops once it holds `maxBytes`, but it always carries at
   * least one record when one is retained. Fewer arrive when the stream has
   * no more in time (a short read).
   *
   * Flow control: one consumer of the stream from `from`, read by pulls
   * that each ask for at most PULL_BYTES (or one record of the largest
   * size) and as many records as are still wanted; the broker stops a pull
   * at the byte bound. Before each pull the read takes its bytes from the
   * store's budget and gives them back once the pull is over, so that no
   * number of readers can make the broker owe this connection more than
   * the budget. One read has one pull in flight at a time.
   *
   * With kept consumers (LaneStoreReads.reuseConsumers), a consumer kept
   * for the next read also reads ahead: one pull of READ_AHEAD_READS times
   * as many records as this read asked for (as far as the stream is known
   * to reach, within PULL_BYTES), started at once when the stream is known
   * to hold more and the budget has half of itself free, so that the next read
   * finds its records here instead of waiting for the broker. What was read
   * ahead and not yet taken stays below READ_AHEAD_BYTES (a read ahead
   * starts only under it) and is dropped with its consumer. A read that
   * takes fewer records than were read ahead leaves the rest to the read
   * after it.
   */
  readFrom(stream: string, from: number, count: number, signal?: AbortSignal, maxBytes = Number.POSITIVE_INFINITY): Promise<StoredRecord[]> {
    return this.run(
      async () => {
        const handles = await this.#current();
        const nc = this.broker.connection();
        const idle = this.#takeIdle(stream, from, handles.generation);
        let reader = idle?.name;
        // The first pull's answer when the kept consumer read ahead.
        let early: Pulled | undefined;
        if (idle?.ahead !== undefined) {
          early = await this.#takeAhead(idle, signal);
          // A read ahead that failed, or that brought nothing but did not find
          // the stream's end (its pull expired, or the consumer went away),
          // leaves a consumer of unknown position: this read starts afresh.
          if (early !== undefined && early.records.length === 0 && !early.noMessages) early = undefined;
          if (early === undefined) {
            void this.#deleteReader(handles.jsm, stream, idle.name);
            reader = undefined;
          }
        }
        let reused = reader !== undefined;
        if (reader === undefined) reader = await this.#createReader(handles.jsm, stream, from);
        const records: StoredRecord[] = [];
        let end: Pulled["end"] | "error" = "error";
        // Records a pull delivered beyond what this read takes: of a read ahead, or of a pull
        // that could carry more than the bytes left (it asks for one record of the largest size at least).
        let rest: PulledRecord[] = [];
        try {
          let bytes = 0;
          while (records.length < count && bytes < maxBytes) {
            let pulled: Pulled;
            if (early !== undefined) {
              pulled = early;
              early = undefined;
            } else {
              const ask = Math.max(this.#minimumPull, Math.min(PULL_BYTES, maxBytes - bytes));
              const grant = await this.#budget.acquire(ask, signal);
              try {
                pulled = await this.#pull(nc, stream, reader, count - records.length, grant.bytes, signal);
              } finally {
                grant.release();
              }
            }
            if (reused && pulled.end === "gone" && pulled.records.length === 0 && !pulled.noMessages) {
              // The kept consumer went away at the broker (a restart, its inactivity threshold): start a fresh one.
              void this.#deleteReader(handles.jsm, stream, reader);
              reader = await this.#createReader(handles.jsm, stream, from);
              reused = false;
              continue;
            }
            reused = false;
            let taken = 0;
            for (const record of pulled.records) {
              if (records.length >= count || (records.length > 0 && bytes >= maxBytes)) break;
              records.push(record);
              bytes += record.size;
              taken += 1;
            }
            end = pulled.end;
            if (taken < pulled.records.length) {
              rest = pulled.records.slice(taken);
              break;
            }
            // The broker had no more, or the consumer is of no more use: what came is what there is.
            if (pulled.end === "short" || pulled.end === "gone") break;
          }
        } finally {
          // A consumer whose last pull delivered its whole batch stands exactly
          // after the last record it delivered: the next read from there (or
          // from the first record this read left) may continue with it. Any
          // other is deleted at once (otherwise it would stay on the server
          // for its inactivity threshold).
          if (this.#reuse && end === "batch") {
            const next = rest.length > 0 ? rest[0]!.sequence : records.length > 0 ? records[records.length - 1]!.sequence + 1 : from;
            const kept = { stream, name: reader, next, generation: handles.generation, since: Date.now() };
            if (rest.length > 0) this.#keepIdle({ ...kept, ahead: Promise.resolve(this.#held({ records: rest, bytes: sumSizes(rest), end: "batch" })) });
            else this.#keepIdle({ ...kept, ahead: this.#readAhead(nc, stream, reader, next, count, maxBytes) });
          } else void this.#deleteReader(handles.jsm, stream, reader);
        }
        return records;
      },
      "reading records",
      signal,
    );
  }

  /**
   * The pull that reads ahead for a kept consumer standing at `next`, or
   * undefined when the stream is not known to hold `next`, the budget has
   * less than half of itself free, or READ_AHEAD_BYTES are already held.
   */
  #readAhead(nc: NatsConnection, stream: string, reader: string, next: number, count: number, maxBytes: number): Promise<Pulled | undefined> | undefined {
    const last = this.#ranges.get(stream)?.last ?? 0;
    if (last < next || this.#aheadBytes >= READ_AHEAD_BYTES) return undefined;
    const ask = Math.max(this.#minimumPull, Math.min(PULL_BYTES, maxBytes));
    if (this.#budget.waiting > 0 || this.#budget.available - ask < this.#budget.capacity / 2) return undefined;
    // Free at once (checked above), so the grant is taken now.
    const granted = this.#budget.acquire(ask);
    return granted.then((grant) =>
      this.#pull(nc, stream, reader, Math.min(count * READ_AHEAD_READS, last - next + 1), grant.bytes, undefined).then(
        (pulled) => {
          grant.release();
          return this.#held(pulled);
        },
        () => {
          grant.release();
          return undefined;
        },
      ),
    );
  }

  /** Counts `pulled`'s records as read ahead and not taken. */
  #held(pulled: Pulled): Pulled {
    this.#aheadBytes += pulled.bytes;
    return pulled;
  }

  /** What a kept consumer read ahead, for the read that took it (undefined: the pull failed); a read canceled meanwhile drops the consumer. */
  async #takeAhead(idle: IdleReader, signal: AbortSignal | undefined): Promise<Pulled | undefined> {
    try {
      const pulled = await raceSignal(idle.ahead!, signal);
      if (pulled !== undefined) this.#aheadBytes -= pulled.bytes;
      return pulled;
    } catch (error) {
      this.#dropReader(idle);
      throw error;
    }
  }

  /** Bytes of records read ahead by kept consumers and not yet taken by a read. */
  get readAheadBytes(): number {
    return this.#aheadBytes;
  }

  /** A cursor on the broker: ack none, in memory, one replica, named, with the settings nats.js gives its ordered consumers. */
  async #createReader(jsm: JetStreamManager, stream: string, from: number): Promise<string> {
    const consumer = await jsm.consumers.add(stream, {
      name: `lw_${nuid.next()}`,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: from,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: nanos(60_000),
      max_deliver: 1,
    });
    return consumer.name;
  }

  #deleteReader(jsm: JetStreamManager, stream: string, name: string): Promise<void> {
    return Promise.resolve()
      .then(() => jsm.consumers.delete(stream, name))
      .then(
        () => undefined,
        () => undefined,
      );
  }

  #takeIdle(stream: string, from: number, generation: number): IdleReader | undefined {
    if (!this.#reuse) return undefined;
    const key = `${stream} ${from}`;
    const list = this.#idle.get(key);
    if (list === undefined) return undefined;
    const reader = list.pop()!;
    if (list.length === 0) this.#idle.delete(key);
    this.#idleCount -= 1;
    // A consumer of an earlier connection may be gone; its delete is harmless.
    if (reader.generation !== generation) {
      this.#dropReader(reader);
      return undefined;
    }
    return reader;
  }

  #keepIdle(reader: IdleReader): void {
    const key = `${reader.stream} ${reader.next}`;
    const list = this.#idle.get(key) ?? [];
    list.push(reader);
    this.#idle.set(key, list);
    this.#idleCount += 1;
    while (this.#idleCount > MAX_IDLE_READERS) this.#evictOldest();
    if (this.#sweeper === undefined) {
      this.#sweeper = setInterval(() => this.#sweep(), this.#keepMs / 2);
      this.#sweeper.unref();
    }
  }

  /** Deletes a kept consumer, once what it reads ahead has arrived (and is no longer counted as held). */
  #dropReader(reader: IdleReader): void {
    const remove = () => {
      const handles = this.#handles;
      if (handles !== undefined && handles.generation === reader.generation) void this.#deleteReader(handles.jsm, reader.stream, reader.name);
    };
    if (reader.ahead === undefined) return remove();
    void reader.ahead.then((pulled) => {
      if (pulled !== undefined) this.#aheadBytes -= pulled.bytes;
      remove();
    });
  }

  #evictOldest(): void {
    let oldest: { key: string; at: number } | undefined;
    for (const [key, list] of this.#idle) {
      const at = list[0]!.since;
      if (oldest === undefined || at < oldest.at) oldest = { key, at };
    }
    if (oldest === undefined) return;
    const list = this.#idle.get(oldest.key)!;
    this.#dropReader(list.shift()!);
    this.#idleCount -= 1;
    if (list.length === 0) this.#idle.delete(oldest.key);
  }

  #sweep(): void {
    const cutoff = Date.now() - this.#keepMs;
    for (const [key, list] of this.#idle) {
      while (list.length > 0 && list[0]!.since <= cutoff) {
        this.#dropReader(list.shift()!);
        this.#idleCount -= 1;
      }
      if (list.length === 0) this.#idle.delete(key);
    }
    if (this.#idleCount === 0 && this.#sweeper !== undefined) {
      clearInterval(this.#sweeper);
      this.#sweeper = undefined;
    }
  }

  /** Deletes every kept consumer (the store's owner is closing). */
  close(): void {
    for (const list of this.#idle.values()) for (const reader of list) this.#dropReader(reader);
    this.#idle.clear();
    this.#idleCount = 0;
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }

  /**
   * One pull of up to `batch` records and `maxBytes` bytes (as the broker
   * counts them: subject, reply subject, headers and data) from a consumer.
   * The broker ends it by delivering the batch, by delivering exactly
   * `maxBytes` (silently), with `409 Message Size Exceeds MaxBytes` when
   * the next record does not fit, or with `408` when it expires first.
   */
  #pull(nc: NatsConnection, stream: string, consumer: string, batch: number, maxBytes: number, signal: AbortSignal | undefined): Promise<Pulled> {
    const expiresMs = Math.max(1_000, Math.min(this.timeoutMs, 5_000));
    return new Promise<Pulled>((resolve, reject) => {
      const records: PulledRecord[] = [];
      let bytes = 0;
      let settled = false;
      let noMessages = false;
      const settle = (outcome: { end: Pulled["end"] } | { error: unknown }) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        subscription.unsubscribe();
        if ("error" in outcome) reject(outcome.error);
        else resolve({ records, bytes, end: outcome.end, noMessages });
      };
      const onAbort = () => settle({ error: signal!.reason });
      const subscription = nc.subscribe(createInbox(this.broker.inboxPrefix), {
        callback: (error, message) => {
          if (error) return settle({ error });
          const delivery = deliveryOf(message);
          if (delivery !== undefined) {
            const { sequence, pending } = delivery;
            if (pending !== undefined) this.#learn(stream, 0, sequence + pending);
            const size = sizeOf(message);
            records.push(new PulledRecord(sequence, message, delivery.storedAt, size));
            bytes += size;
            if (records.length >= batch) settle({ end: "batch" });
            else if (bytes >= maxBytes) settle({ end: "bytes" });
            return;
          }
          // No heartbeats are asked for: every status ends the pull.
          const status = message.headers?.code ?? 0;
          if (status === 409 && /exceeds maxbytes/i.test(message.headers?.description ?? "")) {
            if (records.length === 0) return settle({ error: new Error("a record of a lane stream is larger than the stream's max_msg_size") });
            return settle({ end: "bytes" });
          }
          if (status === 503) return settle({ error: new BrokerUnavailableError("no_responders") });
          // 408 (expired): what came is what there is.
          if (status === 408) return settle({ end: "short" });
          // 404, or the consumer went away (409): what came is what there is, and the consumer is of no more use.
          noMessages = status === 404;
          settle({ end: "gone" });
        },
      });
      // The broker answers 408 at `expires`; this only ends a pull it never ends (a connection lost meanwhile).
      const timer = setTimeout(() => settle({ end: "short" }), expiresMs + 2_000);
      signal?.addEventListener("abort", onAbort, { once: true });
      // Closed before the pull settled: the connection went away (its own unsubscribe, after settling, is not news).
      void subscription.closed.then(() => {
        if (!settled) settle({ error: new BrokerUnavailableError("connection_closed") });
      });
      try {
        // The readers of pages ask only for records the stream's range holds:
        // they do not wait for more (records that expired meanwhile make a
        // short read at once, not at the pull's expiry).
        const request = this.#reuse ? { batch, max_bytes: maxBytes, no_wait: true } : { batch, max_bytes: maxBytes, expires: nanos(expiresMs) };
        nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`, JSON.stringify(request), {
          reply: subscription.getSubject(),
        });
      } catch (error) {
        settle({ error });
      }
    });
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

  /**
   * The key's stored message (a value, or a delete or purge marker); null
   * when the key never had one. Read directly (the namespace's buckets
   * allow it when they have one replica, which startup checks), or through
   * the bucket's leader when replicated.
   */
  #keyMessage(bucket: string, key: string): Promise<StoredMessage | null> {
    return this.#getMessage(`KV_${bucket}`, { last_by_subj: keySubject(bucket, key) });
  }

  kvGet(bucket: string, key: string, signal?: AbortSignal): Promise<StoredKey | undefined> {
    return this.#request(
      async () => {
        const message = await this.#keyMessage(bucket, key);
        return message === null || message.operation !== undefined ? undefined : storedKey(message);
      },
      "reading a key",
      signal,
    );
  }

  /**
   * Creates a key that must not exist (or whose last message is a delete or
   * purge marker, which it replaces at that marker's revision, as nats.js's
   * `create` does); `exists` when it holds a value.
   */
  kvCreate(bucket: string, key: string, value: Uint8Array, signal?: AbortSignal): Promise<number | "exists"> {
    return this.#request(
      async () => {
        const { requests } = await this.#current();
        const subject = keySubject(bucket, key);
        try {
          return (await requests.publish(subject, value, { expectLastSubjectSequence: 0 })).seq;
        } catch (error) {
          if (!isCode(error, JetStreamErrorCode.WrongLastSequence)) throw error;
        }
        const last = await this.#keyMessage(bucket, key);
        if (last === null || last.operation === undefined) return "exists" as const;
        try {
          return (await requests.publish(subject, value, { expectLastSubjectSequence: last.seq })).seq;
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
    return this.#request(
      async () => {
        if (!(revision > 0)) throw new RangeError("a key's revision is at least 1");
        const { requests } = await this.#current();
        try {
          return (await requests.publish(keySubject(bucket, key), value, { expectLastSubjectSequence: revision })).seq;
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

  /**
   * Follows one key of a bucket: `onValue` gets the value it holds now and
   * every later one, with its revision, through an ordered consumer (only
   * stored values, never a refused write), until the returned `stop` is
   * called or the connection ends (then `onEnd`).
   */
  async watchKey(
    bucket: string,
    key: string,
    onValue: (value: Uint8Array, revision: number) => void,
    onEnd: () => void,
    signal?: AbortSignal,
  ): Promise<() => void> {
    const { consumer, messages } = await this.run(
      async () => {
        const { js } = await this.#current();
        // One subject as a string: nats.js refuses a list of them before server 2.10.
        const consumer = await js.consumers.get(`KV_${bucket}`, { filter_subjects: `$KV.${bucket}.${key}`, deliver_policy: DeliverPolicy.LastPerSubject });
        return { consumer, messages: await consumer.consume({ max_messages: 16 }) };
      },
      "watching a key",
      signal,
    );
    void (async () => {
      try {
        for await (const message of messages) {
          const operation = message.headers?.get("KV-Operation");
          if (operation === "DEL" || operation === "PURGE") continue;
          onValue(message.data, message.seq);
        }
      } catch {
        // The connection went away: the watcher ends, and its owner reads the key again.
      } finally {
        onEnd();
      }
    })();
    return () => {
      // Closed and deleted at once: an ordered consumer would otherwise stay on the server until its inactivity threshold.
      void Promise.resolve()
        .then(() => messages.close())
        .then(() => consumer.delete())
        .catch(() => undefined);
    };
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

/** How one pull ended: the batch arrived, the byte bound ended it, or the broker had no more in time. */
interface Pulled {
  readonly records: PulledRecord[];
  readonly bytes: number;
  readonly end: "batch" | "bytes" | "short" | "gone";
  /** The broker ended the pull with `404 No Messages` (a pull that does not wait found fewer records than it asked for). */
  readonly noMessages?: boolean;
}

/**
 * A message's size as the broker counts it against a pull's `max_bytes`:
 * subject, reply subject, headers and data (nats.js's messages know it;
 * without it the headers are left out, and a pull the broker ended
 * silently on its exact byte bound ends at its local timer instead).
 */
function sizeOf(message: Msg): number {
  const sized = message as Msg & { size?: () => number };
  return typeof sized.size === "function" ? sized.size() : message.subject.length + (message.reply?.length ?? 0) + message.data.byteLength;
}

/** What the reply subject of a record delivered by a consumer says of it. */
interface Delivery {
  readonly sequence: number;
  /** Records after it on its consumer when it was sent: the stream's last sequence is at least `sequence + pending`. */
  readonly pending: number | undefined;
  /** When the stream stored it (epoch ms). */
  readonly storedAt: number;
}

/**
 * The stream sequence, pending count and store time of a record delivered
 * by a consumer, from its reply subject:
 * `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<nanos>.<pending>`
 * (9 tokens), or with a domain and account hash after `ACK` (11 or more);
 * undefined for a status message.
 */
function deliveryOf(message: Msg): Delivery | undefined {
  const reply = message.reply;
  if (reply === undefined || !reply.startsWith("$JS.ACK.")) return undefined;
  // Where each token ends (read once, without splitting the subject into strings).
  let tokens = 0;
  for (let i = 0; i < reply.length && tokens < TOKEN_ENDS.length; i++) if (reply.charCodeAt(i) === 0x2e) TOKEN_ENDS[tokens++] = i;
  if (tokens < TOKEN_ENDS.length) TOKEN_ENDS[tokens++] = reply.length;
  if (tokens < 9) return undefined;
  const short = tokens === 9;
  const sequence = tokenDigits(reply, short ? 5 : 7, 0);
  if (!(sequence > 0)) return undefined;
  const pending = tokenDigits(reply, short ? 8 : 10, 0);
  // Nanoseconds to milliseconds, rounded down: the token's last six digits go.
  const storedAt = tokenDigits(reply, short ? 7 : 9, 6);
  return { sequence, pending: Number.isNaN(pending) ? undefined : pending, storedAt: Number.isNaN(storedAt) ? 0 : storedAt };
}

/** The ends of a reply subject's first tokens (the longest form has 12). */
const TOKEN_ENDS = new Int32Array(16);

/** The safe integer written in decimal in token `index` of `reply` without its last `drop` digits (0 when only those are there); NaN when it is not one. */
function tokenDigits(reply: string, index: number, drop: number): number {
  const from = index === 0 ? 0 : TOKEN_ENDS[index - 1]! + 1;
  const to = TOKEN_ENDS[index]! - drop;
  if (to - from > 16) return Number.NaN;
  let value = 0;
  for (let i = from; i < to; i++) {
    const digit = reply.charCodeAt(i) - 0x30;
    if (digit < 0 || digit > 9) return Number.NaN;
    value = value * 10 + digit;
  }
  if (to <= from && drop === 0) return Number.NaN;
  return Number.isSafeInteger(value) ? value : Number.NaN;
}

/** The broker's count of `records`' bytes. */
function sumSizes(records: readonly PulledRecord[]): number {
  let bytes = 0;
  for (const record of records) bytes += record.size;
  return bytes;
}

/** A record as a pull delivered it: its subject is decoded only when asked for (the readers of pages never do). */
class PulledRecord implements StoredRecord {
  readonly data: Uint8Array;
  readonly #message: Msg;

  constructor(
    readonly sequence: number,
    message: Msg,
    readonly storedAt: number,
    /** Its size as the broker counted it against the pull's bytes. */
    readonly size: number,
  ) {
    this.data = message.data;
    this.#message = message;
  }

  get subject(): string {
    return this.#message.subject;
  }
}

/** A key's subject in its bucket; the key must be a valid KV key (nats.js's rule), never a wildcard. */
function keySubject(bucket: string, key: string): string {
  if (key.startsWith(".") || key.endsWith(".") || !/^[-/=.\w]+$/.test(key)) throw new Error("invalid key");
  return `$KV.${bucket}.${key}`;
}

function storedKey(message: StoredMessage): StoredKey {
  const { seq: revision, data: value } = message;
  return {
    revision,
    value,
    string: () => Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("utf8"),
    json: <T>() => JSON.parse(Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("utf8")) as T,
  };
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
      // Any other refusal a caller does not handle itself (no leader yet, a
      // stream or consumer an election has not placed, a peer that is not
      // current at a heal): the broker cannot serve the call now. Whether a
      // write it refused may still land is not known, so the cause is not
      // the refusal itself (which would mark a definite "no").
      return new LaneError("lane_unavailable", `the message broker cannot serve the call now (${action}); retry with the same id`, {
        cause: new BrokerUnavailableError("cluster_unavailable", { cause: failure, apiCode: (failure as JetStreamRejectedError).code }),
      });
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
