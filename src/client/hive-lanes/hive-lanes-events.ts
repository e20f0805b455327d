/**
 * What the hive publishes on its lane, and what it answers: the schema ids
 * (wire contracts, spelled as the specification spells them), the payloads
 * and how their record ids are derived.
 *
 * - `hive-governor-snapshot-request-v1` (work, from an allowlisted project):
 *   the payload must be the JSON object `{}`; anything else fails the work.
 * - `hive-governor-snapshot-v1` (event): the hub state read for one
 *   request, correlated with it. Its record id is `snapshot-` and the first
 *   40 hex digits of the SHA-256 of its payload bytes, and the payload names
 *   the request (`request.project`, `request.id`, `request.sequence`). A
 *   retry of the same request over the same state therefore publishes the
 *   same record (a duplicate, stored once); a retry after the state changed
 *   publishes another snapshot correlated with the same request.
 * - `hive-governor-mode-change-v1` (event): one committed hub change (scope,
 *   invite, retirement). Its record id is `mode-change-` and 40 random hex
 *   digits, chosen once per change, so retries of one publication are
 *   duplicates and two changes never collide.
 *
 * Payloads are canonical JSON (keys sorted), times RFC 3339, sequences
 * decimal strings. They hold member ids, swarm names and counts — never an
 * invite secret, credential, key or address.
 */
import { createHash, randomBytes } from "node:crypto";
import { canonicalJson, type Json } from "../../encoding/canonical-json.js";
import type { HubModeChange, MembersListing, MigrationMarkSummary } from "../../swarm/index.js";

export const HIVE_SCHEMAS = Object.freeze({
  snapshotRequest: "hive-governor-snapshot-request-v1",
  snapshot: "hive-governor-snapshot-v1",
  modeChange: "hive-governor-mode-change-v1",
});

/** The request a snapshot answers. */
export interface SnapshotRequestRef {
  readonly project: string;
  readonly id: string;
  readonly sequence: bigint;
}

/** What a snapshot reads of the hub. */
export interface HubSnapshotState {
  readonly members: MembersListing;
  readonly migrations: readonly MigrationMarkSummary[];
}

/** Checks a snapshot request's payload: exactly a JSON object without fields. */
export function checkSnapshotRequest(payload: Uint8Array): void {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload));
  } catch {
    throw new Error("a hive governor snapshot request must contain {}");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value) || Object.keys(value).length > 0) {
    throw new Error("a hive governor snapshot request must contain {}");
  }
}

/** A correlated snapshot: its record id and payload bytes. */
export function snapshotEvent(request: SnapshotRequestRef, state: HubSnapshotState): { id: string; payload: Uint8Array } {
  const iso = (ms: number | undefined): Json => (ms === undefined ? null : new Date(ms).toISOString());
  const body: Json = {
    version: 1,
    request: { project: request.project, id: request.id, sequence: request.sequence.toString() },
    state: {
      scopingEnabled: state.members.scopingEnabled,
      members: state.members.members.map((m) => ({
        memberId: m.memberId,
        scoped: m.scoped,
        swarms: [...m.swarms],
        refused: m.refused,
        lastMintedAt: iso(m.lastMintedAt),
        credentialExpiresAt: iso(m.credentialExpiresAt),
      })),
      retired: state.members.retired.map((r) => ({ memberId: r.memberId, retiredAt: iso(r.retiredAt), revokedKeys: r.revokedKeys })),
      migrations: [...state.migrations]
        .sort((a, b) => `${a.swarm}\0${a.kind}\0${a.resource}`.localeCompare(`${b.swarm}\0${b.kind}\0${b.resource}`))
        .map((m) => ({ swarm: m.swarm, kind: m.kind, resource: m.resource, status: m.status })),
    },
  };
  const payload = new TextEncoder().encode(canonicalJson(body));
  return { id: `snapshot-${createHash("sha256").update(payload).digest("hex").slice(0, 40)}`, payload };
}

/** A mode change event: a fresh record id and its payload bytes. */
export function modeChangeEvent(change: HubModeChange): { id: string; payload: Uint8Array } {
  const committedAt = new Date(change.committedAt).toISOString();
  let body: Json;
  switch (change.kind) {
    case "scope":
      body = { version: 1, change: "scope", committedAt, created: change.created, swarms: [...change.swarms], listedMembers: [...change.listedMembers] };
      break;
    case "invite":
      body = { version: 1, change: "invite", committedAt, memberId: change.memberId, scoped: change.scoped, listed: change.listed, swarms: [...change.swarms] };
      break;
    case "retire":
      body = { version: 1, change: "retire", committedAt, memberId: change.memberId, revokedKeys: change.revokedKeys };
      break;
  }
  return { id: `mode-change-${randomBytes(20).toString("hex")}`, payload: new TextEncoder().encode(canonicalJson(body)) };
}
