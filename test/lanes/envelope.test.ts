import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { expect, test } from "vitest";
import { RecordEnvelopeSchema, StoredRecordKind } from "../../gen/laneway/lane/storage/v1/record_envelope_pb.js";
import { decodeEnvelope, encodeEnvelope, ENVELOPE_FORMAT, type Envelope } from "../../src/lanes/envelope.js";

/**
 * The stored envelope (format 2, binary RecordEnvelope): what the encoder
 * writes, the schema's own decoder reads identically; the direct decoder
 * every reader uses gives back exactly what was encoded, and refuses
 * anything this format did not write.
 */

const envelope: Envelope = {
  lane: "measurements",
  project: "atlas",
  id: "reading-é-1",
  kind: "work",
  schema: "temperature-v1",
  payload: new Uint8Array([0, 1, 2, 255, 128]),
  provenance: "https://example.net/ünïcode",
  createdAt: 1_796_170_382_066,
  generation: "0123456789abcdef0123456789abcdef",
};

test("an envelope decodes to exactly what was encoded, and the schema's decoder agrees", () => {
  const bytes = encodeEnvelope(envelope);
  expect(decodeEnvelope(bytes)).toEqual(envelope);
  const message = fromBinary(RecordEnvelopeSchema, bytes);
  expect(message.kind).toBe(StoredRecordKind.WORK);
  expect(message.createdAtMs).toBe(BigInt(envelope.createdAt));
  expect(message.format).toBe(ENVELOPE_FORMAT);
  // Empty payload and provenance (left out on the wire) come back empty; an event stays an event.
  const bare = { ...envelope, kind: "event" as const, payload: new Uint8Array(0), provenance: "" };
  expect(decodeEnvelope(encodeEnvelope(bare))).toEqual(bare);
  // Encoding is deterministic: a resumed publication writes the same bytes.
  expect(Buffer.from(encodeEnvelope({ ...envelope })).equals(Buffer.from(bytes))).toBe(true);
});

test("bytes this format did not write are not an envelope", () => {
  const valid = create(RecordEnvelopeSchema, {
    lane: "l",
    project: "p",
    id: "i",
    kind: StoredRecordKind.EVENT,
    schema: "s",
    createdAtMs: 1n,
    generation: "g",
    format: ENVELOPE_FORMAT,
  });
  expect(decodeEnvelope(toBinary(RecordEnvelopeSchema, valid))).toBeDefined();
  const refused = [
    // The JSON envelope of format 1.
    Buffer.from(JSON.stringify({ format: 1, lane: "l", project: "p", id: "i", kind: "event", schema: "s", payload: "", provenance: "", created_at: "2026-01-01T00:00:00.000Z", generation: "g" })),
    toBinary(RecordEnvelopeSchema, { ...valid, format: 3 }),
    toBinary(RecordEnvelopeSchema, { ...valid, kind: StoredRecordKind.UNSPECIFIED }),
    toBinary(RecordEnvelopeSchema, { ...valid, lane: "" }),
    toBinary(RecordEnvelopeSchema, { ...valid, generation: "" }),
    // Cut short, an unknown field, a field written twice.
    toBinary(RecordEnvelopeSchema, valid).subarray(0, 5),
    Buffer.concat([toBinary(RecordEnvelopeSchema, valid), Buffer.from([0x88, 0x01, 0x01])]),
    Buffer.concat([Buffer.from([0x12, 0x01, 0x6c]), toBinary(RecordEnvelopeSchema, valid)]),
    new Uint8Array(0),
  ];
  for (const bytes of refused) expect(decodeEnvelope(bytes)).toBeUndefined();
});
