/**
 * Publishing and reading events (and dead letters, which are events on
 * the dead-letter subjects: dead-letters.ts).
 *
 * A publish waits for the stream's acknowledgement. Where the subject
 * table gives an unscoped publish two subjects (`legacy.swarm.…` first,
 * then the original), the first one the server accepts is used and
 * remembered: a credential that does not allow `legacy.swarm.>` (a
 * permissions violation), or a legacy events stream not yet updated to
 * capture it (no responders), keeps the original subject, as the
 * specification says.
 *
 * Reads page through a stream with the stream message get, from a
 * sequence, over one or more filters, in sequence order; subjects are
 * given back in their logical form, and reserved mark subjects are
 * skipped.
 */
import type { MsgHdrs } from "@nats-io/transport-node";
import type { PubAck, StoredMsg } from "@nats-io/jetstream";
import { BrokerPermissionError, BrokerUnavailableError, classifyNatsError } from "../nats/index.js";
import { busFailure } from "./errors.js";
import { isMarkSubject } from "./names.js";
import { readMessages } from "./stream-reader.js";
import type { DeadLetterOptions } from "./dead-letters.js";
import { decodeEvent, logicalSubject, type BusEvent } from "./subject-map.js";
import type { BusStreams } from "./streams.js";

/** A published event's place. */
export interface Published {
  readonly stream: string;
  readonly seq: number;
  readonly duplicate: boolean;
  /** The physical subject it was published on. */
  readonly subject: string;
}

/** A stored event or dead letter. */
export interface BusMessage {
  readonly seq: number;
  /** The subject as callers name it (`swarm.rig.execution.started`, `dead.rig`). */
  readonly subject: string;
  /** The subject it is stored on. */
  readonly storedSubject: string;
  readonly data: Uint8Array;
  /** The event, or undefined when the bytes are not a JSON object. */
  readonly event: BusEvent | undefined;
  readonly time: Date;
  readonly headers: MsgHdrs | undefined;
}

export interface ReadOptions {
  /** First sequence to read. Default 1. */
  readonly fromSeq?: number;
  /** Most messages to return. Default 100, at most 1 000. */
  readonly limit?: number;
}

/** An event to publish and where. */
export interface PublishParams extends DeadLetterOptions {
  /**
   * The logical subject, a row of the subject table (subject-map.ts),
   * without wildcards: an event subject (`swarm.<swarm>.execution.<rest>`)
   * or a dead-letter subject (`dead.<swarm>`, the only one `reason`
   * applies to). Scoped, it names the bus's swarm (a swarm's bus refuses
   * another).
   */
  readonly subject: string;
  /** The event, a JSON object; scoped, its `swarm` field, when present, is the subject's swarm. */
  readonly event: BusEvent;
}

/** Which stored events to read. */
export interface ReadEventsParams extends ReadOptions {
  /**
   * A subject or wildcard pattern in logical form (such as
   * `swarm.*.execution.>`, or `dead.<swarm>`); scoped, it names one swarm
   * (a swarm's bus reads its own swarm).
   */
  readonly pattern: string;
}

export interface ReadPage {
  readonly messages: readonly BusMessage[];
  /** Where the next page starts. */
  readonly nextSeq: number;
}

/**
 * Remembers which of a rule's subjects this connection's credential may
 * publish (a rule lists the preferred one first).
 */
export class PublishPreference {
  readonly #refused = new Set<string>();

  /** The candidates worth trying, preferred first (always at least the last one). */
  candidates(subjects: readonly string[]): readonly string[] {
    const usable = subjects.filter((s, i) => i === subjects.length - 1 || !this.#refused.has(ruleKey(s)));
    return usable;
  }

  refuse(subject: string): void {
    this.#refused.add(ruleKey(subject));
  }
}

/** Publishes `data` on the first of `subjects` the server accepts. */
export async function publishFirst(
  streams: BusStreams,
  preference: PublishPreference,
  subjects: readonly string[],
  data: Uint8Array,
  options: { headers?: MsgHdrs; msgId?: string } = {},
): Promise<Published> {
  const candidates = preference.candidates(subjects);
  for (let i = 0; i < candidates.length; i++) {
    const subject = candidates[i]!;
    let ack: PubAck;
    try {
      ack = await streams.js().publish(subject, data, {
        ...(options.headers === undefined ? {} : { headers: options.headers }),
        ...(options.msgId === undefined ? {} : { msgID: options.msgId }),
      });
    } catch (error) {
      const failure = classifyNatsError(error);
      const fallBack = failure instanceof BrokerPermissionError || (failure instanceof BrokerUnavailableError && failure.reason === "no_responders");
      if (fallBack && i < candidates.length - 1) {
        preference.refuse(subject);
        continue;
      }
      throw busFailure(error, "publishing an event");
    }
    return { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate, subject };
  }
  throw busFailure(new Error("no subject"), "publishing an event");
}

/** A page of stored messages of `stream` matching `filters`. */
export async function readPage(streams: BusStreams, stream: string, filters: readonly string[], options: ReadOptions = {}): Promise<ReadPage> {
  const fromSeq = Math.max(1, Math.floor(options.fromSeq ?? 1));
  const limit = Math.min(1_000, Math.max(1, Math.floor(options.limit ?? 100)));
  const stored = await readMessages(streams.jsm(), stream, filters, fromSeq, limit, isMarkSubject);
  const messages = stored.map(toBusMessage);
  return { messages, nextSeq: messages.length === 0 ? fromSeq : messages.at(-1)!.seq + 1 };
}

export function toBusMessage(message: StoredMsg): BusMessage {
  let event: BusEvent | undefined | null = null;
  return {
    seq: message.seq,
    subject: logicalSubject(message.subject),
    storedSubject: message.subject,
    data: message.data,
    get event() {
      if (event === null) event = decodeEvent(message.data);
      return event;
    },
    time: message.time,
    headers: message.header,
  };
}

/** `legacy.swarm.rig.execution.started` and `legacy.swarm.demo.execution.x` share one permission decision. */
function ruleKey(subject: string): string {
  return subject.split(".")[0] ?? subject;
}

