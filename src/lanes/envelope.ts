import { createHash } from "node:crypto";
import { canonicalJson } from "../encoding/canonical-json.js";
import type { LaneRecord, Publication, RecordKind } from "./types.js";

/**
 * The durable envelope of one record, as stored in the lane's stream: the
 * publication (kind, schema, payload, provenance), what the service adds
 * (the authenticated project, the lane, `created_at`), and the reservation
 * generation it was published under. Canonical JSON with the payload in
 * base64, so that a resumed publication produces exactly the same bytes and
 * the read-back check can compare them.
 */
export const ENVELOPE_FORMAT = 1;

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
  return Buffer.from(
    canonicalJson({
      format: ENVELOPE_FORMAT,
      lane: envelope.lane,
      project: envelope.project,
      id: envelope.id,
      kind: envelope.kind,
      schema: envelope.schema,
      payload: Buffer.from(envelope.payload).toString("base64"),
      provenance: envelope.provenance,
      created_at: new Date(envelope.createdAt).toISOString(),
      generation: envelope.generation,
    }),
    "utf8",
  );
}

/** Parses a stored envelope; undefined when the bytes are not one this format wrote. */
export function decodeEnvelope(bytes: Uint8Array): Envelope | undefined {
  let value: Record<string, unknown>;
  try {
    // A view of the bytes, not a copy: records are read by the hundred.
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8")) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || value.format !== ENVELOPE_FORMAT) return undefined;
  const text = (k: string) => (typeof value[k] === "string" ? (value[k] as string) : undefined);
  const lane = text("lane");
  const project = text("project");
  const id = text("id");
  const kind = text("kind");
  const schema = text("schema");
  const payload = text("payload");
  const provenance = text("provenance");
  const createdAt = Date.parse(text("created_at") ?? "");
  const generation = text("generation");
  if (
    lane === undefined ||
    project === undefined ||
    id === undefined ||
    (kind !== "event" && kind !== "work") ||
    schema === undefined ||
    payload === undefined ||
    provenance === undefined ||
    Number.isNaN(createdAt) ||
    generation === undefined
  ) {
    return undefined;
  }
  return { lane, project, id, kind, schema, payload: Buffer.from(payload, "base64"), provenance, createdAt, generation };
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
