import { create, type UnknownField } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import type { HandlerContext } from "@connectrpc/connect";
import { parseContentType as parseConnectContentType } from "@connectrpc/connect/protocol-connect";
import { parseContentType as parseGrpcContentType } from "@connectrpc/connect/protocol-grpc";
import { parseContentType as parseGrpcWebContentType } from "@connectrpc/connect/protocol-grpc-web";
import {
  FollowResponseSchema,
  ReplayResponseSchema,
  type FollowResponse,
  type LaneRecord as LaneRecordMessage,
  type ReplayResponse,
} from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { StoredLaneRecord, type LaneRecord } from "../../lanes/index.js";

/**
 * The answers of Replay and Follow: pages of up to 128 records, read from
 * their stored envelopes.
 *
 * In JSON every record is decoded and encoded field by field. In binary
 * Protobuf (the Connect protocol's `application/proto` and
 * `application/connect+proto`, gRPC, gRPC-Web) a record's fields 2–8 —
 * lane, project, id, kind, schema, payload, provenance — are copied from
 * the stored envelope, whose fields 2–8 are LaneRecord's own, with the
 * same numbers, types and values (proto/laneway/lane/storage/v1/
 * record_envelope.proto), encoded the same canonical way; only the
 * sequence (field 1) and `created_at` (field 9, a Timestamp where the
 * envelope stores milliseconds) are written here. The response is handed
 * to Connect as a message whose fields are all already encoded (as a
 * protobuf-es unknown field, which its encoder writes verbatim): the bytes
 * on the wire are exactly those the generated encoder writes for the same
 * page, field for field, in the same order.
 */

/** Whether this call's messages are binary Protobuf: the request's codec, which Connect answers in. */
export function binaryCodec(ctx: HandlerContext): boolean {
  // A Connect GET names its codec in the query: such a call takes the generic path.
  if (ctx.requestMethod !== "POST") return false;
  const contentType = ctx.requestHeader.get("content-type") ?? "";
  if (/^application\/grpc-web/i.test(contentType)) {
    const type = parseGrpcWebContentType(contentType);
    return type !== undefined && type.binary && !type.text;
  }
  if (/^application\/grpc/i.test(contentType)) return parseGrpcContentType(contentType)?.binary === true;
  return parseConnectContentType(contentType)?.binary === true;
}

export interface PageFields {
  readonly events: readonly LaneRecord[];
  readonly cursor: number;
  readonly firstRetained?: number;
  readonly lastSequence?: number;
}

export function replayResponse(page: Required<PageFields>, binary: boolean, generic: (record: LaneRecord) => LaneRecordMessage): ReplayResponse {
  if (binary) {
    const unknown = encodedPage(page);
    if (unknown !== undefined) return withFields(create(ReplayResponseSchema), unknown);
  }
  return create(ReplayResponseSchema, {
    events: page.events.map(generic),
    cursor: BigInt(page.cursor),
    firstRetained: BigInt(page.firstRetained),
    lastSequence: BigInt(page.lastSequence),
  });
}

export function followResponse(page: PageFields, binary: boolean, generic: (record: LaneRecord) => LaneRecordMessage): FollowResponse {
  if (binary) {
    const unknown = encodedPage(page);
    if (unknown !== undefined) return withFields(create(FollowResponseSchema), unknown);
  }
  return create(FollowResponseSchema, { events: page.events.map(generic), cursor: BigInt(page.cursor) });
}

/** A message with every field already encoded (its known fields stay at their defaults, which the encoder leaves out). */
function withFields<T extends { $unknown?: UnknownField[] }>(message: T, fields: UnknownField[]): T {
  message.$unknown = fields;
  return message;
}

/**
 * A page, encoded: `events` (1, one entry per record), then the nonzero
 * ones of `cursor` (2), `first_retained` (3) and `last_sequence` (4), as
 * the canonical encoding leaves zeros out — all in one buffer, handed to
 * the encoder as one unknown field: its first tag, and the bytes after it
 * (which the encoder copies verbatim, behind that tag). Undefined when a
 * record was not read from its stored envelope (the generic path encodes
 * it).
 */
function encodedPage(page: PageFields): UnknownField[] | undefined {
  const { events } = page;
  let size = 0;
  for (const record of events) {
    if (!(record instanceof StoredLaneRecord)) return undefined;
    const inner = recordSize(record);
    size += 1 + varintSize(inner) + inner;
  }
  const scalars = [page.cursor, page.firstRetained ?? 0, page.lastSequence ?? 0];
  for (const value of scalars) if (value !== 0) size += 1 + varintSize(value);
  if (size === 0) return [];
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const record of events as readonly StoredLaneRecord[]) {
    const stored = record.encodedFields;
    const ms = record.createdAt;
    const seconds = Math.floor(ms / 1000);
    const nanos = (ms - seconds * 1000) * 1_000_000;
    const timestamp = (seconds > 0 ? 1 + varintSize(seconds) : 0) + (nanos > 0 ? 1 + varintSize(nanos) : 0);
    out[at++] = 0x0a; // 1: events
    at = writeVarint(out, at, 1 + varintSize(record.sequence) + stored.length + 1 + varintSize(timestamp) + timestamp);
    out[at++] = 0x08; // LaneRecord 1: sequence
    at = writeVarint(out, at, record.sequence);
    out.set(stored, at);
    at += stored.length;
    out[at++] = 0x4a; // LaneRecord 9: created_at
    at = writeVarint(out, at, timestamp);
    if (seconds > 0) {
      out[at++] = 0x08; // Timestamp 1: seconds
      at = writeVarint(out, at, seconds);
    }
    if (nanos > 0) {
      out[at++] = 0x10; // Timestamp 2: nanos
      at = writeVarint(out, at, nanos);
    }
  }
  for (let i = 0; i < scalars.length; i++) {
    if (scalars[i] === 0) continue;
    out[at++] = (i + 2) << 3; // 2, 3, 4: varints
    at = writeVarint(out, at, scalars[i]!);
  }
  // Every tag here is one byte: field number and wire type.
  return [{ no: out[0]! >>> 3, wireType: (out[0]! & 7) as WireType, data: out.subarray(1) }];
}

/** The length of a record's LaneRecord encoding. */
function recordSize(record: StoredLaneRecord): number {
  const ms = record.createdAt;
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  const timestamp = (seconds > 0 ? 1 + varintSize(seconds) : 0) + (nanos > 0 ? 1 + varintSize(nanos) : 0);
  return 1 + varintSize(record.sequence) + record.encodedLength + 1 + varintSize(timestamp) + timestamp;
}

/** Bytes of the varint of a non-negative safe integer. */
function varintSize(value: number): number {
  let size = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    size++;
  }
  return size;
}

/** Writes the varint of a non-negative safe integer at `at`; returns the offset after it. */
function writeVarint(out: Uint8Array, at: number, value: number): number {
  while (value >= 128) {
    out[at++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  out[at++] = value;
  return at;
}
