/**
 * The bus's storage module: which stream serves a resource, and creating
 * it when the bus provisions (the hub: not bind mode).
 *
 * Selection — legacy names stay selected while present:
 * - a per-swarm stream: its underscore name (`AGENTIHOOKS_<hex>_…`) when
 *   a stream of that name exists and captures the resource's subjects (its
 *   stored consumers and cursors are reused), else the new name
 *   (`AGENTIHOOKS-<hex>-…`);
 * - the global events and dead-letter streams: `AGENTIHOOKS_EVENTS` /
 *   `AGENTIHOOKS_DEAD` while present, else `AGENTIHOOKS-EVENTS` /
 *   `AGENTIHOOKS-DEAD`;
 * - legacy state: `KV_<bucket>`.
 *
 * Bind mode only looks (STREAM.INFO and CONSUMER.INFO, which a member's
 * grant allows for its own streams) and fails with
 * {@link BusResourceMissingError} when the hub has not provisioned a
 * resource. Provisioning mode creates what is missing: each swarm's events,
 * dead-letter, lane queue (work queue, with the durable `<lane>` consumer
 * filtered on the offer subject) and state streams (64 revisions per key),
 * and — in unscoped mode — the new global streams and legacy buckets. A
 * scoped state stream is never created over a legacy `KV_<bucket>` that
 * still holds entries (`legacy state requires explicit key ownership`);
 * only a state migration, which names the keys it owns, creates it then.
 * Queue, state and dead-letter streams also capture the hub-only subject of
 * their migration mark (`laneway.migration.<swarm>.…`); a provisioning bus
 * adds it to such a stream that lacks it ({@link BusStreams.ensureMarkSubject}).
 *
 * Selections are remembered for the bus's lifetime (a failed one is not).
 */
import {
  AckPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  type ConsumerInfo,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { BrokerConnection } from "../nats/index.js";
import { GLOBAL_STREAMS, LEGACY_EVENT_SUBJECTS, legacyKvStream, queueWorkSubject, STATE_REVISIONS_PER_KEY, type SwarmLane, type SwarmStream } from "./stream-names.js";
import { DEFAULT_QUEUE_POLICY, type QueuePolicy } from "./config.js";
import { busFailure, BusResourceMissingError, jetStreamCode, LegacyStateOwnershipError, ownStateCommand } from "./errors.js";
import { LEGACY_DEAD_SUBJECTS } from "./names.js";

const STREAM_NOT_FOUND = 10059;
const CONSUMER_NOT_FOUND = 10014;
const STREAM_EXISTS_DIFFERENT = 10058;

export interface BusStreamsOptions {
  readonly provisioning: boolean;
  readonly replicas: number;
  readonly queuePolicy: QueuePolicy;
}

export class BusStreams {
  readonly #broker: BrokerConnection;
  readonly #options: BusStreamsOptions;
  readonly #memo = new Map<string, Promise<string>>();

  constructor(broker: BrokerConnection, options: BusStreamsOptions) {
    this.#broker = broker;
    this.#options = options;
  }

  get provisioning(): boolean {
    return this.#options.provisioning;
  }

  /** The JetStream client of the live connection. */
  js(): JetStreamClient {
    try {
      return this.#broker.jetstream();
    } catch (error) {
      throw busFailure(error, "reaching the bus");
    }
  }

  /** The live connection itself (confirmed acknowledgements). */
  nats(): NatsConnection {
    try {
      return this.#broker.connection();
    } catch (error) {
      throw busFailure(error, "reaching the bus");
    }
  }

  /** The JetStream manager of the live connection. */
  jsm(): JetStreamManager {
    try {
      return this.#broker.jetstreamManager();
    } catch (error) {
      throw busFailure(error, "reaching the bus");
    }
  }

  /** A stream's info, or undefined when it does not exist. */
  async info(name: string, subjectsFilter?: string): Promise<StreamInfo | undefined> {
    try {
      return await this.jsm().streams.info(name, subjectsFilter === undefined ? undefined : { subjects_filter: subjectsFilter });
    } catch (error) {
      if (jetStreamCode(error) === STREAM_NOT_FOUND) return undefined;
      throw busFailure(error, "reading stream information");
    }
  }

  /** The selected existing stream of a per-swarm resource, or undefined. */
  async existingSwarmStream(stream: SwarmStream): Promise<string | undefined> {
    const legacy = await this.info(stream.legacyName);
    if (legacy !== undefined && stream.subjects.every((s) => legacy.config.subjects?.includes(s))) return stream.legacyName;
    return (await this.info(stream.name)) === undefined ? undefined : stream.name;
  }

  /**
   * The stream serving a per-swarm resource: selected, or created when
   * provisioning. `explicitOwnership` (state migration only) creates a
   * state stream even over a non-empty legacy bucket.
   */
  swarmStream(stream: SwarmStream, options: { explicitOwnership?: boolean; description?: string } = {}): Promise<string> {
    return this.#remember(`swarm:${stream.name}`, async () => {
      const existing = await this.existingSwarmStream(stream);
      if (existing !== undefined) return existing;
      if (!this.provisioning) throw new BusResourceMissingError(missingStreamText(stream));
      if (stream.kind === "state" && !options.explicitOwnership) {
        const legacy = await this.info(legacyKvStream(stream.bucket!));
        if (legacy !== undefined && legacy.state.messages > 0) throw new LegacyStateOwnershipError(stream.swarm, stream.bucket!);
      }
      const config = swarmStreamConfig(stream, this.#options);
      return this.#create(options.description === undefined ? config : { ...config, description: options.description }, stream.name);
    });
  }

  /**
   * Makes the selected stream of a per-swarm resource capture the hub-only
   * subject of its migration mark (stream-names.ts): streams created by
   * earlier versions, by hand, or with an underscore name do not yet. Only
   * a provisioning bus updates a stream; remembered once it holds.
   */
  ensureMarkSubject(streamName: string, stream: SwarmStream): Promise<string> {
    const mark = stream.markSubject;
    if (mark === undefined) return Promise.resolve(streamName);
    return this.#remember(`mark:${streamName}`, async () => {
      const info = await this.info(streamName);
      if (info === undefined) throw busFailure(new Error("stream vanished"), "reading stream information");
      const subjects = info.config.subjects ?? [];
      if (subjects.includes(mark)) return streamName;
      if (!this.provisioning) throw new BusResourceMissingError(`the ${describe(stream)} of swarm '${stream.swarm}' holds no migration mark subject; the hub adds it`);
      try {
        await this.jsm().streams.update(streamName, { subjects: [...subjects, mark] });
      } catch (error) {
        throw busFailure(error, "adding the migration mark subject to a stream");
      }
      return streamName;
    });
  }

  /** Forgets a remembered selection (after a stream was created outside {@link swarmStream}). */
  forget(stream: SwarmStream): void {
    this.#memo.delete(`swarm:${stream.name}`);
  }

  /**
   * The durable `<lane>` consumer of a lane queue stream: checked, or
   * created (explicit acks, filtered on the offer subject) when provisioning.
   */
  laneConsumer(streamName: string, swarm: string, lane: SwarmLane, policy: QueuePolicy = this.#options.queuePolicy): Promise<string> {
    return this.#remember(`consumer:${streamName}/${lane}`, async () => {
      if ((await this.#consumerInfo(streamName, lane)) !== undefined) return lane;
      if (!this.provisioning) throw new BusResourceMissingError(`the '${lane}' queue consumer of swarm '${swarm}' does not exist; the hub provisions it`);
      await this.#addConsumer(streamName, lane, queueWorkSubject(swarm, lane), policy);
      return lane;
    });
  }

  /** The legacy global events stream (unscoped mode). Provisioning creates it, or updates an existing one to both legacy subjects. */
  legacyEvents(): Promise<string> {
    return this.#remember("global:events", async () => {
      for (const name of [GLOBAL_STREAMS.legacyEvents, GLOBAL_STREAMS.events]) {
        const info = await this.info(name);
        if (info === undefined) continue;
        const subjects = info.config.subjects ?? [];
        if (this.provisioning && !LEGACY_EVENT_SUBJECTS.every((s) => subjects.includes(s))) {
          try {
            await this.jsm().streams.update(name, { subjects: [...new Set([...subjects, ...LEGACY_EVENT_SUBJECTS])] });
          } catch (error) {
            throw busFailure(error, "updating the legacy events stream's subjects");
          }
        }
        return name;
      }
      if (!this.provisioning) throw new BusResourceMissingError("the legacy events stream does not exist; the hub provisions it");
      return this.#create(globalConfig(GLOBAL_STREAMS.events, LEGACY_EVENT_SUBJECTS, this.#options.replicas), GLOBAL_STREAMS.events);
    });
  }

  /** The legacy global dead-letter stream, or undefined when neither name exists (never created here). */
  async existingLegacyDead(): Promise<string | undefined> {
    for (const name of [GLOBAL_STREAMS.legacyDead, GLOBAL_STREAMS.dead]) {
      if ((await this.info(name)) !== undefined) return name;
    }
    return undefined;
  }

  /** The legacy global dead-letter stream (unscoped mode); provisioning creates `AGENTIHOOKS-DEAD`. */
  legacyDead(): Promise<string> {
    return this.#remember("global:dead", async () => {
      const existing = await this.existingLegacyDead();
      if (existing !== undefined) return existing;
      if (!this.provisioning) throw new BusResourceMissingError("the legacy dead-letter stream does not exist; the hub provisions it");
      return this.#create(globalConfig(GLOBAL_STREAMS.dead, LEGACY_DEAD_SUBJECTS, this.#options.replicas), GLOBAL_STREAMS.dead);
    });
  }

  /**
   * A legacy (unscoped) queue: its stream and the durable consumer that
   * holds its cursor — the one existing durable on the stream, or one
   * created as `preferredConsumer` when provisioning.
   */
  legacyQueue(streamName: string, subject: string, preferredConsumer: string): Promise<string> {
    return this.#remember(`legacy-queue:${streamName}`, async () => {
      if ((await this.info(streamName)) === undefined) {
        if (!this.provisioning) throw new BusResourceMissingError(`the legacy queue stream for '${subject}' does not exist`);
        await this.#create(legacyQueueConfig(streamName, subject, this.#options), streamName);
      }
      const found = await this.legacyQueueConsumer(streamName, subject, preferredConsumer);
      if (found !== undefined) return found;
      if (!this.provisioning) throw new BusResourceMissingError(`the legacy queue consumer for '${subject}' does not exist`);
      await this.#addConsumer(streamName, preferredConsumer, subject, this.#options.queuePolicy);
      return preferredConsumer;
    });
  }

  /** The durable consumer holding a legacy queue's cursor, or undefined. */
  async legacyQueueConsumer(streamName: string, subject: string, preferred: string): Promise<string | undefined> {
    if ((await this.#consumerInfo(streamName, preferred)) !== undefined) return preferred;
    try {
      for await (const consumer of this.jsm().consumers.list(streamName)) {
        const filter = consumer.config.filter_subject ?? "";
        if (consumer.config.durable_name && (filter === "" || filter === subject)) return consumer.config.durable_name;
      }
    } catch (error) {
      throw busFailure(error, "listing the legacy queue's consumers");
    }
    return undefined;
  }

  /** The legacy KV stream of a state bucket (unscoped mode); provisioning creates the bucket (64 revisions per key). */
  legacyKv(bucket: string): Promise<string> {
    const name = legacyKvStream(bucket);
    return this.#remember(`kv:${name}`, async () => {
      if ((await this.info(name)) !== undefined) return name;
      if (!this.provisioning) throw new BusResourceMissingError(`the legacy state bucket '${bucket}' does not exist; the hub provisions it`);
      try {
        await this.#broker.kvm().create(bucket, { history: STATE_REVISIONS_PER_KEY, replicas: this.#options.replicas });
      } catch (error) {
        throw busFailure(error, "creating a legacy state bucket");
      }
      return name;
    });
  }

  async #consumerInfo(stream: string, name: string): Promise<ConsumerInfo | undefined> {
    try {
      return await this.jsm().consumers.info(stream, name);
    } catch (error) {
      if (jetStreamCode(error) === CONSUMER_NOT_FOUND) return undefined;
      throw busFailure(error, "reading consumer information");
    }
  }

  async #addConsumer(stream: string, name: string, filter: string, policy: QueuePolicy): Promise<void> {
    const p = { ...DEFAULT_QUEUE_POLICY, ...policy };
    try {
      await this.jsm().consumers.add(stream, {
        durable_name: name,
        ack_policy: AckPolicy.Explicit,
        filter_subject: filter,
        ack_wait: p.ackWaitMs * 1_000_000,
        max_deliver: p.maxDeliver,
      });
    } catch (error) {
      throw busFailure(error, "creating a queue consumer");
    }
  }

  /** Creates a stream; a racing creator with the same name wins and is used. */
  async #create(config: Partial<StreamConfig> & { name: string }, name: string): Promise<string> {
    try {
      await this.jsm().streams.add(config);
    } catch (error) {
      if (jetStreamCode(error) !== STREAM_EXISTS_DIFFERENT || (await this.info(name)) === undefined) throw busFailure(error, "creating a stream");
    }
    return name;
  }

  #remember(key: string, select: () => Promise<string>): Promise<string> {
    const known = this.#memo.get(key);
    if (known !== undefined) return known;
    const pending = select();
    this.#memo.set(key, pending);
    pending.catch(() => {
      if (this.#memo.get(key) === pending) this.#memo.delete(key);
    });
    return pending;
  }
}

/** The configuration the hub creates a per-swarm stream with. */
export function swarmStreamConfig(stream: SwarmStream, options: Pick<BusStreamsOptions, "replicas" | "queuePolicy">): Partial<StreamConfig> & { name: string } {
  const base = {
    name: stream.name,
    // The migration mark's hub-only subject is captured from the start.
    subjects: [...stream.subjects, ...(stream.markSubject === undefined ? [] : [stream.markSubject])],
    storage: StorageType.File,
    num_replicas: options.replicas,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
  };
  if (stream.kind === "queue") return { ...base, ...queueLimits(options.queuePolicy), retention: RetentionPolicy.Workqueue };
  if (stream.kind === "state") return { ...base, max_msgs_per_subject: STATE_REVISIONS_PER_KEY };
  return base;
}

function legacyQueueConfig(name: string, subject: string, options: Pick<BusStreamsOptions, "replicas" | "queuePolicy">): Partial<StreamConfig> & { name: string } {
  return {
    name,
    subjects: [subject],
    storage: StorageType.File,
    num_replicas: options.replicas,
    retention: RetentionPolicy.Workqueue,
    discard: DiscardPolicy.Old,
    ...queueLimits(options.queuePolicy),
  };
}

function globalConfig(name: string, subjects: readonly string[], replicas: number): Partial<StreamConfig> & { name: string } {
  return { name, subjects: [...subjects], storage: StorageType.File, num_replicas: replicas, retention: RetentionPolicy.Limits, discard: DiscardPolicy.Old };
}

function queueLimits(policy: QueuePolicy): Partial<StreamConfig> {
  const p = { ...DEFAULT_QUEUE_POLICY, ...policy };
  return {
    ...(p.maxMessages > 0 ? { max_msgs: p.maxMessages } : {}),
    ...(p.maxBytes > 0 ? { max_bytes: p.maxBytes } : {}),
    ...(p.maxAgeMs > 0 ? { max_age: p.maxAgeMs * 1_000_000 } : {}),
  };
}

/**
 * What a member binding a stream the hub has not created is told. A state
 * stream the hub does not create while the legacy bucket holds entries
 * (the member cannot see that bucket), so its text names the bucket and
 * the command that resolves it.
 */
export function missingStreamText(stream: SwarmStream): string {
  if (stream.kind === "state") {
    const legacy = legacyKvStream(stream.bucket!);
    return (
      `the '${stream.bucket}' state stream of swarm '${stream.swarm}' does not exist. The hub creates it, but not while the legacy bucket ${legacy} holds entries: ` +
      `then the hub operator moves the swarm's keys with ${ownStateCommand(stream.swarm, stream.bucket!, "<key>...")}, or, when the swarm has no legacy keys, runs ${ownStateCommand(stream.swarm, stream.bucket!, "--no-legacy-keys")}`
    );
  }
  return `the ${describe(stream)} of swarm '${stream.swarm}' does not exist; the hub provisions it`;
}

function describe(stream: SwarmStream): string {
  switch (stream.kind) {
    case "events":
      return "events stream";
    case "dead":
      return "dead-letter stream";
    case "queue":
      return `'${stream.lane}' queue stream`;
    case "state":
      return `'${stream.bucket}' state stream`;
  }
}
