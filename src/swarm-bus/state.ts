/**
 * State buckets: keyed values with per-key revisions.
 *
 * A scoped bucket is the swarm's state stream: key `<key>` of bucket
 * `<bucket>` is the subject `swarm.<swarm>.state.<bucket>.<key>`, the
 * stream keeps 64 revisions per key, and a revision is the stream sequence
 * of the message that wrote it (so revisions of migrated keys continue past
 * the legacy bucket's high-water mark). Reads use the stream message get
 * (`$JS.API.STREAM.MSG.GET.<stream>`), the read a member's grant allows;
 * writes are JetStream publishes, conditional on the key's last revision
 * when one is expected. A delete writes a revision whose `KV-Operation`
 * header is `DEL` (the same convention as JetStream KV, so migrated delete
 * markers keep their meaning).
 *
 * An unscoped bus reaches the legacy `KV_<bucket>` bucket with the same
 * calls (subject `$KV.<bucket>.<key>`).
 */
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { StoredMsg } from "@nats-io/jetstream";
import { STATE_REVISIONS_PER_KEY } from "./stream-names.js";
import { BUS_OWN_TEXTS, busFailure, BusRefusedError, jetStreamCode, StateRevisionConflictError } from "./errors.js";
import { BUS_HEADERS } from "./names.js";
import { lastMessage, nextMessage } from "./stream-reader.js";
import type { BusStreams } from "./streams.js";

const WRONG_LAST_SEQUENCE = 10071;
const KEY = /^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$/;

/** One revision of a key. */
export interface StateEntry {
  readonly bucket: string;
  readonly key: string;
  readonly value: Uint8Array;
  /** The revision (stream sequence). */
  readonly revision: number;
  readonly operation: "PUT" | "DEL" | "PURGE";
  readonly created: Date;
  /** The value as UTF-8 text. */
  string(): string;
}

export interface PutOptions {
  /**
   * Write only if the key's last revision is this one; 0: only if the key
   * has no revision. A non-negative integer; absent: write whatever the
   * key's last revision is.
   */
  readonly expectedRevision?: number;
}

/** One key and the value written to it. */
export interface KeyValue {
  /** The key: letters, digits, `-_=/` and inner dots, at most 1 024 characters (JetStream KV rules). */
  readonly key: string;
  /** The value: bytes, or text written as UTF-8. */
  readonly value: Uint8Array | string;
}

/** A write of one key. */
export interface PutParams extends KeyValue, PutOptions {}

/** A write of a key that has no value yet. */
export type CreateParams = KeyValue;

/** A write of a key at a known revision. */
export interface UpdateParams extends KeyValue {
  /** Write only if the key's last revision is this one (a non-negative integer; 0: only if the key has no revision). */
  readonly revision: number;
}

/** A delete of one key. */
export interface DeleteParams extends Pick<KeyValue, "key">, PutOptions {}

/** Whether `key` is a valid state key (JetStream KV rules: letters, digits, `-_=/`, inner dots). */
export function isStateKey(key: string): boolean {
  return KEY.test(key) && key.length <= 1024;
}

/** Whether `bucket` is a valid bucket name. */
export function isBucketName(bucket: string): boolean {
  return /^[-_a-zA-Z0-9]{1,64}$/.test(bucket);
}

export class StateBucket {
  readonly #streams: BusStreams;
  readonly #stream: string;
  readonly #prefix: string;

  /** @internal Opened by the bus (`forSwarm(<swarm>).state(<bucket>)`). */
  constructor(
    streams: BusStreams,
    readonly bucket: string,
    stream: string,
    /** Subject prefix of the bucket's keys (`swarm.<swarm>.state.<bucket>` or `$KV.<bucket>`). */
    prefix: string,
  ) {
    this.#streams = streams;
    this.#stream = stream;
    this.#prefix = prefix;
  }

  /** The stream holding the bucket. */
  get stream(): string {
    return this.#stream;
  }

  /** The key's latest value; undefined when it has none or its latest revision is a delete. */
  async get(key: string): Promise<StateEntry | undefined> {
    const entry = await this.entry(key);
    return entry === undefined || entry.operation !== "PUT" ? undefined : entry;
  }

  /** The key's latest revision, deletes included; undefined when it has none. */
  async entry(key: string): Promise<StateEntry | undefined> {
    const message = await lastMessage(this.#streams.jsm(), this.#stream, this.#subject(key));
    return message === null ? undefined : this.#entry(key, message);
  }

  /** Every retained revision of the key (at most 64), oldest first. */
  async history(key: string): Promise<StateEntry[]> {
    const subject = this.#subject(key);
    const out: StateEntry[] = [];
    let seq = 1;
    for (;;) {
      const message = await nextMessage(this.#streams.jsm(), this.#stream, subject, seq);
      if (message === null) return out;
      out.push(this.#entry(key, message));
      seq = message.seq + 1;
      if (out.length > STATE_REVISIONS_PER_KEY * 4) return out;
    }
  }

  /** Writes a value; returns its revision. Throws {@link StateRevisionConflictError} when an expected revision does not hold. */
  async put(params: PutParams): Promise<number> {
    const { key, value } = params;
    return this.#write(key, typeof value === "string" ? Buffer.from(value, "utf8") : value, undefined, params);
  }

  /** Writes a value only if the key has none. */
  create(params: CreateParams): Promise<number> {
    return this.put({ key: params.key, value: params.value, expectedRevision: 0 });
  }

  /** Writes a value only if the key is at `revision`. */
  update(params: UpdateParams): Promise<number> {
    return this.put({ key: params.key, value: params.value, expectedRevision: params.revision });
  }

  /** Deletes the key (a revision with `KV-Operation: DEL`); returns its revision. */
  delete(params: DeleteParams): Promise<number> {
    return this.#write(params.key, new Uint8Array(0), "DEL", params);
  }

  async #write(key: string, data: Uint8Array, operation: "DEL" | undefined, options: PutOptions): Promise<number> {
    const subject = this.#subject(key);
    const h = operation === undefined ? undefined : natsHeaders();
    if (h !== undefined) h.set(BUS_HEADERS.kvOperation, operation!);
    const expected = options.expectedRevision;
    if (expected !== undefined && (!Number.isSafeInteger(expected) || expected < 0)) throw new BusRefusedError("an expected revision is a non-negative integer");
    try {
      const ack = await this.#streams.js().publish(subject, data, {
        ...(h === undefined ? {} : { headers: h }),
        ...(expected === undefined ? {} : { expect: { lastSubjectSequence: expected, streamName: this.#stream } }),
      });
      return ack.seq;
    } catch (error) {
      if (expected !== undefined && jetStreamCode(error) === WRONG_LAST_SEQUENCE) throw new StateRevisionConflictError(key, expected, { cause: error });
      throw busFailure(error, "writing state");
    }
  }

  #subject(key: string): string {
    if (!isStateKey(key)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidKey(key));
    return `${this.#prefix}.${key}`;
  }

  #entry(key: string, message: StoredMsg): StateEntry {
    const op = message.header?.get(BUS_HEADERS.kvOperation);
    const value = message.data;
    return {
      bucket: this.bucket,
      key,
      value,
      revision: message.seq,
      operation: op === "DEL" || op === "PURGE" ? op : "PUT",
      created: message.time,
      string: () => Buffer.from(value).toString("utf8"),
    };
  }
}
