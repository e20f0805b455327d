import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { expect, test } from "vitest";
import { FollowResponseSchema, ReplayResponseSchema } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { encodeEnvelope, storedRecord, type Envelope, type StoredLaneRecord } from "../../src/lanes/envelope.js";
import type { LaneRecord } from "../../src/lanes/index.js";
import { laneRecordMessage } from "../../src/server/services/lane-service.js";
import { followResponse, replayResponse } from "../../src/server/services/lane-pages.js";

/**
 * Replay and Follow answer binary Protobuf by copying each record's fields
 * 2–8 from its stored envelope: the bytes must be exactly those the
 * generated encoder writes for the same page, decoded field by field —
 * for every shape a record can take (empty payload and provenance, non-ASCII
 * strings, a payload whose length needs a long varint, a creation time on
 * a whole second, large sequences) and for pages with zeros left out.
 */

const base: Envelope = {
  lane: "measurements",
  project: "atlas",
  id: "reading-é-1",
  kind: "event",
  schema: "temperature-v1",
  payload: new Uint8Array([0, 1, 2, 255, 128]),
  provenance: "https://example.net/ünïcode",
  createdAt: 1_796_170_382_066,
  generation: "0123456789abcdef0123456789abcdef",
};

const shapes: [Envelope, number][] = [
  [base, 1],
  [{ ...base, payload: new Uint8Array(0), provenance: "" }, 127],
  [{ ...base, payload: new Uint8Array(70_000).fill(7), id: "x".repeat(64) }, 128],
  [{ ...base, createdAt: 1_796_170_382_000 }, 2 ** 31],
  [{ ...base, createdAt: 999 }, 2 ** 40 + 3],
  [{ ...base, createdAt: 1_000 }, Number.MAX_SAFE_INTEGER],
];

function stored(envelope: Envelope, sequence: number): StoredLaneRecord {
  const record = storedRecord(encodeEnvelope(envelope), sequence);
  if (record === undefined) throw new Error("not an envelope");
  return record;
}

test("a replay page copied from stored envelopes is byte for byte the generated encoding of the same page", () => {
  const events = shapes.map(([envelope, sequence]) => stored(envelope, sequence));
  for (const page of [
    { events, cursor: 2 ** 40 + 9, firstRetained: 1, lastSequence: 2 ** 41 },
    { events: events.slice(0, 1), cursor: 1, firstRetained: 0, lastSequence: 1 },
    { events: [], cursor: 0, firstRetained: 0, lastSequence: 0 },
    { events: [], cursor: 5, firstRetained: 3, lastSequence: 5 },
  ]) {
    const copied = toBinary(ReplayResponseSchema, replayResponse(page, true, laneRecordMessage));
    const generic = toBinary(ReplayResponseSchema, replayResponse(page, false, laneRecordMessage));
    expect(Buffer.from(copied).equals(Buffer.from(generic))).toBe(true);
    // And it reads back as the page: every field of every record.
    const read = fromBinary(ReplayResponseSchema, copied);
    expect(read.events.map((e) => e.id)).toEqual(page.events.map((e) => e.id));
    expect(read.events.map((e) => e.sequence)).toEqual(page.events.map((e) => BigInt(e.sequence)));
    expect(read.cursor).toBe(BigInt(page.cursor));
    expect(read.lastSequence).toBe(BigInt(page.lastSequence));
  }
  const generic = fromBinary(ReplayResponseSchema, toBinary(ReplayResponseSchema, replayResponse({ events, cursor: 9, firstRetained: 1, lastSequence: 9 }, false, laneRecordMessage)));
  expect(generic.events[0]).toMatchObject({ lane: "measurements", project: "atlas", id: "reading-é-1", schema: "temperature-v1", provenance: "https://example.net/ünïcode" });
  expect(generic.events[0]!.payload).toEqual(base.payload);
  expect(generic.events[2]!.payload.byteLength).toBe(70_000);
});

test("a follow page copied from stored envelopes is byte for byte the generated encoding of the same page", () => {
  const events = shapes.map(([envelope, sequence]) => stored(envelope, sequence));
  for (const page of [
    { events, cursor: 77 },
    { events: [], cursor: 0 },
    { events: [], cursor: 12 },
  ]) {
    const copied = toBinary(FollowResponseSchema, followResponse(page, true, laneRecordMessage));
    const generic = toBinary(FollowResponseSchema, followResponse(page, false, laneRecordMessage));
    expect(Buffer.from(copied).equals(Buffer.from(generic))).toBe(true);
  }
});

test("a record not read from a stored envelope is encoded field by field, in binary too", () => {
  const plain: LaneRecord = { sequence: 4, lane: "l", project: "p", id: "i", kind: "event", schema: "s", payload: new Uint8Array([1]), provenance: "", createdAt: 1_500 };
  const page = { events: [stored(base, 3), plain], cursor: 4, firstRetained: 1, lastSequence: 4 };
  const copied = toBinary(ReplayResponseSchema, replayResponse(page, true, laneRecordMessage));
  expect(Buffer.from(copied).equals(Buffer.from(toBinary(ReplayResponseSchema, replayResponse(page, false, laneRecordMessage))))).toBe(true);
  expect(fromBinary(ReplayResponseSchema, copied).events.map((e) => e.id)).toEqual(["reading-é-1", "i"]);
});

test("a stored record decodes its fields as the envelope decoder does", () => {
  const record = stored(base, 8);
  expect(record.toJSON()).toEqual({
    sequence: 8,
    lane: base.lane,
    project: base.project,
    id: base.id,
    kind: base.kind,
    schema: base.schema,
    payload: base.payload,
    provenance: base.provenance,
    createdAt: base.createdAt,
  });
  // Strings that are not UTF-8 are not an envelope this format wrote (the encoder writes JavaScript strings).
  const bytes = Buffer.from(encodeEnvelope({ ...base, id: "ab" }));
  const at = bytes.indexOf("ab");
  bytes[at] = 0xff;
  expect(storedRecord(bytes, 1)).toBeUndefined();
});
