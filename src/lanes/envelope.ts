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

/** Parses a stored envelope; undefined when the bytes are not one this format wrote. */
export function decodeEnvelope(bytes: Uint8Array): Envelope | undefined {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = buffer.length;
  let at = 0;
  // A varint of at most 53 bits (the only integers of an envelope); NaN when longer or cut short.
  const varint = (): number => {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      if (at >= end) return Number.NaN;
      const byte = buffer[at++]!;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value <= Number.MAX_SAFE_INTEGER ? value : Number.NaN;
      scale *= 128;
    }
    return Number.NaN;
  };
  let lane = "";
  let project = "";
  let id = "";
  let kind = 0;
  let schema = "";
  let payload: Uint8Array = new Uint8Array(0);
  let provenance = "";
  let createdAt = Number.NaN;
  let generation = "";
  let format = 0;
  let lastField = 0;
  while (at < end) {
    const tag = varint();
    if (!Number.isFinite(tag)) return undefined;
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    // The generated encoder writes each field once, in number order.
    if (field <= lastField) return undefined;
    lastField = field;
    if (field === KIND || field === CREATED_AT_MS || field === FORMAT) {
      if (wire !== 0) return undefined;
      const value = varint();
      if (!Number.isFinite(value)) return undefined;
      if (field === KIND) kind = value;
      else if (field === CREATED_AT_MS) createdAt = value;
      else format = value;
      continue;
    }
    if (wire !== 2) return undefined;
    const length = varint();
    if (!Number.isFinite(length) || length > end - at) return undefined;
    const from = at;
    at += length;
    switch (field) {
      case LANE:
        lane = buffer.toString("utf8", from, at);
        break;
      case PROJECT:
        project = buffer.toString("utf8", from, at);
        break;
      case ID:
        id = buffer.toString("utf8", from, at);
        break;
      case SCHEMA:
        schema = buffer.toString("utf8", from, at);
        break;
      case PAYLOAD:
        // A copy: the record outlives the broker's read buffer.
        payload = new Uint8Array(buffer.subarray(from, at));
        break;
      case PROVENANCE:
        provenance = buffer.toString("utf8", from, at);
        break;
      case GENERATION:
        generation = buffer.toString("latin1", from, at);
        break;
      default:
        return undefined;
    }
  }
  // Proto3 leaves empty strings and zeros out; those that may not be empty must be present.
  if (format !== ENVELOPE_FORMAT || lane === "" || project === "" || id === "" || schema === "" || generation === "" || Number.isNaN(createdAt)) return undefined;
  if (kind !== StoredRecordKind.EVENT && kind !== StoredRecordKind.WORK) return undefined;
  return { lane, project, id, kind: kind === StoredRecordKind.EVENT ? "event" : "work", schema, payload, provenance, createdAt, generation };
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

export function recordOf(envelope: Envelope, sequence: number): LaneRecord {
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
