import { JetStreamApiError } from "@nats-io/jetstream";
import { createInbox, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import { BrokerTimeoutError, BrokerUnavailableError } from "../nats/index.js";

/**
 * Request and reply over one long-lived reply subscription: the lane
 * store's requests on the write path (appends, key writes, direct reads),
 * answered on `<inbox>.<token>` of one wildcard subscription, matched by
 * token, each bounded by the store's operation timeout.
 *
 * nats.js's own `request` does the same over its muxed inbox, but builds a
 * promise race, a timer promise and — after every successful answer — a
 * `RequestError` with a stack trace (the rejection of its own settled
 * deferred), which with four requests per publication was a tenth of the
 * publishing process's CPU and much of its garbage. Here a request is one
 * map entry and one promise; timeouts are found by one timer that walks
 * the oldest entries (every entry has the same timeout, so the map's
 * insertion order is the order of their deadlines).
 *
 * Failures are nats.js's or the broker module's own error types, so the
 * store classifies them as before: no responders and a lost connection are
 * `BrokerUnavailableError`, an unanswered request `BrokerTimeoutError`, a
 * JetStream API error `JetStreamApiError` (with its `err_code`).
 *
 * One pipe serves one connection: a new connection (the broker reconnects
 * by opening another) gets a new pipe, and the requests pending on the old
 * one fail as unavailable when it closes.
 */

interface Outgoing {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: MsgHdrs | undefined;
  readonly token: string;
}

interface Pending {
  readonly resolve: (message: Msg) => void;
  readonly reject: (error: unknown) => void;
  /** performance.now() after which the request has timed out. */
  readonly due: number;
}

/** A JetStream publish acknowledgement. */
export interface PubAck {
  readonly seq: number;
  readonly duplicate: boolean;
}

/** One stored message as a direct or leader read returns it. */
export interface StoredMessage {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** The broker's store time, epoch ms. */
  readonly time: number;
  /** The message's `KV-Operation` header (KV buckets), when it has one. */
  readonly operation: string | undefined;
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();
const EMPTY = new Uint8Array(0);

export class BrokerRequests {
  readonly #prefix: string;
  readonly #pending = new Map<string, Pending>();
  #next = 0;
  #sweeper: NodeJS.Timeout | undefined;
  /** Requests made since the last send: sent together once the event loop's current phase is over. */
  #outgoing: Outgoing[] = [];
  /** Set once the reply subscription ended: every later request fails with it. */
  #ended: unknown;

  constructor(
    private readonly nc: NatsConnection,
    inboxPrefix: string | undefined,
    private readonly timeoutMs: number,
  ) {
    const inbox = createInbox(inboxPrefix);
    this.#prefix = `${inbox}.`;
    const subscription = nc.subscribe(`${inbox}.*`, {
      callback: (error, message) => {
        if (error) return this.#end(error);
        this.#answer(message);
      },
    });
    void subscription.closed.then(
      () => this.#end(new BrokerUnavailableError("connection_closed")),
      (error: unknown) => this.#end(error),
    );
  }

  /** Sends `data` to `subject` and resolves with the one reply. */
  request(subject: string, data: Uint8Array, headers?: MsgHdrs): Promise<Msg> {
    if (this.#ended !== undefined) return Promise.reject(this.#ended);
    const token = (this.#next++).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      this.#pending.set(token, { resolve, reject, due: performance.now() + this.timeoutMs });
      if (this.#outgoing.length === 0) setImmediate(this.#send);
      this.#outgoing.push({ subject, data, headers, token });
      this.#sweeper ??= this.#arm(this.timeoutMs);
    });
  }

  /**
   * Hands the requests made meanwhile to the connection in one go: nats.js
   * writes what it was given before its next microtask as one socket write,
   * and requests made from the callbacks of one read of the socket would
   * otherwise each be written alone (a system call per request).
   */
  readonly #send = (): void => {
    const outgoing = this.#outgoing;
    this.#outgoing = [];
    for (const { subject, data, headers, token } of outgoing) {
      const pending = this.#pending.get(token);
      if (pending === undefined) continue; // failed meanwhile (the connection ended)
      try {
        this.nc.publish(subject, data, headers === undefined ? { reply: this.#prefix + token } : { reply: this.#prefix + token, headers });
      } catch (error) {
        this.#pending.delete(token);
        pending.reject(error);
      }
    }
  };

  /**
   * A JetStream publish (a stream record, or a KV write: its subject under
   * `$KV.<bucket>.`) with its headers; resolves with the acknowledgement and
   * rejects with the JetStream API error the broker answered.
   */
  async publish(subject: string, data: Uint8Array, options: { msgID?: string; expectLastSubjectSequence?: number; operation?: string }): Promise<PubAck> {
    const headers = natsHeaders();
    if (options.msgID !== undefined) headers.set("Nats-Msg-Id", options.msgID);
    if (options.expectLastSubjectSequence !== undefined) headers.set("Nats-Expected-Last-Subject-Sequence", String(options.expectLastSubjectSequence));
    if (options.operation !== undefined) headers.set("KV-Operation", options.operation);
    const reply = await this.request(subject, data, headers);
    const ack = parseJson(reply) as { stream?: unknown; seq?: unknown; duplicate?: unknown; error?: { code: number; err_code: number; description: string } };
    if (ack.error !== undefined) throw new JetStreamApiError(ack.error);
    if (typeof ack.stream !== "string" || typeof ack.seq !== "number") throw new Error("the message broker answered a publish with an invalid acknowledgement");
    return { seq: ack.seq, duplicate: ack.duplicate === true };
  }

  /**
   * A direct get (`$JS.API.DIRECT.GET`, any replica may answer; the stream
   * must allow direct reads): by sequence, or the last message on a
   * subject. Null when there is no such message.
   */
  async directGet(stream: string, query: { seq: number } | { last_by_subj: string }): Promise<StoredMessage | null> {
    const reply =
      "seq" in query
        ? await this.request(`$JS.API.DIRECT.GET.${stream}`, encoder.encode(JSON.stringify(query)))
        : await this.request(`$JS.API.DIRECT.GET.${stream}.${query.last_by_subj}`, EMPTY);
    const headers = reply.headers;
    const status = headers?.code ?? 0;
    if (status === 404) return null;
    if (headers === undefined || status !== 0) throw statusError(status);
    const seq = Number(headers.get("Nats-Sequence"));
    return {
      seq,
      subject: headers.get("Nats-Subject"),
      data: reply.data,
      time: Date.parse(headers.get("Nats-Time-Stamp")),
      operation: headers.get("KV-Operation") || undefined,
    };
  }

  /** A read through the stream's leader (`$JS.API.STREAM.MSG.GET`). Null when there is no such message. */
  async leaderGet(stream: string, query: { seq: number } | { last_by_subj: string }): Promise<StoredMessage | null> {
    const reply = await this.request(`$JS.API.STREAM.MSG.GET.${stream}`, encoder.encode(JSON.stringify(query)));
    const answer = parseJson(reply) as {
      message?: { subject: string; seq: number; data?: string; hdrs?: string; time: string };
      error?: { code: number; err_code: number; description: string };
    };
    if (answer.error !== undefined) {
      // 10037: no message found.
      if (answer.error.err_code === 10037) return null;
      throw new JetStreamApiError(answer.error);
    }
    const message = answer.message;
    if (message === undefined) throw new Error("the message broker answered a read with no message");
    const header = message.hdrs ? Buffer.from(message.hdrs, "base64").toString("utf8") : "";
    return {
      seq: message.seq,
      subject: message.subject,
      data: message.data ? new Uint8Array(Buffer.from(message.data, "base64")) : EMPTY,
      time: Date.parse(message.time),
      operation: /(?:^|\r\n)KV-Operation:\s*([A-Z]+)/i.exec(header)?.[1]?.toUpperCase(),
    };
  }

  #answer(message: Msg): void {
    const token = message.subject.slice(this.#prefix.length);
    const pending = this.#pending.get(token);
    if (pending === undefined) return; // timed out already
    this.#pending.delete(token);
    // No responders: a status 503 with no body.
    if (message.headers?.code === 503 && message.data.length === 0) pending.reject(new BrokerUnavailableError("no_responders"));
    else pending.resolve(message);
  }

  #arm(ms: number): NodeJS.Timeout {
    const timer = setTimeout(() => this.#sweep(), Math.max(1, ms));
    timer.unref();
    return timer;
  }

  /** Fails the requests whose timeout passed (the oldest first) and waits for the next oldest. */
  #sweep(): void {
    this.#sweeper = undefined;
    const now = performance.now();
    for (const [token, pending] of this.#pending) {
      if (pending.due > now) {
        this.#sweeper = this.#arm(pending.due - now + 1);
        return;
      }
      this.#pending.delete(token);
      pending.reject(new BrokerTimeoutError());
    }
  }

  #end(error: unknown): void {
    this.#ended ??= error;
    if (this.#sweeper !== undefined) clearTimeout(this.#sweeper);
    this.#sweeper = undefined;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) p.reject(this.#ended);
  }
}

function parseJson(message: Msg): unknown {
  return JSON.parse(decoder.decode(message.data));
}

/** A read answered with a status other than 404: unavailable (503) or not answered in time (408); anything else is unexpected (the broker's text is left out). */
function statusError(status: number): Error {
  if (status === 503) return new BrokerUnavailableError("no_responders");
  if (status === 408) return new BrokerTimeoutError();
  return new Error(`the message broker answered a read with status ${status}`);
}
