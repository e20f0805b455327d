/**
 * The hub's event fan-in: one reader over every events stream the hub
 * reads, so that a reactor filter such as `swarm.*.execution.>` sees the
 * events of legacy (unscoped) publishers and of scoped members alike.
 *
 * Sources:
 * - the legacy events stream (`AGENTIHOOKS_EVENTS` while present, else
 *   `AGENTIHOOKS-EVENTS`), always; it holds `swarm.*.execution.>` and
 *   `legacy.swarm.>`;
 * - in scoped mode, every per-swarm events stream found on the server
 *   (`AGENTIHOOKS-<hex>-EVENTS`, and an existing underscore-named
 *   `AGENTIHOOKS_<hex>_EVENTS`, which stays selected while present). A
 *   stream created later is picked up by {@link EventFanIn.refresh}.
 *
 * Consumers: durable pull consumers with explicit acks, so the hub's
 * cursor survives restarts and every event is handled at least once.
 * nats-server 2.9 has one filter per consumer, so "filtering on both"
 * legacy subjects takes two durables on the legacy stream:
 *
 * | durable | filter |
 * | --- | --- |
 * | `<durable>` | `swarm.*.execution.>` (the original subject) |
 * | `<durable>-legacy` | `legacy.swarm.>` |
 *
 * An existing `<durable>` that filters on the original subject alone is
 * accepted as it is (its cursor is kept) and `<durable>-legacy` is added
 * beside it; an existing `<durable>` without a filter already reads both
 * subjects, and no second one is added. On a per-swarm stream the hub
 * reads the whole stream (`swarm.<swarm>.events.>`) with `<durable>`; an
 * existing `<durable>` is accepted with whatever filter it has. In bind
 * mode nothing is created: a missing durable is reported as the source's
 * problem.
 *
 * Each event is given to the handler with its logical subject
 * (`swarm.<swarm>.events.execution.started` reads as
 * `swarm.<swarm>.execution.started`, `legacy.swarm.…` as `swarm.…`), in
 * stream order per consumer; it is acknowledged once the handler resolves,
 * and handed out again after a delay when the handler throws (see
 * {@link FanInOptions.retryDelayMs}).
 */
import { AckPolicy, DeliverPolicy, type ConsumerInfo, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { swarmOfStream } from "./stream-names.js";
import { BusConfiguredConsumerError, busFailure, BusResourceMissingError, jetStreamCode, SwarmError } from "./errors.js";
import type { BusStreams } from "./streams.js";
import { decodeEvent, logicalSubject, type BusEvent, type BusMode } from "./subject-map.js";

const CONSUMER_NOT_FOUND = 10014;
const STREAM_NOT_FOUND = 10059;

/** The legacy events stream's original subject (what old hub durables filter on). */
export const LEGACY_ORIGINAL_EVENT_SUBJECT = "swarm.*.execution.>";
/** The prefixed subject unscoped publishers use when their credential allows it. */
export const LEGACY_PREFIXED_EVENT_SUBJECT = "legacy.swarm.>";

/** A per-swarm events stream name, in either format. */
const SWARM_EVENTS_STREAM = /^AGENTIHOOKS[-_](?:[0-9a-f]{2})+[-_]EVENTS$/;

/** Whether `name` is a per-swarm events stream (`AGENTIHOOKS-<hex>-EVENTS` or `AGENTIHOOKS_<hex>_EVENTS`). */
export function isSwarmEventsStream(name: string): boolean {
  return SWARM_EVENTS_STREAM.test(name) && swarmOfStream(name) !== undefined;
}

/** One stream the fan-in reads. */
export interface FanInSource {
  readonly stream: string;
  /** The swarm of a per-swarm stream; undefined for the legacy (all-swarm) stream. */
  readonly swarm: string | undefined;
  /** The durables read on it (with their filters: `""` is the whole stream). */
  readonly consumers: readonly { readonly name: string; readonly filter: string }[];
  /** Events handled (acknowledged) from this stream since the fan-in opened. */
  readonly handled: number;
  /** Deliveries the handler refused (handed out again later). */
  readonly deferred: number;
  /** Why the source is not (fully) read, when it is not. */
  readonly problem: string | undefined;
}

/** An event as the fan-in hands it over. */
export interface FannedInEvent {
  /** The stream it was read from. */
  readonly source: string;
  /** Its stream sequence. */
  readonly seq: number;
  /** The logical subject (`swarm.<swarm>.execution.…`). */
  readonly subject: string;
  /** The subject it is stored on. */
  readonly storedSubject: string;
  /** The swarm the subject (or the per-swarm stream) names; undefined when neither names one. */
  readonly swarm: string | undefined;
  readonly data: Uint8Array;
  /** The event, or undefined when the bytes are not a JSON object. */
  readonly event: BusEvent | undefined;
  readonly time: Date;
  readonly headers: MsgHdrs | undefined;
  /** Deliveries of this event to the hub, this one included. */
  readonly deliveryCount: number;
}

export interface FanInOptions {
  /** The durable consumer name (`<durable>-legacy` is derived from it). Letters, digits and hyphens. */
  readonly durable: string;
  /** Handles one event; resolving acknowledges it, throwing hands it out again after {@link retryDelayMs}. */
  readonly handle: (event: FannedInEvent) => Promise<void>;
  /** Told about a source that cannot be read (and again when that changes); the error is a SwarmError. */
  readonly onProblem?: (source: string, error: Error) => void;
  /** The redelivery delay of a refused event by its delivery count. Default min(5 s × count, 60 s). */
  readonly retryDelayMs?: (deliveryCount: number) => number;
  /** Events buffered per consumer. Default 64. */
  readonly batch?: number;
}

interface Reader {
  readonly stream: string;
  readonly swarm: string | undefined;
  consumers: { name: string; filter: string }[];
  handled: number;
  deferred: number;
  problem: string | undefined;
  /** The running consume loops, by durable. */
  readonly loops: Map<string, { messages: ConsumerMessages | undefined; done: Promise<void> }>;
}

/** What a fan-in needs of its bus. */
export interface FanInContext {
  readonly streams: BusStreams;
  readonly mode: BusMode;
  readonly provisioning: boolean;
}

export class EventFanIn {
  readonly #ctx: FanInContext;
  readonly #options: FanInOptions;
  readonly #readers = new Map<string, Reader>();
  #closed = false;
  #refreshing: Promise<void> | undefined;
  #again = false;
  #wake = new Set<() => void>();

  /** @internal Use `Bus.openFanIn`. */
  constructor(ctx: FanInContext, options: FanInOptions) {
    if (!/^[A-Za-z0-9-]{1,200}$/.test(options.durable)) throw new Error("the fan-in durable must be letters, digits and hyphens");
    this.#ctx = ctx;
    this.#options = options;
  }

  /** The streams read, with their durables and counters. */
  sources(): FanInSource[] {
    return [...this.#readers.values()]
      .map((r) => ({ stream: r.stream, swarm: r.swarm, consumers: r.consumers.map((c) => ({ ...c })), handled: r.handled, deferred: r.deferred, problem: r.problem }))
      .sort((a, b) => (a.swarm === undefined ? -1 : b.swarm === undefined ? 1 : a.stream.localeCompare(b.stream)));
  }

  /**
   * Finds the sources on the server (the legacy events stream, and in
   * scoped mode every per-swarm events stream), binds or creates their
   * durables, and starts reading the new ones. Readers whose stream is
   * gone stop. Concurrent calls share one run (and one more runs after it
   * when called meanwhile). Fails only when the server cannot be reached.
   */
  refresh(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    if (this.#refreshing !== undefined) {
      this.#again = true;
      return this.#refreshing;
    }
    const run = (async () => {
      try {
        do {
          this.#again = false;
          await this.#discover();
        } while (this.#again && !this.#closed);
      } finally {
        this.#refreshing = undefined;
      }
    })();
    this.#refreshing = run;
    return run;
  }

  /** Stops every reader; events being handled finish first (their acks are sent). */
  async close(): Promise<void> {
    this.#closed = true;
    for (const wake of this.#wake) wake();
    await this.#refreshing?.catch(() => undefined);
    const loops = [...this.#readers.values()].flatMap((r) => [...r.loops.values()]);
    for (const loop of loops) loop.messages?.stop();
    await Promise.all(loops.map((l) => l.done));
  }

  async #discover(): Promise<void> {
    const { streams } = this.#ctx;
    const found = new Map<string, string | undefined>();
    const legacy = await this.#legacyStream();
    if (legacy !== undefined) found.set(legacy, undefined);
    if (this.#ctx.mode === "scoped") {
      try {
        for await (const name of streams.jsm().streams.names()) {
          if (isSwarmEventsStream(name)) found.set(name, swarmOfStream(name));
        }
      } catch (error) {
        throw busFailure(error, "listing the events streams");
      }
    }
    for (const [stream, reader] of this.#readers) {
      if (!found.has(stream) && (await streams.info(stream)) === undefined) await this.#stop(reader);
    }
    for (const [stream, swarm] of found) {
      if (this.#closed) return;
      let reader = this.#readers.get(stream);
      if (reader === undefined) {
        reader = { stream, swarm, consumers: [], handled: 0, deferred: 0, problem: undefined, loops: new Map() };
        this.#readers.set(stream, reader);
      }
      try {
        reader.consumers = swarm === undefined ? await this.#legacyConsumers(stream) : [await this.#swarmConsumer(stream)];
        this.#setProblem(reader, undefined);
      } catch (error) {
        const failure = busFailure(error, "binding the hub's events consumer");
        if (failure.reason === "swarm_unavailable") throw failure;
        this.#setProblem(reader, failure);
        continue;
      }
      for (const consumer of reader.consumers) {
        if (!reader.loops.has(consumer.name)) this.#startLoop(reader, consumer.name);
      }
    }
  }

  /** The selected legacy events stream (provisioning creates it, or updates it to both subjects). */
  async #legacyStream(): Promise<string | undefined> {
    try {
      return await this.#ctx.streams.legacyEvents();
    } catch (error) {
      // Bind mode and no legacy events stream: nothing to read there.
      if (error instanceof BusResourceMissingError) return undefined;
      throw error;
    }
  }

  /** The durables on the legacy events stream (see the table above). */
  async #legacyConsumers(stream: string): Promise<{ name: string; filter: string }[]> {
    const { durable } = this.#options;
    const primary = await this.#consumer(stream, durable, LEGACY_ORIGINAL_EVENT_SUBJECT);
    const filter = primary.config.filter_subject ?? "";
    if (filter === "") return [{ name: durable, filter }];
    if (filter !== LEGACY_ORIGINAL_EVENT_SUBJECT) {
      throw new BusConfiguredConsumerError(
        `the hub's durable '${durable}' on ${stream} filters on '${filter}', neither '${LEGACY_ORIGINAL_EVENT_SUBJECT}' nor the whole stream; delete it to let the hub recreate it`,
      );
    }
    const legacyName = `${durable}-legacy`;
    const companion = await this.#consumer(stream, legacyName, LEGACY_PREFIXED_EVENT_SUBJECT);
    const companionFilter = companion.config.filter_subject ?? "";
    if (companionFilter !== LEGACY_PREFIXED_EVENT_SUBJECT) {
      throw new BusConfiguredConsumerError(`the hub's durable '${legacyName}' on ${stream} filters on '${companionFilter}', not on '${LEGACY_PREFIXED_EVENT_SUBJECT}'; delete it to let the hub recreate it`);
    }
    return [
      { name: durable, filter },
      { name: legacyName, filter: companionFilter },
    ];
  }

  async #swarmConsumer(stream: string): Promise<{ name: string; filter: string }> {
    const info = await this.#consumer(stream, this.#options.durable, "");
    return { name: this.#options.durable, filter: info.config.filter_subject ?? "" };
  }

  /** An existing durable, or one created with `filter` (`""`: the whole stream) when provisioning. */
  async #consumer(stream: string, name: string, filter: string): Promise<ConsumerInfo> {
    const jsm = this.#ctx.streams.jsm();
    try {
      return await jsm.consumers.info(stream, name);
    } catch (error) {
      if (jetStreamCode(error) !== CONSUMER_NOT_FOUND) throw busFailure(error, "reading the hub's events consumer");
    }
    if (!this.#ctx.provisioning) throw new BusConfiguredConsumerError(`the hub's durable '${name}' does not exist on ${stream}, and a bus in bind mode creates none`);
    try {
      return await jsm.consumers.add(stream, {
        durable_name: name,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ...(filter === "" ? {} : { filter_subject: filter }),
      });
    } catch (error) {
      throw busFailure(error, "creating the hub's events consumer");
    }
  }

  #startLoop(reader: Reader, durable: string): void {
    const entry: { messages: ConsumerMessages | undefined; done: Promise<void> } = { messages: undefined, done: Promise.resolve() };
    reader.loops.set(durable, entry);
    entry.done = (async () => {
      let failures = 0;
      while (!this.#closed && this.#readers.get(reader.stream) === reader) {
        try {
          const consumer = await this.#ctx.streams.js().consumers.get(reader.stream, durable);
          const messages = await consumer.consume({ max_messages: this.#options.batch ?? 64 });
          entry.messages = messages;
          if (this.#closed) messages.stop();
          for await (const message of messages) {
            failures = 0;
            await this.#deliver(reader, message);
          }
        } catch (error) {
          if (this.#closed) break;
          const code = jetStreamCode(error);
          if (code === STREAM_NOT_FOUND || code === CONSUMER_NOT_FOUND) {
            this.#setProblem(reader, busFailure(error, "reading the hub's events consumer"));
          }
          failures += 1;
        } finally {
          entry.messages = undefined;
        }
        if (this.#closed) break;
        // A lost connection, a deleted consumer: try again, backing off up to 5 s.
        await this.#sleep(Math.min(5_000, 100 * 2 ** Math.min(failures, 6)));
      }
      reader.loops.delete(durable);
    })();
  }

  async #deliver(reader: Reader, message: JsMsg): Promise<void> {
    const subject = logicalSubject(message.subject);
    let event: BusEvent | undefined | null = null;
    const fannedIn: FannedInEvent = {
      source: reader.stream,
      seq: message.seq,
      subject,
      storedSubject: message.subject,
      swarm: reader.swarm ?? swarmOfSubject(subject),
      data: message.data,
      get event() {
        if (event === null) event = decodeEvent(message.data);
        return event;
      },
      time: new Date(Math.floor(message.info.timestampNanos / 1_000_000)),
      headers: message.headers,
      deliveryCount: message.info.deliveryCount,
    };
    try {
      await this.#options.handle(fannedIn);
    } catch {
      reader.deferred += 1;
      const delay = this.#options.retryDelayMs?.(message.info.deliveryCount) ?? Math.min(60_000, 5_000 * message.info.deliveryCount);
      message.nak(delay);
      return;
    }
    message.ack();
    reader.handled += 1;
  }

  async #stop(reader: Reader): Promise<void> {
    this.#readers.delete(reader.stream);
    const loops = [...reader.loops.values()];
    for (const loop of loops) loop.messages?.stop();
    await Promise.all(loops.map((l) => l.done));
  }

  #setProblem(reader: Reader, error: Error | undefined): void {
    const text = error?.message;
    if (text === reader.problem) return;
    reader.problem = text;
    if (error !== undefined) this.#options.onProblem?.(reader.stream, error);
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wake.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake.add(done);
    });
  }
}

/** The swarm a logical subject names (`swarm.<swarm>.…`), if any. */
function swarmOfSubject(subject: string): string | undefined {
  const [first, swarm] = subject.split(".");
  return first === "swarm" && swarm !== undefined && swarm !== "" ? swarm : undefined;
}
