/**
 * Names the scoped bus needs beyond those of stream-names.ts (which
 * holds every per-swarm stream, subject and consumer name and is the one
 * source for them): the legacy (unscoped) resources, the migration marks,
 * and the headers the bus writes.
 *
 * Legacy (unscoped) resources, all in the hive account:
 *
 * | resource | stream | subjects | consumer |
 * | --- | --- | --- | --- |
 * | events | `AGENTIHOOKS_EVENTS` while present, else `AGENTIHOOKS-EVENTS` | `swarm.*.execution.>`, `legacy.swarm.>` | durable per reactor |
 * | dead letters | `AGENTIHOOKS_DEAD` while present, else `AGENTIHOOKS-DEAD` | `dead.>` (a swarm's letters on `dead.<swarm>`) | durable per reader |
 * | a queue named `<name>` | `AGENTIHOOKS_QUEUE_<name, '.' as '_'>` (work queue) | `<name>` | the one durable consumer on the stream (created as the name's last token) |
 * | state bucket | `KV_<bucket>` (a JetStream KV bucket) | `$KV.<bucket>.<key>` | none |
 *
 * Migration marks: a migration writes its pending mark as a message inside
 * the target stream, on a hub-only subject (stream-names.ts,
 * `laneway.migration.<swarm>.…`) that the hub adds to the stream's
 * subjects. A member reads it with nothing but its grant
 * (`$JS.API.STREAM.MSG.GET.<stream>`, last message of the subject) and no
 * member grant lets it publish there. The mark subjects of earlier
 * versions, which ended in the reserved token `$migration` under the
 * swarm's own prefix, are denied to members and no longer read; readers of
 * events and dead letters still skip them.
 */
import { LEGACY_MARK_TOKEN, MIGRATION_MARK_PREFIX, migrationMarkSubject, type SwarmLane } from "./stream-names.js";

/** Headers the bus writes. */
export const BUS_HEADERS = Object.freeze({
  /**
   * Delivery attempts a work item had before it reached this queue (a
   * migrated legacy message): the attempt a consumer sees is this plus the
   * queue's own delivery count.
   */
  priorAttempts: "Agentihooks-Prior-Attempts",
  /** On a migrated copy: `<source stream>/<source sequence>`. */
  migratedFrom: "Agentihooks-Migrated-From",
  /** On a migrated state revision: the legacy KV revision it copies. */
  legacyRevision: "Agentihooks-Legacy-Revision",
  /** On a dead letter: why it was dead-lettered (optional). */
  deadReason: "Agentihooks-Dead-Reason",
  /** JetStream KV's operation header (DEL, PURGE); state streams reuse it. */
  kvOperation: "KV-Operation",
});

/** The reserved last token of the mark subjects of earlier versions (under the swarm's own prefix). */
export const MARK_TOKEN = LEGACY_MARK_TOKEN;

/** Where the pending mark of a lane queue's import lives (inside the queue stream, on a hub-only subject). */
export function queueMarkSubject(swarm: string, lane: SwarmLane): string {
  return migrationMarkSubject(swarm, "queue", lane);
}

/** Where the pending mark of a state bucket's import lives (inside the state stream, on a hub-only subject). */
export function stateMarkSubject(swarm: string, bucket: string): string {
  return migrationMarkSubject(swarm, "state", bucket);
}

/** Where the pending mark of the dead-letter import lives (inside the dead stream, on a hub-only subject). */
export function deadMarkSubject(swarm: string): string {
  return migrationMarkSubject(swarm, "dead");
}

/**
 * The subject an earlier version kept a mark on, for this version's mark
 * subject: `laneway.migration.<swarm>.<rest>` → `swarm.<swarm>.<rest>.$migration`
 * (denied to members now; only the hub's adoption reads it).
 */
export function legacyMarkSubjectOf(markSubject: string): string | undefined {
  if (!markSubject.startsWith(`${MIGRATION_MARK_PREFIX}.`)) return undefined;
  return `swarm.${markSubject.slice(MIGRATION_MARK_PREFIX.length + 1)}.${MARK_TOKEN}`;
}

/**
 * Whether `subject` is a mark subject, of this version (hub-only) or of an
 * earlier one (`….$migration`): readers skip both, and a state migration
 * counts neither as a live write.
 */
export function isMarkSubject(subject: string): boolean {
  return subject.startsWith(`${MIGRATION_MARK_PREFIX}.`) || subject.endsWith(`.${MARK_TOKEN}`);
}

/** A swarm's legacy dead-letter subject: `dead.<swarm>` (also the logical name callers use). */
export function legacyDeadSubject(swarm: string): string {
  return `dead.${swarm}`;
}

/** The subjects of the legacy global dead-letter stream. */
export const LEGACY_DEAD_SUBJECTS = Object.freeze(["dead.>"]);

/** The prefix an unscoped publisher uses when its credential allows it (`legacy.swarm.…`). */
export const LEGACY_EVENT_PREFIX = "legacy.";

/** The legacy (unscoped) work-queue stream of queue `name`. */
export function legacyQueueStreamName(name: string): string {
  return `AGENTIHOOKS_QUEUE_${name.replaceAll(".", "_")}`;
}

/** The durable consumer created on a new legacy queue stream: the name's last token. */
export function legacyQueueConsumerName(name: string): string {
  const last = name.split(".").at(-1) ?? name;
  return /^[A-Za-z0-9_-]+$/.test(last) ? last : "worker";
}

/** The legacy KV subject of a state key: `$KV.<bucket>.<key>`. */
export function kvKeySubject(bucket: string, key: string): string {
  return `$KV.${bucket}.${key}`;
}

/** The value of {@link BUS_HEADERS.migratedFrom}. */
export function migratedFromValue(stream: string, seq: number): string {
  return `${stream}/${seq}`;
}

/** Parses a {@link BUS_HEADERS.migratedFrom} value; undefined when it is not one for `stream`. */
export function migratedSourceSeq(value: string | undefined, stream: string): number | undefined {
  if (value === undefined || !value.startsWith(`${stream}/`)) return undefined;
  const seq = Number(value.slice(stream.length + 1));
  return Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
}

/** The message id of a migrated copy (server-side deduplication within the duplicate window). */
export function migrationMsgId(stream: string, seq: number): string {
  return `migrate:${stream}:${seq}`;
}
