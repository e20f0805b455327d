import { isUtf8 } from "node:buffer";
import { createHash } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import { RecordEnvelopeSchema, StoredRecordKind } from "../../gen/laneway/lane/storage/v1/record_envelope_pb.js";
import { canonicalJson } from "../encoding/canonical-json.js";
import type { LaneRecord, Publication, RecordKind } from "./types.js";

/**
 * The durable envelope of one record, as stored in the lane's stream: the
 * publication (kind, schema, payload, provenance), what the service adds
 * (the authenticated project, the lane, `created_at`), and the reservation
 * generation it was published under.
 *
 * Every reader of stored records — Replay, Follow, the records work-group
 * claims read, the read-back of Publish — decodes them here and nowhere
 * else. The bytes are the Protobuf message `RecordEnvelope`
 * (proto/laneway/lane/storage/v1/record_envelope.proto), written by the
 * generated encoder with its fields in number order, so that a resumed
 * publication produces exactly the same bytes and the read-back check can
 * compare them. The decoder below reads that one layout directly (records
 * are read by the hundred, and a general reflective decoder costs several
 * times more per record); it refuses anything else — another wire type,
 * an unknown field, another format, the JSON envelopes of format 1 — as
 * not a Laneway envelope.
 */
export const ENVELOPE_FORMAT = 2;

export interface Envelope {
  readonly lane: string;
  readonly project: string;
  readonly id: string;
  readonly kind: RecordKind;
  readonly schema: string;
  readonly payload: Uint8Array;
  readonly provenance: string;
  /** Epoch milliseconds. */
  readonly createdAt: number;
  /** The random reservation generation (32 hex) the record was published under. */
  readonly generation: string;
}

export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return toBinary(
    RecordEnvelopeSchema,
    create(RecordEnvelopeSchema, {
      lane: envelope.lane,
      project: envelope.project,
      id: envelope.id,
      kind: envelope.kind === "event" ? StoredRecordKind.EVENT : StoredRecordKind.WORK,
      schema: envelope.schema,
      payload: envelope.payload,
      provenance: envelope.provenance,
      createdAtMs: BigInt(envelope.createdAt),
      generation: envelope.generation,
      format: ENVELOPE_FORMAT,
    }),
  );
}

/** Field numbers of RecordEnvelope, with their wire types (0 varint, 2 length-delimited). */
const LANE = 2;
const PROJECT = 3;
const ID = 4;
const KIND = 5;
const SCHEMA = 6;
const PAYLOAD = 7;
const PROVENANCE = 8;
const CREATED_AT_MS = 9;
const GENERATION = 15;
const FORMAT = 16;

/**
 * Where the fields of one stored envelope lie in its bytes: each string
 * and the payload as [start, end) offsets (0, 0 when left out), the two
 * integers as values, and `fieldsEnd`, where field 8 (provenance) ends.
 */
interface Layout {
  readonly lane0: number;
  readonly lane1: number;
  readonly project0: number;
  readonly project1: number;
  readonly id0: number;
  readonly id1: number;
  readonly schema0: number;
  readonly schema1: number;
  readonly payload0: number;
  readonly payload1: number;
  readonly provenance0: number;
  readonly provenance1: number;
  readonly generation0: number;
  readonly generation1: number;
  readonly kind: StoredRecordKind.EVENT | StoredRecordKind.WORK;
  readonly createdAt: number;
  readonly fieldsEnd: number;
}

/** The read position of `scan` (module state: a scan runs to its end synchronously). */
let at = 0;

/** A varint of at most 53 bits (the only integers of an envelope) at `at`; NaN when longer or cut short. */
function varint(bytes: Uint8Array, end: number): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    if (at >= end) return Number.NaN;
    const byte = bytes[at++]!;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return value <= Number.MAX_SAFE_INTEGER ? value : Number.NaN;
    scale *= 128;
  }
  return Number.NaN;
}

/**
 * Finds the fields of an envelope this format wrote; undefined for any
 * other bytes: another wire type, an unknown field, a field out of number
 * order or twice, another format, a required field left out, a string
 * that is not UTF-8 (the encoder writes JavaScript strings, always valid).
 */
function scan(bytes: Buffer): Layout | undefined {
  const end = bytes.length;
  at = 0;
  let lane0 = 0, lane1 = 0, project0 = 0, project1 = 0, id0 = 0, id1 = 0, schema0 = 0, schema1 = 0;
  let payload0 = 0, payload1 = 0, provenance0 = 0, provenance1 = 0, generation0 = 0, generation1 = 0;
  let kind = 0;
  let createdAt = Number.NaN;
  let format = 0;
  let fieldsEnd = -1;
  let lastField = 0;
  while (at < end) {
    const tagAt = at;
    const tag = varint(bytes, end);
    if (!Number.isFinite(tag)) return undefined;
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    // The generated encoder writes each field once, in number order.
    if (field <= lastField) return undefined;
    lastField = field;
    if (field > PROVENANCE && fieldsEnd < 0) fieldsEnd = tagAt;
    if (field === KIND || field === CREATED_AT_MS || field === FORMAT) {
      if (wire !== 0) return undefined;
      const value = varint(bytes, end);
      if (!Number.isFinite(value)) return undefined;
      if (field === KIND) kind = value;
      else if (field === CREATED_AT_MS) createdAt = value;
      else format = value;
      continue;
    }
    if (wire !== 2) return undefined;
    const length = varint(bytes, end);
    if (!Number.isFinite(length) || length > end - at) return undefined;
    const from = at;
    at += length;
    switch (field) {
      case LANE:
        lane0 = from;
        lane1 = at;
        break;
      case PROJECT:
        project0 = from;
        project1 = at;
        break;
      case ID:
        id0 = from;
        id1 = at;
        break;
      case SCHEMA:
        schema0 = from;
        schema1 = at;
        break;
      case PAYLOAD:
        payload0 = from;
        payload1 = at;
        break;
      case PROVENANCE:
        provenance0 = from;
        provenance1 = at;
        break;
      case GENERATION:
        generation0 = from;
        generation1 = at;
        break;
      default:
        return undefined;
    }
  }
  // Proto3 leaves empty strings and zeros out; those that may not be empty must be present.
  if (format !== ENVELOPE_FORMAT || lane1 === 0 || project1 === 0 || id1 === 0 || schema1 === 0 || generation1 === 0 || Number.isNaN(createdAt)) return undefined;
  if (kind !== StoredRecordKind.EVENT && kind !== StoredRecordKind.WORK) return undefined;
  if (fieldsEnd < 0) fieldsEnd = end;
  if (!utf8(bytes, lane0, lane1) || !utf8(bytes, project0, project1) || !utf8(bytes, id0, id1) || !utf8(bytes, schema0, schema1) || !utf8(bytes, provenance0, provenance1) || !utf8(bytes, generation0, generation1)) {
    return undefined;
  }
  return { lane0, lane1, project0, project1, id0, id1, schema0, schema1, payload0, payload1, provenance0, provenance1, generation0, generation1, kind, createdAt, fieldsEnd };
}

/** Whether bytes [from, to) are UTF-8 (ASCII, the identifiers' alphabet, without a native call). */
function utf8(bytes: Buffer, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i]! >= 0x80) return isUtf8(bytes.subarray(from, to));
  return true;
}

function bufferOf(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Parses a stored envelope; undefined when the bytes are not one this format wrote. */
export function decodeEnvelope(bytes: Uint8Array): Envelope | undefined {
  const buffer = bufferOf(bytes);
  const l = scan(buffer);
  if (l === undefined) return undefined;
  return {
    lane: buffer.toString("utf8", l.lane0, l.lane1),
    project: buffer.toString("utf8", l.project0, l.project1),
    id: buffer.toString("utf8", l.id0, l.id1),
    kind: l.kind === StoredRecordKind.EVENT ? "event" : "work",
    schema: buffer.toString("utf8", l.schema0, l.schema1),
    // A copy: the record outlives the broker's read buffer.
    payload: new Uint8Array(buffer.subarray(l.payload0, l.payload1)),
    provenance: buffer.toString("utf8", l.provenance0, l.provenance1),
    createdAt: l.createdAt,
    generation: buffer.toString("utf8", l.generation0, l.generation1),
  };
}

/**
 * A record read from its stored envelope, decoding its strings and payload
 * only when they are asked for; undefined when the bytes are not an
 * envelope this format wrote (the same rule as decodeEnvelope). A reader
 * that only forwards records (Replay, Follow) can take `encodedFields`,
 * the envelope's fields 2–8 (lane, project, id, kind, schema, payload,
 * provenance): they are exactly LaneRecord's fields 2–8 of the contract,
 * same numbers, types and values, as its canonical encoding writes them.
 * It holds the bytes it was read from (no copy): keep it no longer than a
 * page.
 */
export function storedRecord(bytes: Uint8Array, sequence: number): StoredLaneRecord | undefined {
  const buffer = bufferOf(bytes);
  const layout = scan(buffer);
  return layout === undefined ? undefined : new StoredLaneRecord(buffer, layout, sequence);
}

export class StoredLaneRecord implements LaneRecord {
  readonly kind: RecordKind;
  readonly createdAt: number;
  readonly #bytes: Buffer;
  readonly #layout: Layout;
  #payload: Uint8Array | undefined;

  constructor(
    bytes: Buffer,
    layout: Layout,
    readonly sequence: number,
  ) {
    this.#bytes = bytes;
    this.#layout = layout;
    this.kind = layout.kind === StoredRecordKind.EVENT ? "event" : "work";
    this.createdAt = layout.createdAt;
  }

  get lane(): string {
    return this.#bytes.toString("utf8", this.#layout.lane0, this.#layout.lane1);
  }

  get project(): string {
    return this.#bytes.toString("utf8", this.#layout.project0, this.#layout.project1);
  }

  get id(): string {
    return this.#bytes.toString("utf8", this.#layout.id0, this.#layout.id1);
  }

  get schema(): string {
    return this.#bytes.toString("utf8", this.#layout.schema0, this.#layout.schema1);
  }

  get provenance(): string {
    return this.#bytes.toString("utf8", this.#layout.provenance0, this.#layout.provenance1);
  }

  get payload(): Uint8Array {
    // A copy, once: what a caller keeps does not hold the broker's read buffer.
    this.#payload ??= new Uint8Array(this.#bytes.subarray(this.#layout.payload0, this.#layout.payload1));
    return this.#payload;
  }

  /** The length of `encodedFields`. */
  get encodedLength(): number {
    return this.#layout.fieldsEnd;
  }

  /** LaneRecord's fields 2–8 as the contract's canonical binary encoding writes them (the stored bytes themselves). */
  get encodedFields(): Uint8Array {
    return this.#bytes.subarray(0, this.#layout.fieldsEnd);
  }

  /** The record as a plain object (what a caller that keeps it, or compares it, wants). */
  toJSON(): LaneRecord {
    return recordOf(this, this.sequence);
  }
}

/** The hash a reservation holds: what makes two publications of one key the same. */
export function contentHash(publication: Pick<Publication, "kind" | "schema" | "payload" | "provenance">): string {
  return createHash("sha256")
    .update(
      canonicalJson({
        kind: publication.kind,
        schema: publication.schema,
        payload: Buffer.from(publication.payload).toString("base64"),
        provenance: publication.provenance,
      }),
    )
    .digest("hex");
}

export function recordOf(envelope: Omit<Envelope, "generation">, sequence: number): LaneRecord {
  return {
    sequence,
    lane: envelope.lane,
    project: envelope.project,
    id: envelope.id,
    kind: envelope.kind,
    schema: envelope.schema,
    payload: envelope.payload,
    provenance: envelope.provenance,
    createdAt: envelope.createdAt,
  };
}
