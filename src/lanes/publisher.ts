import { randomBytes } from "node:crypto";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { JetStreamRejectedError } from "../nats/index.js";
import { contentHash, decodeEnvelope, encodeEnvelope, recordOf, type Envelope } from "./envelope.js";
import { LaneError } from "./errors.js";
import { laneErrorOf, type LaneStore } from "./lane-store.js";
import { recordSubject, reservationKey } from "./names.js";
import type { Namespace } from "./namespace.js";
import type { LaneRegistry } from "./registry.js";
import type { LaneRecord, Publication } from "./types.js";

/**
 * Publication with reservations: the specification's protocol, step by step.
 *
 * 1. Reserve: the key (lane, project, id) gets a KV entry holding the hash
 *    of the publication's content and a random generation (`kv.create`:
 *    only if absent). An existing reservation with the same hash is resumed
 *    with its generation; one with another hash is `lane_conflict`.
 * 2. Append: the envelope (content, project, lane, the reservation's
 *    `created_at` and generation) is published to the key's own subject
 *    with the generation as message id and an expected last subject
 *    sequence of 0, so a key holds at most one retained record however
 *    long ago it was published (beyond the duplicate window).
 * 3. Read back: the acknowledged sequence is read and must hold exactly the
 *    envelope on exactly the subject — a message-id duplicate is never
 *    taken as proof. When the subject already holds a record, that record
 *    is read and compared: the same content is a duplicate, other content
 *    `lane_conflict`.
 * 4. Recheck: the reservation must still be the one of step 1; an expired
 *    or replaced reservation fails explicitly (the record may exist:
 *    retrying with the same id resolves it).
 *
 * That is four broker round trips per new record (reserve, append, read
 * back, recheck); the reservation is read in step 1 only when the create
 * finds one already there (a retry).
 * Keys become reusable once both the reservation (kept for the
 * namespace's retention) and the record have expired.
 */

/**
 * Publications one process carries through the protocol at once; the
 * others wait their turn in arrival order. Enough to keep the broker busy
 * (each is a round trip at a time), few enough that 64 batches of 128 do
 * not hold 8,192 publications' state at once (which made the process
 * spend a third of its time collecting garbage) and that earlier calls
 * finish first instead of every call finishing last.
 */
export const MAX_PUBLISHING = 256;

/** Fault-injection points of publication (see src/fault-injection). */
export const PUBLISH_PAUSE_POINTS = ["publish-after-reserve", "publish-after-append"] as const;

interface Reservation {
  readonly hash: string;
  readonly generation: string;
  readonly createdAt: number;
  readonly revision: number;
}

export interface PublishOutcome {
  readonly record: LaneRecord;
  /** True when the record existed before this request (a repeat of an earlier publication). */
  readonly duplicate: boolean;
}

/** One record's outcome in a batch: its record, or its own failure. */
export type BatchOutcome = { readonly published: PublishOutcome } | { readonly error: unknown };

export class Publisher {
  #publishing = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: Namespace,
    private readonly registry: LaneRegistry,
    private readonly pause: PausePoints = noPausePoints,
    private readonly now: () => number = Date.now,
  ) {}

  async publish(project: string, lane: string, publication: Publication, signal?: AbortSignal): Promise<PublishOutcome> {
    this.registry.require(project, lane, "publish");
    this.#checkPayload(publication);
    return this.#publish(project, lane, publication, signal);
  }

  /**
   * Up to 128 records, each through the whole protocol, pipelined; each
   * has its own outcome in request order.
   */
  async publishBatch(project: string, lane: string, publications: readonly Publication[], signal?: AbortSignal): Promise<BatchOutcome[]> {
    this.registry.require(project, lane, "publish");
    if (publications.length === 0 || publications.length > 128) {
      throw new LaneError("lane_invalid", `a batch holds 1 to 128 records, got ${publications.length}`);
    }
    const ids = new Set(publications.map((p) => p.id));
    if (ids.size !== publications.length) throw new LaneError("lane_invalid", "the ids of a batch's records must be distinct");
    return Promise.all(
      publications.map(async (publication): Promise<BatchOutcome> => {
        try {
          this.#checkPayload(publication);
          return { published: await this.#publish(project, lane, publication, signal) };
        } catch (error) {
          return { error };
        }
      }),
    );
  }

  #checkPayload(publication: Publication): void {
    const max = this.registry.bounds.maxPayload;
    if (publication.payload.byteLength > max) {
      throw new LaneError("lane_invalid", `the payload is ${publication.payload.byteLength} bytes; this namespace accepts at most ${max}`);
    }
  }

  async #publish(project: string, lane: string, publication: Publication, signal?: AbortSignal): Promise<PublishOutcome> {
    if (this.#publishing >= MAX_PUBLISHING) {
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
      // The turn passed on to this publication: it is counted already.
    } else {
      this.#publishing++;
    }
    try {
      // A call that ended while this waited does no broker work.
      if (signal?.aborted) throw laneErrorOf(signal.reason, "publishing", signal);
      return await this.#protocol(project, lane, publication, signal);
    } finally {
      const next = this.#waiting.shift();
      if (next !== undefined) next();
      else this.#publishing--;
    }
  }

  async #protocol(project: string, lane: string, publication: Publication, signal?: AbortSignal): Promise<PublishOutcome> {
    const ns = this.namespace.config.namespace;
    const stream = this.namespace.streams.get(lane)!;
    const key = reservationKey(lane, project, publication.id);
    const subject = recordSubject(ns, lane, project, publication.id);
    const hash = contentHash(publication);

    // 1. Reserve (or resume the reservation of an earlier attempt).
    const { reservation, createdNow } = await this.#reserve(key, hash, publication.id, signal);
    this.pause.reached("publish-after-reserve", key);

    // 2. Append under the reservation's generation.
    const envelope: Envelope = { lane, project, ...publication, createdAt: reservation.createdAt, generation: reservation.generation };
    const bytes = encodeEnvelope(envelope);
    let appended: Awaited<ReturnType<LaneStore["append"]>>;
    try {
      appended = await this.store.append(subject, bytes, { msgID: reservation.generation, expectLastSubjectSequence: 0 }, signal);
    } catch (error) {
      // The broker definitely refused the record (a full stream): a
      // reservation this request just made fences nothing, so it goes.
      if (createdNow && error instanceof LaneError && error.reason === "lane_unavailable" && isRefusal(error)) {
        await this.store.kvDeleteAt(this.namespace.reservations, key, reservation.revision).catch(() => false);
      }
      throw error;
    }

    // 3. Read back what the stream holds for this key.
    let stored: { sequence: number; envelope: Envelope };
    let duplicate: boolean;
    if (appended === "subject_taken") {
      const existing = await this.store.lastOnSubject(stream, subject, signal);
      if (existing === undefined) {
        throw new LaneError("lane_unavailable", `the record of ${publication.id} left retention while it was being checked; retry with the same id`);
      }
      const found = decodeEnvelope(existing.data);
      if (found === undefined || contentHash(found) !== hash) {
        if (createdNow) await this.store.kvDeleteAt(this.namespace.reservations, key, reservation.revision).catch(() => false);
        throw conflict(publication.id);
      }
      stored = { sequence: existing.sequence, envelope: found };
      duplicate = true;
    } else {
      const readBack = await this.store.bySequence(stream, appended.sequence, signal);
      if (readBack === undefined || readBack.subject !== subject || !Buffer.from(readBack.data).equals(Buffer.from(bytes))) {
        throw new LaneError("lane_conflict", `the stream does not hold the publication of ${publication.id} at the acknowledged sequence; retry with the same id`);
      }
      stored = { sequence: appended.sequence, envelope };
      duplicate = appended.duplicate;
    }
    this.pause.reached("publish-after-append", key);

    // 4. The reservation must still be ours.
    const current = await this.#reservationAt(key, signal);
    if (current === undefined || current.generation !== reservation.generation) {
      throw new LaneError(
        "lane_conflict",
        `the reservation of ${publication.id} expired or was replaced before the publication was confirmed; retry with the same id to resolve it`,
      );
    }
    return { record: recordOf(stored.envelope, stored.sequence), duplicate };
  }

  async #reserve(key: string, hash: string, id: string, signal?: AbortSignal): Promise<{ reservation: Reservation; createdNow: boolean }> {
    for (let attempt = 0; attempt < 3; attempt++) {
      // Create first: a new key (the common case) costs one round trip; an
      // existing reservation is read only when the create finds one.
      const fresh = { hash, generation: randomHex16(), createdAt: this.now() };
      const revision = await this.store.kvCreate(
        this.namespace.reservations,
        key,
        Buffer.from(JSON.stringify({ hash: fresh.hash, generation: fresh.generation, created_at: fresh.createdAt }), "utf8"),
        signal,
      );
      if (revision !== "exists") return { reservation: { ...fresh, revision }, createdNow: true };
      const existing = await this.#reservationAt(key, signal);
      if (existing !== undefined) {
        if (existing.hash !== hash) throw conflict(id);
        return { reservation: existing, createdNow: false };
      }
      // The reservation expired between the create and the read: create again.
    }
    throw new LaneError("lane_unavailable", `the reservation of ${id} kept changing; retry with the same id`);
  }

  async #reservationAt(key: string, signal?: AbortSignal): Promise<Reservation | undefined> {
    const entry = await this.store.kvGet(this.namespace.reservations, key, signal);
    if (entry === undefined) return undefined;
    let value: { hash?: unknown; generation?: unknown; created_at?: unknown };
    try {
      value = entry.json();
    } catch {
      value = {};
    }
    if (typeof value.hash !== "string" || typeof value.generation !== "string" || typeof value.created_at !== "number") {
      throw new LaneError("lane_unavailable", "a publish reservation in the namespace is unreadable");
    }
    return { hash: value.hash, generation: value.generation, createdAt: value.created_at, revision: entry.revision };
  }
}

/** Random bytes drawn 4 KiB at a time (a system call per 256 generations instead of one each). */
let randomPool = Buffer.alloc(0);
let randomAt = 0;

/** A reservation's generation: 16 random bytes as hex. */
function randomHex16(): string {
  if (randomAt + 16 > randomPool.length) {
    randomPool = randomBytes(4096);
    randomAt = 0;
  }
  randomAt += 16;
  return randomPool.toString("hex", randomAt - 16, randomAt);
}

/** A lane_unavailable that is the broker's definite "no" (capacity), not a lost or slow connection. */
function isRefusal(error: LaneError): boolean {
  return error.cause instanceof JetStreamRejectedError;
}

function conflict(id: string): LaneError {
  return new LaneError("lane_conflict", `id ${id} is already published in this lane with a different kind, schema, payload or provenance`);
}
