/**
 * The names of a swarm's streams, subjects and consumers: wire contracts
 * with existing peers, spelled exactly as the specification spells them.
 *
 * Stream names carry the swarm id as the hex of its UTF-8 bytes (`rig` →
 * `726967`). New names use letters, digits and hyphens; queue and state
 * resource components are `h-` followed by the full SHA-256 digest of
 * `QUEUE_<lane>` or `STATE_<bucket>`:
 *
 * | resource | stream | legacy stream | subjects |
 * | --- | --- | --- | --- |
 * | events | `AGENTIHOOKS-<hex>-EVENTS` | `AGENTIHOOKS_<hex>_EVENTS` | `swarm.<swarm>.events.>` |
 * | dead letters | `AGENTIHOOKS-<hex>-DEAD` | `AGENTIHOOKS_<hex>_DEAD` | `swarm.<swarm>.dead.>` |
 * | work queue of a lane | `AGENTIHOOKS-<hex>-h-<sha256 QUEUE_<lane>>` | `AGENTIHOOKS_<hex>_QUEUE_<lane>` | `swarm.<swarm>.queue.<lane>.>` |
 * | state bucket | `AGENTIHOOKS-<hex>-h-<sha256 STATE_<bucket>>` | `AGENTIHOOKS_<hex>_STATE_<bucket>` | `swarm.<swarm>.state.<bucket>.<key>` |
 *
 * Existing streams with underscore separators stay readable, so grants
 * carry both formats of each owned resource. The credential grants (in
 * member-grant.ts) and the scoped bus both take their names from here.
 *
 * Migration marks (the pending mark of a migration into a queue, state or
 * dead-letter stream) live in the target stream on a hub-only subject,
 * outside every member's grant: `laneway.migration.<swarm>.queue.<lane>`,
 * `laneway.migration.<swarm>.state.<bucket>` and
 * `laneway.migration.<swarm>.dead`. The hub adds that subject to the
 * target stream's subjects; a member reads the mark with the message get
 * its grant allows on its own stream, and cannot write it: no member grant
 * allows publishing under `laneway.`. Earlier versions kept marks under
 * the swarm's own prefix (`swarm.<swarm>.queue.<lane>.$migration`, …),
 * which every member of the swarm could publish to; those subjects are now
 * denied to members ({@link legacyMarkSubjectPatterns}).
 */
import { createHash } from "node:crypto";

/** The lanes every swarm has a work queue for. */
export const SWARM_LANES = Object.freeze(["eng", "ci", "plan"] as const);
export type SwarmLane = (typeof SWARM_LANES)[number];

/** The hive state buckets every swarm has a state stream for. */
export const SWARM_STATE_BUCKETS = Object.freeze(["spoke-work", "spoke-pending", "hive-presence", "hive-executions", "execution-starts"] as const);

/** Revisions kept per state key. */
export const STATE_REVISIONS_PER_KEY = 64;

/**
 * The hub's account-slot buckets: slot accounting spans every swarm of a
 * hive, so they belong to the hub and no member credential reaches them.
 */
export const HUB_SLOT_BUCKETS = Object.freeze(["account-slots", "hive-slot-accounts"] as const);

/** The queue group the hub answers slot requests from. */
export const HUB_SLOTS_QUEUE_GROUP = "hub-slots";

/** The global (not per-swarm) streams, new and legacy names. */
export const GLOBAL_STREAMS = Object.freeze({
  events: "AGENTIHOOKS-EVENTS",
  dead: "AGENTIHOOKS-DEAD",
  legacyEvents: "AGENTIHOOKS_EVENTS",
  legacyDead: "AGENTIHOOKS_DEAD",
});

/** The subjects of the legacy events stream (`AGENTIHOOKS_EVENTS`). */
export const LEGACY_EVENT_SUBJECTS = Object.freeze(["swarm.*.execution.>", "legacy.swarm.>"]);

/** The kinds of per-swarm stream. */
export type SwarmStreamKind = "events" | "dead" | "queue" | "state";

/** One per-swarm stream: both name formats and what it captures. */
export interface SwarmStream {
  readonly swarm: string;
  readonly kind: SwarmStreamKind;
  /** The new name (letters, digits, hyphens). */
  readonly name: string;
  /** The underscore-separated name of streams created before the naming change. */
  readonly legacyName: string;
  /** The subjects the stream captures. */
  readonly subjects: readonly string[];
  /** The lane, for a work queue. */
  readonly lane?: SwarmLane;
  /** The bucket, for a state stream. */
  readonly bucket?: string;
  /** The hub-only subject of the stream's migration mark (queue, state and dead-letter streams). */
  readonly markSubject?: string;
}

/** The prefix of every migration mark subject: only the hub publishes under it. */
export const MIGRATION_MARK_PREFIX = "laneway.migration";

/** Where the pending mark of a migration into a swarm's resource lives (a hub-only subject). */
export function migrationMarkSubject(swarm: string, kind: "queue" | "state" | "dead", resource?: string): string {
  return kind === "dead" ? `${MIGRATION_MARK_PREFIX}.${swarm}.dead` : `${MIGRATION_MARK_PREFIX}.${swarm}.${kind}.${resource}`;
}

/** The reserved last token of the mark subjects of earlier versions (under the swarm's own prefix). */
export const LEGACY_MARK_TOKEN = "$migration";

/** The mark subjects of earlier versions, as permission patterns of one swarm (denied to members). */
export function legacyMarkSubjectPatterns(swarm: string): readonly string[] {
  return [`swarm.${swarm}.queue.*.${LEGACY_MARK_TOKEN}`, `swarm.${swarm}.state.*.${LEGACY_MARK_TOKEN}`, `swarm.${swarm}.dead.${LEGACY_MARK_TOKEN}`];
}

const PREFIX = "AGENTIHOOKS";

/** The swarm id as the hex of its UTF-8 bytes: `rig` → `726967`. */
export function swarmHex(swarm: string): string {
  return Buffer.from(swarm, "utf8").toString("hex");
}

/** The reserved digest component: `h-` and the full SHA-256 hex digest of `component`. */
export function digestComponent(component: string): string {
  return `h-${createHash("sha256").update(component, "utf8").digest("hex")}`;
}

/** The prefix of every subject of a swarm: `swarm.<swarm>`. */
export function swarmSubjectPrefix(swarm: string): string {
  return `swarm.${swarm}`;
}

export function eventsStream(swarm: string): SwarmStream {
  const hex = swarmHex(swarm);
  return { swarm, kind: "events", name: `${PREFIX}-${hex}-EVENTS`, legacyName: `${PREFIX}_${hex}_EVENTS`, subjects: [`swarm.${swarm}.events.>`] };
}

export function deadStream(swarm: string): SwarmStream {
  const hex = swarmHex(swarm);
  return {
    swarm,
    kind: "dead",
    name: `${PREFIX}-${hex}-DEAD`,
    legacyName: `${PREFIX}_${hex}_DEAD`,
    subjects: [`swarm.${swarm}.dead.>`],
    markSubject: migrationMarkSubject(swarm, "dead"),
  };
}

export function queueStream(swarm: string, lane: SwarmLane): SwarmStream {
  const hex = swarmHex(swarm);
  return {
    swarm,
    kind: "queue",
    lane,
    name: `${PREFIX}-${hex}-${digestComponent(`QUEUE_${lane}`)}`,
    legacyName: `${PREFIX}_${hex}_QUEUE_${lane}`,
    subjects: [`swarm.${swarm}.queue.${lane}.>`],
    markSubject: migrationMarkSubject(swarm, "queue", lane),
  };
}

export function stateStream(swarm: string, bucket: string): SwarmStream {
  const hex = swarmHex(swarm);
  return {
    swarm,
    kind: "state",
    bucket,
    name: `${PREFIX}-${hex}-${digestComponent(`STATE_${bucket}`)}`,
    legacyName: `${PREFIX}_${hex}_STATE_${bucket}`,
    subjects: [`swarm.${swarm}.state.${bucket}.>`],
    markSubject: migrationMarkSubject(swarm, "state", bucket),
  };
}

/** Every stream a swarm owns: events, dead letters, a queue per lane, a state stream per bucket. */
export function swarmStreams(swarm: string): readonly SwarmStream[] {
  return [
    eventsStream(swarm),
    deadStream(swarm),
    ...SWARM_LANES.map((lane) => queueStream(swarm, lane)),
    ...SWARM_STATE_BUCKETS.map((bucket) => stateStream(swarm, bucket)),
  ];
}

/** The subject offers are published to: `swarm.<swarm>.queue.<lane>.work`. */
export function queueWorkSubject(swarm: string, lane: SwarmLane): string {
  return `swarm.${swarm}.queue.${lane}.work`;
}

/** The subject of a dead letter of a scoped bus: `swarm.<swarm>.dead.event`. */
export function deadLetterSubject(swarm: string): string {
  return `swarm.${swarm}.dead.event`;
}

/** The subject of a state key: `swarm.<swarm>.state.<bucket>.<key>`. */
export function stateKeySubject(swarm: string, bucket: string, key: string): string {
  return `swarm.${swarm}.state.${bucket}.${key}`;
}

/** The account-slot request subject: `slots.<swarm>.<hive>` (the hive is the member id). */
export function slotRequestSubject(swarm: string, hive: string): string {
  return `slots.${swarm}.${hive}`;
}

/** The legacy KV store of a hive state bucket: `KV_<bucket>`. */
export function legacyKvStream(bucket: string): string {
  return `KV_${bucket}`;
}

/**
 * The consumer name to use for `name`. Names of letters, digits and
 * hyphens keep their identity however long; any other name (and any name
 * that starts with the reserved `h-`) becomes the reserved digest
 * component of its UTF-8 bytes.
 */
export function consumerName(name: string): string {
  if (/^[A-Za-z0-9-]+$/.test(name) && !name.startsWith("h-")) return name;
  return digestComponent(name);
}

/**
 * The swarm a per-swarm stream belongs to, read from either name format
 * (`AGENTIHOOKS-<hex>-…` or `AGENTIHOOKS_<hex>_…`); undefined for any
 * other name, and for hex that is not UTF-8.
 */
export function swarmOfStream(streamName: string): string | undefined {
  const match = /^AGENTIHOOKS[-_]((?:[0-9a-f]{2})+)[-_]/.exec(streamName);
  if (!match?.[1]) return undefined;
  const bytes = Buffer.from(match[1], "hex");
  const swarm = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return Buffer.from(swarm, "utf8").equals(bytes) ? swarm : undefined;
}
