/**
 * The pending mark of a migration.
 *
 * Where it lives: a JSON message on the hub-only subject
 * `laneway.migration.<swarm>.<queue.<lane>|state.<bucket>|dead>` inside the
 * target stream itself (stream-names.ts; the hub adds the subject to the
 * stream). A member reads it with the one read its grant allows on its own
 * streams, `$JS.API.STREAM.MSG.GET.<stream>` (last message of the
 * subject), and cannot write it: no member grant allows publishing under
 * `laneway.`, so a member can neither mark a pending migration complete
 * nor a completed one pending. nats-server 2.9.10 has no stream metadata,
 * and a stream description could not be changed atomically against a
 * racing migration, so a message it is.
 *
 * Earlier versions kept the mark on `swarm.<swarm>.….$migration`, under the
 * swarm's own prefix, where members could write it. Those marks are no
 * longer read by members. The hub adopts one (copies it to the hub-only
 * subject) when it provisions the swarm or migrates the resource and finds
 * no mark of its own, and only a mark that names the resource's own legacy
 * source ({@link adoptLegacyMark}), so a pending migration of an earlier
 * version resumes after an upgrade.
 *
 * How it changes: each write expects the subject's last sequence to be the
 * one the writer read (`Nats-Expected-Last-Subject-Sequence`), so two hubs
 * cannot both start or both finish the same migration. A migration writes
 * `pending` before it copies anything and `complete` only after the copy
 * and the source cleanup finished; the older marks are then purged (the
 * latest is kept as the record of what was moved).
 *
 * A mark that cannot be parsed counts as pending: a member never binds a
 * resource whose import it cannot prove finished.
 */
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { BUS_OWN_TEXTS, busFailure, jetStreamCode, MigrationIncompleteError, MigrationRefusedError } from "./errors.js";
import { lastMessage } from "./stream-reader.js";
import { legacyMarkSubjectOf } from "./names.js";

const WRONG_LAST_SEQUENCE = 10071;

/** What a state migration recorded of one key's legacy revisions when it started. */
export interface RecordedRevisions {
  /** Number of retained revisions. */
  readonly count: number;
  /** The last revision (legacy stream sequence); 0 when none. */
  readonly last: number;
  /** SHA-256 (hex, first 32 characters) of the revision sequences, comma-joined. */
  readonly digest: string;
}

export interface MigrationMark {
  readonly version: 1;
  readonly kind: "queue" | "state" | "dead";
  readonly status: "pending" | "complete";
  /** The legacy stream copied from. */
  readonly source: string;
  /** Queue and dead letters: the source's last sequence when the migration started (work past it is new). */
  readonly startSeq?: number;
  /** Queue: the legacy durable consumer drained. */
  readonly consumer?: string;
  /** State: the owned keys (sorted, distinct). */
  readonly keys?: readonly string[];
  /** State: each key's recorded revisions. */
  readonly revisions?: Readonly<Record<string, RecordedRevisions>>;
  /** State: the legacy bucket's last revision when the migration started; the target's revisions continue past it. */
  readonly highWater?: number;
  /** On completion: messages copied by the finishing run and those found already copied. */
  readonly copied?: number;
  readonly skipped?: number;
}

export interface StoredMark {
  readonly mark: MigrationMark;
  /** The mark message's sequence (what the next write expects). */
  readonly seq: number;
}

/** The latest mark on `subject` of `stream`; a malformed one reads as pending. */
export async function readMark(jsm: JetStreamManager, stream: string, subject: string): Promise<StoredMark | undefined> {
  const message = await lastMessage(jsm, stream, subject);
  if (message === null) return undefined;
  let mark: MigrationMark;
  try {
    mark = JSON.parse(Buffer.from(message.data).toString("utf8")) as MigrationMark;
    if (mark.status !== "pending" && mark.status !== "complete") throw new Error("status");
  } catch {
    mark = { version: 1, kind: "queue", status: "pending", source: "" };
  }
  return { mark, seq: message.seq };
}

/**
 * Writes `mark` if the subject's last mark is still `previousSeq` (0: no
 * mark yet). Returns the new mark's sequence.
 */
export async function writeMark(js: JetStreamClient, subject: string, mark: MigrationMark, previousSeq: number): Promise<number> {
  try {
    const ack = await js.publish(subject, JSON.stringify(mark), { expect: { lastSubjectSequence: previousSeq } });
    return ack.seq;
  } catch (error) {
    if (jetStreamCode(error) === WRONG_LAST_SEQUENCE) throw new MigrationRefusedError(BUS_OWN_TEXTS.migrationRunning, { cause: error });
    throw busFailure(error, "writing a migration mark");
  }
}

/** Keeps only the latest mark on `subject` (best effort: a leftover older mark is harmless). */
export async function pruneMarks(jsm: JetStreamManager, stream: string, subject: string): Promise<void> {
  try {
    await jsm.streams.purge(stream, { filter: subject, keep: 1 });
  } catch {
    // Older marks only cost a few bytes; the latest one is what counts.
  }
}

/**
 * A member binding a scoped queue or state stream: refuses with the
 * specification's text while the import is marked pending.
 */
export async function refuseWhilePending(jsm: JetStreamManager, stream: string, subject: string, resource: "queue" | "state"): Promise<void> {
  const stored = await readMark(jsm, stream, subject);
  if (stored?.mark.status === "pending") throw new MigrationIncompleteError(resource);
}

/** What a mark of an earlier version must say to be adopted: its kind and the legacy sources it may name. */
export interface AdoptableMark {
  readonly kind: "queue" | "state" | "dead";
  /** The legacy streams a migration of this resource copies from. */
  readonly sources: readonly string[];
}

/**
 * Copies the mark an earlier version left on the swarm-prefixed subject
 * (`….$migration`) of `stream` to the hub-only `subject`, when the stream
 * holds no mark there yet and the old one is well formed, of the expected
 * kind and names one of the expected legacy sources. Anything else is left
 * unread (a member may have written it). Returns the adopted mark, or
 * undefined. Called by the hub only (it writes the mark).
 */
export async function adoptLegacyMark(js: JetStreamClient, jsm: JetStreamManager, stream: string, subject: string, expected: AdoptableMark): Promise<StoredMark | undefined> {
  if ((await lastMessage(jsm, stream, subject)) !== null) return undefined;
  const legacySubject = legacyMarkSubjectOf(subject);
  if (legacySubject === undefined) return undefined;
  const old = await lastMessage(jsm, stream, legacySubject);
  if (old === null) return undefined;
  let mark: MigrationMark;
  try {
    mark = JSON.parse(Buffer.from(old.data).toString("utf8")) as MigrationMark;
  } catch {
    return undefined;
  }
  if (typeof mark !== "object" || mark === null || mark.version !== 1 || mark.kind !== expected.kind) return undefined;
  if ((mark.status !== "pending" && mark.status !== "complete") || !expected.sources.includes(mark.source)) return undefined;
  const seq = await writeMark(js, subject, mark, 0);
  return { mark, seq };
}
