import { createHash } from "node:crypto";

/**
 * Every name the lanes core gives a broker resource, in one place.
 *
 * - Streams are named by a bounded digest of the (namespace, lane) tuple,
 *   never by concatenating identifiers with a separator that identifiers
 *   may themselves contain (`_`, `-`): `LANEWAY-L-<40 hex>`.
 * - KV buckets of a namespace carry a digest of the namespace:
 *   `LANEWAY-N-<40 hex>-<ROLE>` with a fixed role suffix (`META`, `RSV`,
 *   `GRP`).
 * - Subjects are `laneway.<namespace>.<lane>.rec.<project>.<id>`: every
 *   variable token is a validated identifier (`^[a-z][a-z0-9_-]*$`, no `.`,
 *   `*` or `>`), and the fixed token `rec` separates the lane from the key.
 * - KV keys are `<lane>.<project>.<id>` (reservations) and `<lane>.<group>`
 *   (group ledgers): identifiers joined by `.`, which no identifier holds.
 * - A group's signal subject, `laneway.<namespace>.<lane>.grp.<group>`,
 *   carries only Laneway's own notes between its processes (core NATS, never
 *   stored: the fixed `grp` keeps it out of the lane's stream).
 */

/** The digest that names a tuple: SHA-256 over the parts joined by NUL (which no identifier holds), 40 hex characters. */
function digest(...parts: string[]): string {
  return createHash("sha256").update(parts.join("\0")).digest("hex").slice(0, 40);
}

export const STREAM_PREFIX = "LANEWAY-L-";

export function streamName(namespace: string, lane: string): string {
  return `${STREAM_PREFIX}${digest("lane", namespace, lane)}`;
}

function bucketName(namespace: string, role: "META" | "RSV" | "GRP"): string {
  return `LANEWAY-N-${digest("namespace", namespace)}-${role}`;
}

/** The namespace generation (registry and bounds). */
export function metaBucket(namespace: string): string {
  return bucketName(namespace, "META");
}

/** Publish reservations, one key per (lane, project, id). */
export function reservationBucket(namespace: string): string {
  return bucketName(namespace, "RSV");
}

/** Group cursor/lease ledgers, one key per (lane, group). */
export function groupBucket(namespace: string): string {
  return bucketName(namespace, "GRP");
}

/** The key of the namespace generation in the meta bucket. */
export const GENERATION_KEY = "generation";

/** Every record subject of a lane (the stream's subject filter). */
export function laneSubjects(namespace: string, lane: string): string {
  return `laneway.${namespace}.${lane}.rec.>`;
}

/** The subject of one record: unique per (lane, project, id). */
export function recordSubject(namespace: string, lane: string, project: string, id: string): string {
  return `laneway.${namespace}.${lane}.rec.${project}.${id}`;
}

/** Where Laneway processes sharing a group tell each other that a write of theirs lost (work-groups.ts). */
export function groupSignalSubject(namespace: string, lane: string, group: string): string {
  return `laneway.${namespace}.${lane}.grp.${group}`;
}

/** Every group signal subject of a namespace (one subscription per Laneway process). */
export function groupSignalSubjects(namespace: string): string {
  return `laneway.${namespace}.*.grp.*`;
}

export function reservationKey(lane: string, project: string, id: string): string {
  return `${lane}.${project}.${id}`;
}

export function groupKey(lane: string, group: string): string {
  return `${lane}.${group}`;
}
