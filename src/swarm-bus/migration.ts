/**
 * Migrating a swarm's retained legacy data into its own streams: the hub's
 * root bus, opened scoped with provisioning, moves one swarm at a time
 * (quiesce that swarm's legacy writers and consumers first).
 *
 * | call | moves | refuses |
 * | --- | --- | --- |
 * | `migrateState(swarm, bucket, keys)` | every retained revision of the named keys from `KV_<bucket>`, in order; the target's revisions continue past the legacy bucket's high-water mark | a changed key list or revision set (`state migration ownership or source revisions changed`), a target that already has live writes, a key written during the copy (`legacy state changed during migration`) |
 * | `migrateQueue(swarm, name, policy)` | every undelivered message of the legacy lane queue, keeping each one's delivery attempt count | work for another swarm or new work past the start point (`legacy queue changed or contains work for another swarm`), work still held by a consumer (`legacy queue still has undelivered work`) |
 * | `migrateDead(swarm)` | every letter of that swarm (`dead.<swarm>`) from `AGENTIHOOKS_DEAD` (or `AGENTIHOOKS-DEAD`) into its own dead stream | a retained copy that differs from its source |
 *
 * All three refuse a bus without provisioning (`migration requires
 * privileged provisioning`) or without scoping (`scoped migration is not
 * enabled`).
 *
 * ## The pending mark
 *
 * Each call writes a pending mark (migration-mark.ts: a message on the
 * reserved `…$migration` subject inside the target stream) before it
 * copies anything, and marks it complete only after the copy and the
 * source cleanup finished. The mark records where the copy started (the
 * source's last sequence, and for state the owned keys and a digest of
 * their revisions), so a repeat resumes the same migration rather than
 * starting another. Members refuse to bind a queue or state stream whose
 * mark is pending (`scoped queue migration is incomplete`, `scoped state
 * migration is incomplete`).
 *
 * ## Crash safety (the hub may be killed at any instruction)
 *
 * Every copy carries `Agentihooks-Migrated-From: <source stream>/<source
 * sequence>` and the message id `migrate:<source stream>:<sequence>`, and
 * the order is always: copy (acknowledged by the target) → remove from the
 * source → (after the last one) mark complete. So after a crash:
 * - a message copied but not yet removed is found by the repeat, which
 *   reads the target's copies (their `Migrated-From` sequences) and skips
 *   it — and within the duplicate window the server would drop a second
 *   copy anyway (same message id): nothing is copied twice;
 * - a message not yet copied is still in the source (removal only follows
 *   an acknowledged copy): nothing is lost;
 * - the mark stays pending until a run reaches the end, and a repeat that
 *   finds the source already cleaned (killed between cleanup and the
 *   complete mark) only checks that every recorded copy exists, then
 *   completes the mark.
 *
 * Source removal per resource: a queue item is acknowledged on the legacy
 * consumer (the work queue then deletes it) after its copy is stored; dead
 * letters and state revisions are purged only once all are copied, bounded
 * by the recorded last sequence (`purge {filter, seq}`), so a letter or
 * revision written after the start point is never removed unseen.
 *
 * Queue attempts: the migration takes each legacy item through the legacy
 * durable consumer (the only place JetStream keeps an item's delivery
 * count) and writes `Agentihooks-Prior-Attempts` = deliveries so far − 1
 * (its own delivery is not an attempt). Items a killed run had taken are
 * held by the legacy consumer until its ack wait ends; a repeat of a
 * pending migration waits up to that ack wait for them. One the killed run
 * had already copied keeps its exact count (the repeat skips it); one it
 * had only taken counts that delivery too (JetStream counted it, and
 * nothing tells it apart afterwards).
 *
 * Pause points ({@link MIGRATION_PAUSE_POINTS}) let a crash test stop the
 * hub exactly between these steps (test/swarm/bus/migration-crash.test.ts).
 */
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import type { Consumer, JsMsg, StoredMsg } from "@nats-io/jetstream";
import { createHash } from "node:crypto";
import { deadLetterSubject, deadStream, GLOBAL_STREAMS, stateStream, type SwarmLane, type SwarmStream } from "./stream-names.js";
import { swarmNameProblem } from "./swarm-names.js";
import type { QueuePolicy } from "./config.js";
import { BUS_OWN_TEXTS, BUS_TEXTS, busFailure, BusPermissionError, BusRefusedError, MigrationRefusedError, SwarmError } from "./errors.js";
import { adoptLegacyMark, pruneMarks, readMark, writeMark, type AdoptableMark, type MigrationMark, type RecordedRevisions } from "./migration-mark.js";
import {
  BUS_HEADERS,
  deadMarkSubject,
  isMarkSubject,
  kvKeySubject,
  legacyDeadSubject,
  legacyQueueConsumerName,
  legacyQueueStreamName,
  migratedFromValue,
  migratedSourceSeq,
  migrationMsgId,
  queueMarkSubject,
  stateMarkSubject,
} from "./names.js";
import { priorAttemptsOf } from "./queue.js";
import { isBucketName, isStateKey } from "./state.js";
import { allMessages, lastMessage, scanBySequence } from "./stream-reader.js";
import type { BusStreams } from "./streams.js";
import { decodeEvent, routeQueue } from "./subject-map.js";

/** The most keys one state migration may name (its mark holds a digest per key). */
export const MAX_MIGRATION_KEYS = 4_096;
/** Legacy queue items taken per pull. */
const QUEUE_BATCH = 256;

export interface MigrationProgress {
  /** Messages copied by this run so far. */
  readonly copied: number;
  /** Messages found already copied (a repeat). */
  readonly skipped: number;
  /** Messages to move (for a queue: what the legacy queue held when this run started). */
  readonly total: number;
}

/** What every migration takes: the swarm it moves into, and how it reports. */
export interface MigrationParams {
  /** The swarm the legacy messages belong to and move into. */
  readonly swarm: string;
  /** Called after each message; a returned promise is awaited. */
  readonly onProgress?: (progress: MigrationProgress) => void | Promise<void>;
  /** Fault injection (tests only): {@link MIGRATION_PAUSE_POINTS}. */
  readonly pausePoints?: PausePoints;
}

/** {@link migrateState}: the named keys of legacy `KV_<bucket>`. */
export interface MigrateStateParams extends MigrationParams {
  /** The legacy KV bucket. */
  readonly bucket: string;
  /** The keys the swarm owns in it (none: the swarm takes ownership of the bucket with no legacy key). */
  readonly keys: readonly string[];
}

/** {@link migrateQueue}: the undelivered work of one legacy lane queue. */
export interface MigrateQueueParams extends MigrationParams {
  /** The legacy queue's subject, `swarm.<swarm>.ready.<lane>`. */
  readonly name: string;
  /** The target queue's policy (default: the library's). */
  readonly policy?: QueuePolicy;
}

/** {@link migrateDead}: the swarm's letters in the legacy dead-letter stream. */
export type MigrateDeadParams = MigrationParams;

/**
 * After each message: a migration whose signal was aborted stops there
 * (its pending mark stays, so a repeat resumes), then the caller hears of
 * the progress.
 */
async function stepDone(params: MigrationParams, signal: AbortSignal | undefined, progress: MigrationProgress): Promise<void> {
  if (signal?.aborted) throw new SwarmError("swarm_unavailable", "the migration was stopped because its call ended; repeat it to resume");
  await params.onProgress?.(progress);
}

/**
 * The migration's fault-injection pause points (src/fault-injection): a
 * crash test stops the hub at one and kills it there. The id printed is
 * `<resource>:<source sequence>` (or `<resource>:<swarm>` for the last one).
 *
 * - `migration-after-take`: queue only — a batch was taken from the legacy
 *   consumer (now held by this run), nothing of it copied yet;
 * - `migration-after-copy`: a copy is stored in the target, its source not
 *   yet removed (a queue item not yet acknowledged on the legacy consumer);
 * - `migration-before-complete`: everything is copied and the source
 *   cleaned, the mark is still pending.
 */
export const MIGRATION_PAUSE_POINTS = ["migration-after-take", "migration-after-copy", "migration-before-complete"] as const;

export interface MigrationResult {
  readonly resource: "queue" | "state" | "dead";
  readonly swarm: string;
  /** The target stream. */
  readonly target: string;
  /** The legacy stream, when there was one. */
  readonly source: string | undefined;
  /**
   * `moved`: this run completed the migration; `already-complete`: a repeat
   * of a finished one; `nothing-to-move`: no legacy data (no mark written);
   * `owned`: a state migration with no key recorded the swarm's ownership of
   * the bucket with no legacy key.
   */
  readonly outcome: "moved" | "already-complete" | "nothing-to-move" | "owned";
  readonly copied: number;
  readonly skipped: number;
  readonly total: number;
}

/** What a migration needs of its bus. */
export interface MigrationContext {
  readonly streams: BusStreams;
  readonly scoped: boolean;
  readonly provisioning: boolean;
}

/**
 * Moves the named keys of `KV_<bucket>` into the swarm's state stream. With
 * no key, the swarm takes ownership of the bucket with no legacy key (its
 * state stream is created over a legacy bucket that holds other swarms'
 * entries) and a complete mark with no key records it: outcome `owned`.
 */
export async function migrateState(ctx: MigrationContext, params: MigrateStateParams, signal?: AbortSignal): Promise<MigrationResult> {
  const { swarm, bucket, keys } = params;
  guard(ctx, swarm);
  if (!isBucketName(bucket)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidBucket(bucket));
  for (const key of keys) if (!isStateKey(key)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidKey(key));
  const owned = [...new Set(keys)].sort();
  const pause = params.pausePoints ?? noPausePoints;
  if (owned.length > MAX_MIGRATION_KEYS) throw new BusRefusedError(BUS_OWN_TEXTS.tooManyKeys(MAX_MIGRATION_KEYS));
  const { streams } = ctx;
  const jsm = streams.jsm();
  const js = streams.js();
  const legacy = `KV_${bucket}`;
  const markSubject = stateMarkSubject(swarm, bucket);

  // The target exists before the mark (the mark lives in it); it is created over a non-empty bucket only here, with the keys named.
  const resource = stateStream(swarm, bucket);
  const target = (await streams.existingSwarmStream(resource)) ?? (await streams.swarmStream(resource, { explicitOwnership: true }));
  const stored = await markOf(streams, target, resource, markSubject, { kind: "state", sources: [legacy] });
  const legacyInfo = await streams.info(legacy);
  const current = new Map<string, StoredMsg[]>();
  await eachLimited(owned, 16, async (key) => {
    current.set(key, legacyInfo === undefined ? [] : await allMessages(jsm, legacy, kvKeySubject(bucket, key), 1, Number.MAX_SAFE_INTEGER));
  });
  const base = { resource: "state" as const, swarm, target, source: legacyInfo === undefined ? undefined : legacy };

  if (stored?.mark.status === "complete") {
    if (!sameKeys(stored.mark.keys, owned) || [...current.values()].some((revisions) => revisions.length > 0)) {
      throw new MigrationRefusedError(BUS_TEXTS.stateOwnershipChanged);
    }
    const total = Object.values(stored.mark.revisions ?? {}).reduce((n, r) => n + r.count, 0);
    return { ...base, outcome: "already-complete", copied: 0, skipped: total, total };
  }

  let recorded: Readonly<Record<string, RecordedRevisions>>;
  let markSeq: number;
  let copies = new Map<number, StoredMsg>();
  /** Keys whose legacy revisions a killed run already purged (after copying them all). */
  const cleaned = new Set<string>();
  if (stored === undefined) {
    // A fresh migration moves keys the legacy bucket holds: a key without a revision is a wrong name, not an empty ownership.
    const missing = owned.find((key) => current.get(key)!.length === 0);
    if (missing !== undefined) throw new MigrationRefusedError(BUS_OWN_TEXTS.legacyKeyMissing(missing, legacy));
    const targetInfo = await streams.info(target);
    if (targetInfo === undefined) throw busFailure(new Error("target vanished"), "reading the scoped state stream");
    if (targetInfo.state.messages > 0) throw new MigrationRefusedError(BUS_OWN_TEXTS.stateTargetHasLiveWrites);
    const highWater = legacyInfo?.state.last_seq ?? 0;
    // Revisions continue past the legacy high-water mark: an empty stream's next sequence is set past it.
    if (targetInfo.state.last_seq < highWater) await purge(streams, target, { seq: highWater + 1 });
    recorded = Object.fromEntries(owned.map((key) => [key, summarize(current.get(key)!)]));
    const mark: MigrationMark = { version: 1, kind: "state", status: "pending", source: legacy, keys: owned, revisions: recorded, highWater };
    markSeq = await writeMark(js, markSubject, mark, 0);
  } else {
    if (!sameKeys(stored.mark.keys, owned) || stored.mark.revisions === undefined) throw new MigrationRefusedError(BUS_TEXTS.stateOwnershipChanged);
    recorded = stored.mark.revisions;
    markSeq = stored.seq;
    copies = await copiesIn(streams, target, legacy, stored.seq, (message) => {
      // Marks and copies are all a pending target may hold: anything else is a live write.
      if (!isMarkSubject(message.subject)) throw new MigrationRefusedError(BUS_OWN_TEXTS.stateTargetHasLiveWrites);
    });
    for (const key of owned) {
      const now = summarize(current.get(key)!);
      const then = recorded[key];
      if (then === undefined) throw new MigrationRefusedError(BUS_TEXTS.stateOwnershipChanged);
      if (sameRevisions(now, then)) continue;
      const subject = `swarm.${swarm}.state.${bucket}.${key}`;
      const copied = [...copies].filter(([, copy]) => copy.subject === subject).map(([seq]) => seq);
      if (now.count === 0 && sameRevisions(summarizeSeqs(copied), then)) {
        cleaned.add(key);
        continue;
      }
      throw new MigrationRefusedError(BUS_TEXTS.stateOwnershipChanged);
    }
  }

  const revisions = owned
    .filter((key) => !cleaned.has(key))
    .flatMap((key) => current.get(key)!.map((message) => ({ key, message })))
    .sort((a, b) => a.message.seq - b.message.seq);
  const total = Object.values(recorded).reduce((n, r) => n + r.count, 0);
  let copied = 0;
  let skipped = total - revisions.length;
  for (const { key, message } of revisions) {
    if (copies.has(message.seq)) {
      skipped += 1;
    } else {
      const h = copyHeaders(message.header, { [BUS_HEADERS.migratedFrom]: migratedFromValue(legacy, message.seq), [BUS_HEADERS.legacyRevision]: String(message.seq) });
      await publishCopy(streams, `swarm.${swarm}.state.${bucket}.${key}`, message.data, h, migrationMsgId(legacy, message.seq));
      pause.reached("migration-after-copy", `state:${message.seq}`);
      copied += 1;
    }
    await stepDone(params, signal, { copied, skipped, total });
  }

  // A key written (put, delete or purge) since the revisions were recorded has another last revision now.
  for (const key of owned) {
    if (cleaned.has(key)) continue;
    const last = legacyInfo === undefined ? null : await lastMessage(jsm, legacy, kvKeySubject(bucket, key));
    if ((last?.seq ?? 0) !== recorded[key]!.last) throw new MigrationRefusedError(BUS_TEXTS.legacyStateChanged);
  }
  for (const key of owned) {
    const last = recorded[key]!.last;
    if (!cleaned.has(key) && last > 0) await purge(streams, legacy, { filter: kvKeySubject(bucket, key), seq: last + 1 });
  }
  pause.reached("migration-before-complete", `state:${swarm}`);
  await complete(streams, target, markSubject, { version: 1, kind: "state", status: "complete", source: legacy, keys: owned, revisions: recorded, copied, skipped }, markSeq);
  return { ...base, outcome: owned.length === 0 ? "owned" : "moved", copied, skipped, total };
}

/** Moves the undelivered work of legacy queue `name` (`swarm.<swarm>.ready.<lane>`) into the swarm's lane queue. */
export async function migrateQueue(ctx: MigrationContext, params: MigrateQueueParams, signal?: AbortSignal): Promise<MigrationResult> {
  const { swarm, name, policy = {} } = params;
  guard(ctx, swarm);
  const pause = params.pausePoints ?? noPausePoints;
  const route = routeQueue("scoped", swarm, name);
  if (route.mode !== "scoped") throw new BusRefusedError(BUS_TEXTS.queueNotOfSwarm(name, swarm));
  const { streams } = ctx;
  const jsm = streams.jsm();
  const js = streams.js();
  const lane: SwarmLane = route.lane;
  const legacy = legacyQueueStreamName(name);
  const target = await streams.swarmStream(route.stream);
  await streams.laneConsumer(target, swarm, lane, policy);
  const markSubject = queueMarkSubject(swarm, lane);
  const stored = await markOf(streams, target, route.stream, markSubject, { kind: "queue", sources: [legacy] });
  const legacyInfo = await streams.info(legacy);
  const base = { resource: "queue" as const, swarm, target, source: legacyInfo === undefined ? undefined : legacy };
  const pending = stored?.mark.status === "pending" ? stored : undefined;

  if (legacyInfo === undefined || (pending === undefined && legacyInfo.state.messages === 0)) {
    if (pending !== undefined) {
      await complete(streams, target, markSubject, { ...pending.mark, status: "complete", copied: 0, skipped: 0 }, pending.seq);
      return { ...base, outcome: "moved", copied: 0, skipped: 0, total: 0 };
    }
    return { ...base, outcome: stored === undefined ? "nothing-to-move" : "already-complete", copied: 0, skipped: 0, total: 0 };
  }

  const consumerName = pending?.mark.consumer ?? (await streams.legacyQueue(legacy, name, legacyQueueConsumerName(name)));
  let startSeq: number;
  let markSeq: number;
  let copies = new Set<number>();
  if (pending === undefined) {
    startSeq = legacyInfo.state.last_seq;
    markSeq = await writeMark(js, markSubject, { version: 1, kind: "queue", status: "pending", source: legacy, consumer: consumerName, startSeq }, stored?.seq ?? 0);
  } else {
    startSeq = pending.mark.startSeq ?? 0;
    markSeq = pending.seq;
    copies = new Set((await copiesIn(streams, target, legacy, pending.seq, () => undefined)).keys());
  }

  let consumer: Consumer;
  let ackWaitMs: number;
  try {
    consumer = await js.consumers.get(legacy, consumerName);
    ackWaitMs = ((await jsm.consumers.info(legacy, consumerName)).config.ack_wait ?? 30_000_000_000) / 1_000_000;
  } catch (error) {
    throw busFailure(error, "binding the legacy queue consumer");
  }
  // A repeat waits for items a killed run had taken: the legacy consumer hands them out again after its ack wait.
  const heldUntil = pending === undefined ? 0 : Date.now() + ackWaitMs + 1_000;
  const total = legacyInfo.state.messages;
  let copied = 0;
  let skipped = 0;
  let emptyPulls = 0;
  for (;;) {
    let info;
    try {
      info = await jsm.consumers.info(legacy, consumerName);
    } catch (error) {
      throw busFailure(error, "reading the legacy queue consumer");
    }
    if (info.num_pending === 0 && info.num_ack_pending === 0) break;
    // Ask for what is there (a pull for more would wait out its expiry): undelivered items, else nakked or held ones.
    const batch = await takeLegacy(consumer, Math.min(QUEUE_BATCH, info.num_pending > 0 ? info.num_pending : info.num_ack_pending));
    if (batch.length === 0) {
      // Undelivered items the consumer would still hand out (each empty pull waited a second).
      const maxAckPending = info.config.max_ack_pending ?? 0;
      const blocked = maxAckPending > 0 && info.num_ack_pending >= maxAckPending;
      if (info.num_pending > 0 && !blocked && ++emptyPulls < 10) continue;
      if (Date.now() < heldUntil) continue;
      throw new MigrationRefusedError(BUS_TEXTS.legacyQueueUndelivered);
    }
    emptyPulls = 0;
    pause.reached("migration-after-take", `queue:${batch[0]!.seq}`);
    const firstBad = batch.findIndex((m) => m.seq > startSeq || m.subject !== name || foreignEvent(m, swarm));
    const movable = firstBad < 0 ? batch : batch.slice(0, firstBad);
    try {
      await Promise.all(
        movable.map(async (m) => {
          if (copies.has(m.seq)) return;
          const h = copyHeaders(m.headers, {
            [BUS_HEADERS.priorAttempts]: String(priorAttemptsOf(m) + m.info.deliveryCount - 1),
            [BUS_HEADERS.migratedFrom]: migratedFromValue(legacy, m.seq),
          });
          await publishCopy(streams, route.offerSubject, m.data, h, migrationMsgId(legacy, m.seq));
        }),
      );
      if (movable.length > 0) pause.reached("migration-after-copy", `queue:${movable[0]!.seq}`);
      await Promise.all(movable.map((m) => m.ackAck()));
    } catch (error) {
      for (const m of batch) m.nak();
      throw busFailure(error, "copying legacy queue work");
    }
    for (const m of movable) {
      if (copies.has(m.seq)) skipped += 1;
      else copied += 1;
      await stepDone(params, signal, { copied, skipped, total });
    }
    if (firstBad >= 0) {
      for (const m of batch.slice(firstBad)) m.nak();
      throw new MigrationRefusedError(BUS_TEXTS.legacyQueueChanged);
    }
  }
  pause.reached("migration-before-complete", `queue:${swarm}`);
  await complete(streams, target, markSubject, { version: 1, kind: "queue", status: "complete", source: legacy, consumer: consumerName, startSeq, copied, skipped }, markSeq);
  return { ...base, outcome: "moved", copied, skipped, total };
}

/** Moves the swarm's letters (`dead.<swarm>`) from the legacy dead-letter stream into its own. */
export async function migrateDead(ctx: MigrationContext, params: MigrateDeadParams, signal?: AbortSignal): Promise<MigrationResult> {
  const { swarm } = params;
  guard(ctx, swarm);
  const pause = params.pausePoints ?? noPausePoints;
  const { streams } = ctx;
  const jsm = streams.jsm();
  const js = streams.js();
  const target = await streams.swarmStream(deadStream(swarm));
  const markSubject = deadMarkSubject(swarm);
  const sourceSubject = legacyDeadSubject(swarm);
  const stored = await markOf(streams, target, deadStream(swarm), markSubject, DEAD_MARK_SOURCES);
  const pending = stored?.mark.status === "pending" ? stored : undefined;

  let source: string | undefined;
  let startSeq: number;
  let markSeq: number;
  let copies = new Map<number, StoredMsg>();
  if (pending !== undefined) {
    source = pending.mark.source;
    startSeq = pending.mark.startSeq ?? 0;
    markSeq = pending.seq;
    copies = await copiesIn(streams, target, source, pending.seq, () => undefined);
  } else {
    source = await streams.existingLegacyDead();
    const info = source === undefined ? undefined : await streams.info(source, sourceSubject);
    const count = info?.state.subjects?.[sourceSubject] ?? 0;
    if (source === undefined || info === undefined || count === 0) {
      return { resource: "dead", swarm, target, source, outcome: stored === undefined ? "nothing-to-move" : "already-complete", copied: 0, skipped: 0, total: 0 };
    }
    startSeq = info.state.last_seq;
    markSeq = await writeMark(js, markSubject, { version: 1, kind: "dead", status: "pending", source, startSeq }, stored?.seq ?? 0);
  }

  const letters = (await streams.info(source)) === undefined ? [] : await allMessages(jsm, source, sourceSubject, 1, startSeq);
  const total = letters.length;
  let copied = 0;
  let skipped = 0;
  for (const letter of letters) {
    const copy = copies.get(letter.seq);
    if (copy !== undefined) {
      if (!Buffer.from(copy.data).equals(Buffer.from(letter.data))) throw new MigrationRefusedError(BUS_OWN_TEXTS.deadCopyDiffers(letter.seq));
      skipped += 1;
    } else {
      const h = copyHeaders(letter.header, { [BUS_HEADERS.migratedFrom]: migratedFromValue(source, letter.seq) });
      await publishCopy(streams, deadLetterSubject(swarm), letter.data, h, migrationMsgId(source, letter.seq));
      pause.reached("migration-after-copy", `dead:${letter.seq}`);
      copied += 1;
    }
    await stepDone(params, signal, { copied, skipped, total });
  }
  if (letters.length > 0) await purge(streams, source, { filter: sourceSubject, seq: startSeq + 1 });
  pause.reached("migration-before-complete", `dead:${swarm}`);
  await complete(streams, target, markSubject, { version: 1, kind: "dead", status: "complete", source, startSeq, copied, skipped }, markSeq);
  return { resource: "dead", swarm, target, source, outcome: "moved", copied, skipped, total };
}

/** What a dead-letter mark of an earlier version may name as its source. */
const DEAD_MARK_SOURCES: AdoptableMark = { kind: "dead", sources: [GLOBAL_STREAMS.legacyDead, GLOBAL_STREAMS.dead] };

/**
 * The target's mark, once the target captures the mark's hub-only subject;
 * a mark an earlier version left under the swarm's prefix is adopted first
 * when it names this resource's legacy source (migration-mark.ts).
 */
async function markOf(streams: BusStreams, target: string, resource: SwarmStream, subject: string, expected: AdoptableMark) {
  await streams.ensureMarkSubject(target, resource);
  const adopted = await adoptLegacyMark(streams.js(), streams.jsm(), target, subject, expected);
  return adopted ?? (await readMark(streams.jsm(), target, subject));
}

/**
 * Provisioning: makes a swarm's queue, state or dead-letter stream capture
 * its mark's hub-only subject, and adopts a mark an earlier version left on
 * it (so members see a migration that was pending across an upgrade).
 */
export async function prepareMarkSubject(streams: BusStreams, target: string, resource: SwarmStream): Promise<void> {
  if (resource.markSubject === undefined) return;
  const expected: AdoptableMark =
    resource.kind === "dead"
      ? DEAD_MARK_SOURCES
      : resource.kind === "queue"
        ? { kind: "queue", sources: [legacyQueueStreamName(`swarm.${resource.swarm}.ready.${resource.lane}`)] }
        : { kind: "state", sources: [`KV_${resource.bucket}`] };
  await markOf(streams, target, resource, resource.markSubject, expected);
}

function guard(ctx: MigrationContext, swarm: string): void {
  if (!ctx.provisioning) throw new BusPermissionError(BUS_TEXTS.migrationNeedsProvisioning);
  if (!ctx.scoped) throw new MigrationRefusedError(BUS_TEXTS.migrationNotEnabled);
  const problem = swarmNameProblem(swarm);
  if (problem !== undefined) throw new BusRefusedError(BUS_OWN_TEXTS.invalidSwarm(problem));
}

/** Marks the migration complete (only if its pending mark is still the latest) and drops older marks. */
async function complete(streams: BusStreams, target: string, subject: string, mark: MigrationMark, pendingSeq: number): Promise<void> {
  await writeMark(streams.js(), subject, mark, pendingSeq);
  await pruneMarks(streams.jsm(), target, subject);
}

/**
 * The target's copies of `source` messages, by source sequence, from the
 * pending mark on (a migration copies only after writing its mark);
 * `other` sees every message that is not a copy.
 */
async function copiesIn(streams: BusStreams, target: string, source: string, fromSeq: number, other: (message: StoredMsg) => void): Promise<Map<number, StoredMsg>> {
  const info = await streams.info(target);
  const copies = new Map<number, StoredMsg>();
  if (info === undefined || info.state.messages === 0) return copies;
  await scanBySequence(streams.jsm(), target, Math.max(fromSeq, info.state.first_seq), info.state.last_seq, (message) => {
    const seq = migratedSourceSeq(message.header?.get(BUS_HEADERS.migratedFrom) || undefined, source);
    if (seq === undefined) other(message);
    else copies.set(seq, message);
  });
  return copies;
}

async function publishCopy(streams: BusStreams, subject: string, data: Uint8Array, h: MsgHdrs, msgId: string): Promise<void> {
  try {
    await streams.js().publish(subject, data, { headers: h, msgID: msgId });
  } catch (error) {
    throw busFailure(error, "copying a message");
  }
}

async function purge(streams: BusStreams, stream: string, options: { filter?: string; seq: number }): Promise<void> {
  try {
    await streams.jsm().streams.purge(stream, options);
  } catch (error) {
    throw busFailure(error, "removing migrated messages from their source");
  }
}

/** Pulls up to `max` legacy items, waiting at most a second. */
async function takeLegacy(consumer: Consumer, max: number): Promise<JsMsg[]> {
  const out: JsMsg[] = [];
  try {
    const messages = await consumer.fetch({ max_messages: Math.max(1, max), expires: 1_000 });
    for await (const message of messages) out.push(message);
  } catch (error) {
    throw busFailure(error, "taking legacy queue work");
  }
  return out;
}

/** A legacy item whose event names another swarm. */
function foreignEvent(message: JsMsg, swarm: string): boolean {
  const event = decodeEvent(message.data);
  return event !== undefined && event.swarm !== undefined && event.swarm !== swarm;
}

/** The source's headers minus JetStream's own (`Nats-*`), plus `extra`. */
function copyHeaders(source: MsgHdrs | undefined, extra: Record<string, string>): MsgHdrs {
  const h = natsHeaders();
  for (const key of source?.keys() ?? []) {
    if (/^nats-/i.test(key) || key in extra) continue;
    for (const value of source!.values(key)) h.append(key, value);
  }
  for (const [key, value] of Object.entries(extra)) h.set(key, value);
  return h;
}

function summarize(revisions: readonly StoredMsg[]): RecordedRevisions {
  return summarizeSeqs(revisions.map((m) => m.seq));
}

function summarizeSeqs(seqs: readonly number[]): RecordedRevisions {
  const sorted = [...seqs].sort((a, b) => a - b);
  return { count: sorted.length, last: sorted.at(-1) ?? 0, digest: createHash("sha256").update(sorted.join(",")).digest("hex").slice(0, 32) };
}

function sameRevisions(a: RecordedRevisions, b: RecordedRevisions): boolean {
  return a.count === b.count && a.last === b.last && a.digest === b.digest;
}

function sameKeys(recorded: readonly string[] | undefined, owned: readonly string[]): boolean {
  return recorded !== undefined && recorded.length === owned.length && recorded.every((k, i) => k === owned[i]);
}

async function eachLimited<T>(items: readonly T[], limit: number, run: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await run(items[next++]!);
    }),
  );
}

