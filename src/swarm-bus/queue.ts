/**
 * A work queue: offers in, work items out, at least once.
 *
 * A scoped lane queue is the swarm's lane queue stream (a JetStream work
 * queue): offers publish to `swarm.<swarm>.queue.<lane>.work` and wait for
 * the stream's acknowledgement; takers pull from the durable consumer
 * `<lane>` (the hub provisions it; a member binds it with CONSUMER.INFO
 * and pulls with CONSUMER.MSG.NEXT, the calls its grant allows). A taken
 * item is held for the consumer's ack wait: {@link WorkItem.ack} removes
 * it (and waits for the server to confirm), {@link WorkItem.nak} hands it
 * out again, an item neither acked nor nakked is handed out again after
 * the ack wait. A nak is sent as a request the server answers once it
 * processed it, and the queue's next take waits for that answer: a take
 * after a nak sees the nakked item (when it is due), whatever else the
 * server was busy with. Each delivery counts as an attempt; an item migrated from a
 * legacy queue keeps the attempts it had there (`Agentihooks-Prior-Attempts`),
 * so {@link WorkItem.attempt} is the item's whole delivery count.
 *
 * An unscoped bus reaches the legacy queue of the same name with the same
 * calls.
 */
import type { Consumer, ConsumerMessages, JsMsg, PubAck } from "@nats-io/jetstream";
import { busFailure } from "./errors.js";
import { BUS_HEADERS } from "./names.js";
import { checkEventSwarm, decodeEvent, encodeEvent, type BusEvent, type BusMode } from "./subject-map.js";
import type { BusStreams } from "./streams.js";

/** What an offer returns. */
export interface OfferAck {
  /** The item's stream sequence. */
  readonly seq: number;
  /** True when the server deduplicated the offer (same `msgId` within the duplicate window). */
  readonly duplicate: boolean;
}

export interface OfferOptions {
  /** A message id: the server keeps one item per id within the stream's duplicate window (2 minutes). */
  readonly msgId?: string;
}

/** An offer: the event and its optional message id. */
export interface OfferParams extends OfferOptions {
  /** The work item, a JSON object; scoped, its `swarm` field, when present, is the queue's swarm. */
  readonly event: BusEvent;
}

export interface TakeOptions {
  /** How long to wait for an item. Default 5 000 ms, at least 1 000. */
  readonly maxWaitMs?: number;
}

/** A batch take: how many items, and how long to wait for them. */
export interface TakeBatchParams extends TakeOptions {
  /** Most items to take, a whole number of at least 1 (a fraction is rounded down, less than 1 takes 1). */
  readonly max: number;
}

/** How long a take waits for the server to confirm an earlier nak of the same queue. */
const NAK_CONFIRM_MS = 5_000;

/** Sends a nak and resolves once the server processed it (or gave no answer in time). */
type ConfirmedNak = (message: JsMsg, payload: string) => void;

/** One delivery of a work item. */
export class WorkItem {
  readonly #message: JsMsg;
  readonly #nak: ConfirmedNak | undefined;
  #event: BusEvent | undefined | null = null;

  /** @internal Made by the queue. */
  constructor(
    message: JsMsg,
    /** The queue's logical name. */
    readonly queue: string,
    nak?: ConfirmedNak,
  ) {
    this.#message = message;
    this.#nak = nak;
  }

  /** The item's stream sequence (its identity while it is queued). */
  get seq(): number {
    return this.#message.seq;
  }

  /** The offered bytes. */
  get data(): Uint8Array {
    return this.#message.data;
  }

  /** The offered event, or undefined when the bytes are not a JSON object. */
  get event(): BusEvent | undefined {
    if (this.#event === null) this.#event = decodeEvent(this.#message.data);
    return this.#event;
  }

  /** Deliveries by this queue, this one included. */
  get deliveryCount(): number {
    return this.#message.info.deliveryCount;
  }

  /** Deliveries the item had in a legacy queue before it was migrated here. */
  get priorAttempts(): number {
    return priorAttemptsOf(this.#message);
  }

  /** The delivery attempt this is: 1 for the first delivery ever, counting a migrated item's legacy deliveries. */
  get attempt(): number {
    return this.priorAttempts + this.deliveryCount;
  }

  /** Done: removes the item, once the server confirms. */
  async ack(): Promise<void> {
    let confirmed: boolean;
    try {
      confirmed = await this.#message.ackAck();
    } catch (error) {
      throw busFailure(error, "acknowledging a work item");
    }
    if (!confirmed) throw busFailure(new Error("ack not confirmed"), "acknowledging a work item");
  }

  /** Not done: hand the item out again (after `delayMs`, if given). The queue's next take waits until the server processed it. */
  nak(delayMs?: number): void {
    if (this.#nak === undefined || replyOf(this.#message) === undefined) {
      this.#message.nak(delayMs);
      return;
    }
    const delay = delayMs !== undefined && delayMs > 0 ? ` ${JSON.stringify({ delay: Math.floor(delayMs) * 1_000_000 })}` : "";
    this.#nak(this.#message, `-NAK${delay}`);
  }

  /** Still working: restarts the ack wait. */
  inProgress(): void {
    this.#message.working();
  }

  /** Never hand this item out again. */
  term(): void {
    this.#message.term();
  }
}

/** The prior-attempts header of a message (0 when absent or malformed). */
export function priorAttemptsOf(message: Pick<JsMsg, "headers">): number {
  const value = Number(message.headers?.get(BUS_HEADERS.priorAttempts) ?? "0");
  return Number.isSafeInteger(value) && value > 0 ? value : 0;
}

/** What the bus resolved for a queue. */
export interface QueueBinding {
  readonly mode: BusMode;
  /** The logical name (`swarm.<swarm>.ready.<lane>`, or the legacy queue's name). */
  readonly name: string;
  /** The swarm whose `swarm` field offers must carry (scoped mode). */
  readonly swarm: string | undefined;
  readonly stream: string;
  readonly consumer: string;
  readonly offerSubject: string;
}

export class WorkQueue {
  readonly #streams: BusStreams;
  readonly #binding: QueueBinding;
  #consumer: { consumer: Consumer; js: unknown } | undefined;
  /** Naks sent and not yet confirmed by the server. */
  readonly #naks = new Set<Promise<void>>();
  /** Items whose acknowledgement (of any kind) was sent, so a second one is not. */
  readonly #settled = new WeakSet<JsMsg>();
  readonly #confirmNak: ConfirmedNak = (message, payload) => {
    if (this.#settled.has(message)) return;
    this.#settled.add(message);
    let sent: Promise<void>;
    try {
      sent = this.#streams
        .nats()
        .request(replyOf(message)!, payload, { timeout: NAK_CONFIRM_MS })
        .then(
          () => undefined,
          () => undefined,
        );
    } catch {
      return;
    }
    // Marked done on the message too, so a later ack or nak of it is not sent.
    (message as { didAck?: boolean }).didAck = true;
    const pending = sent.finally(() => this.#naks.delete(pending));
    this.#naks.add(pending);
  };

  /** @internal Bound by the bus (`queue(<name>)`). */
  constructor(streams: BusStreams, binding: QueueBinding) {
    this.#streams = streams;
    this.#binding = binding;
  }

  /** The logical name. */
  get name(): string {
    return this.#binding.name;
  }

  /** The stream and durable consumer serving the queue. */
  get stream(): string {
    return this.#binding.stream;
  }

  get consumerName(): string {
    return this.#binding.consumer;
  }

  /** Offers an event; resolves once the stream stored it. */
  async offer(params: OfferParams): Promise<OfferAck> {
    const { event, msgId } = params;
    if (this.#binding.swarm !== undefined) checkEventSwarm(this.#binding.mode, this.#binding.swarm, event);
    const data = encodeEvent(event);
    let ack: PubAck;
    try {
      ack = await this.#streams.js().publish(this.#binding.offerSubject, data, msgId === undefined ? undefined : { msgID: msgId });
    } catch (error) {
      throw busFailure(error, "offering work");
    }
    return { seq: ack.seq, duplicate: ack.duplicate };
  }

  /** Takes one item, waiting up to `maxWaitMs`; undefined when none came. */
  async take(options: TakeOptions = {}): Promise<WorkItem | undefined> {
    await this.#naksConfirmed();
    const consumer = await this.#pullConsumer();
    let message: JsMsg | null;
    try {
      message = await consumer.next({ expires: waitOf(options) });
    } catch (error) {
      throw busFailure(error, "taking work");
    }
    return message === null ? undefined : new WorkItem(message, this.#binding.name, this.#confirmNak);
  }

  /** Takes up to `max` items, waiting up to `maxWaitMs` for them. */
  async takeBatch(params: TakeBatchParams): Promise<WorkItem[]> {
    await this.#naksConfirmed();
    const consumer = await this.#pullConsumer();
    const items: WorkItem[] = [];
    try {
      const messages = await consumer.fetch({ max_messages: Math.max(1, Math.floor(params.max)), expires: waitOf(params) });
      for await (const message of messages) items.push(new WorkItem(message, this.#binding.name, this.#confirmNak));
    } catch (error) {
      throw busFailure(error, "taking work");
    }
    return items;
  }

  /**
   * A continuous stream of items (pulls are pipelined, `maxMessages`
   * buffered). Stop it with `stop()`; iterate it with `for await`.
   */
  async consume(options: { maxMessages?: number } = {}): Promise<WorkStream> {
    await this.#naksConfirmed();
    const consumer = await this.#pullConsumer();
    let messages: ConsumerMessages;
    try {
      messages = await consumer.consume({ max_messages: options.maxMessages ?? 64 });
    } catch (error) {
      throw busFailure(error, "taking work");
    }
    const name = this.#binding.name;
    const confirmNak = this.#confirmNak;
    return {
      async *[Symbol.asyncIterator]() {
        for await (const message of messages) yield new WorkItem(message, name, confirmNak);
      },
      stop: () => messages.stop(),
    };
  }

  /** Waits until the server processed the naks sent so far (each bounded by its request timeout). */
  async #naksConfirmed(): Promise<void> {
    while (this.#naks.size > 0) await Promise.all([...this.#naks]);
  }

  async #pullConsumer(): Promise<Consumer> {
    const js = this.#streams.js();
    if (this.#consumer?.js === js) return this.#consumer.consumer;
    try {
      const consumer = await js.consumers.get(this.#binding.stream, this.#binding.consumer);
      this.#consumer = { consumer, js };
      return consumer;
    } catch (error) {
      throw busFailure(error, "binding the queue consumer");
    }
  }
}

/** The acknowledgement subject of a delivery (the client's JsMsg carries it, its interface does not name it). */
function replyOf(message: JsMsg): string | undefined {
  const reply = (message as unknown as { reply?: unknown }).reply;
  return typeof reply === "string" && reply !== "" ? reply : undefined;
}

/** Items as they come; `stop()` ends the iteration. */
export interface WorkStream extends AsyncIterable<WorkItem> {
  stop(): void;
}

function waitOf(options: TakeOptions): number {
  return Math.max(1_000, Math.floor(options.maxWaitMs ?? 5_000));
}
