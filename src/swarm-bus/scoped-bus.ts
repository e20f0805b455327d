/**
 * The bus: `openBus(config)` gives the root bus, `bus.forSwarm(<swarm>)`
 * a view of one swarm. The same calls serve a scoped member (its minted
 * credential, `AGENTIHOOKS_BUS_SCOPED=1`, `AGENTIHOOKS_BUS_BIND=1`), the
 * hub (scoped, provisioning) and legacy (unscoped) processes.
 *
 * Scoped mode: every queue, dead-letter and event call goes to the swarm's
 * own streams (subject-map.ts), and everything naming another swarm is
 * refused before it reaches the server. The root bus serves any swarm its
 * subjects and queue names name (`swarm.<swarm>.ready.<lane>`,
 * `swarm.<swarm>.execution.…`), opens no state bucket (state only through
 * `forSwarm`), and a view cannot change its swarm.
 *
 * Bind mode binds existing streams and consumers (members hold no create
 * grant); otherwise the bus provisions what it uses (streams.ts). Binding a
 * lane queue or a state bucket checks the migration mark and refuses while
 * the import is pending.
 *
 * Migration (migration.ts) is on the root bus only, and needs scoping and
 * provisioning.
 */
import { readFile } from "node:fs/promises";
import { BrokerConnection } from "../nats/index.js";
import { deadStream, eventsStream, stateStream, swarmStreams, type SwarmStream } from "./stream-names.js";
import { swarmNameProblem } from "./swarm-names.js";
import { checkBusConfig, DEFAULT_QUEUE_POLICY, isProvisioning, type BusConfig } from "./config.js";
import { deadLetterFilters, deadLetterHeaders, deadLetterName, type DeadLetterOptions, type DeadLetterParams } from "./dead-letters.js";
import { EventFanIn, type FanInOptions } from "./fan-in.js";
import { BUS_OWN_TEXTS, BUS_TEXTS, busFailure, BusPermissionError, BusRefusedError, BusResourceMissingError, LegacyStateOwnershipError, MigrationRefusedError } from "./errors.js";
import { publishFirst, PublishPreference, readPage, type Published, type PublishParams, type ReadEventsParams, type ReadOptions, type ReadPage } from "./events.js";
import { migrateDead, migrateQueue, migrateState, prepareMarkSubject, type MigrateDeadParams, type MigrateQueueParams, type MigrateStateParams, type MigrationContext, type MigrationResult } from "./migration.js";
import { refuseWhilePending } from "./migration-mark.js";
import { queueMarkSubject, stateMarkSubject } from "./names.js";
import { WorkQueue } from "./queue.js";
import { isBucketName, StateBucket } from "./state.js";
import { BusStreams } from "./streams.js";
import { checkEventSwarm, encodeEvent, routeQueue, routeSubject, type BusEvent, type BusMode } from "./subject-map.js";

export interface OpenBusOptions {
  /**
   * Use this connection instead of opening one (the hub passes the
   * server's). The bus does not close a connection it was given.
   */
  readonly connection?: BrokerConnection;
}

/** Opens a bus with `config` (see busConfigFromEnv for the `hive.env` variables). */
export async function openBus(config: BusConfig, options: OpenBusOptions = {}): Promise<Bus> {
  checkBusConfig(config);
  let broker = options.connection;
  const owned = broker === undefined;
  if (broker === undefined) {
    const inboxPrefix = config.inboxPrefix ?? (config.credentials === undefined ? undefined : await inboxPrefixOfCredential(config.credentials));
    try {
      broker = await BrokerConnection.open({
        servers: typeof config.url === "string" ? config.url : [...config.url],
        ...(config.credentials === undefined ? {} : { credentialsFile: config.credentials }),
        ...(inboxPrefix === undefined ? {} : { inboxPrefix }),
        name: config.connectionName ?? (config.bind ? "agentihooks-bus-member" : "agentihooks-bus-hub"),
        // A member may not ask for account info ($JS.API.INFO).
        verifyJetStream: !config.bind,
        jetstream: { timeout: config.requestTimeoutMs ?? 10_000 },
      });
    } catch (error) {
      throw busFailure(error, "connecting to the bus");
    }
  }
  const core: BusCore = {
    mode: config.scoped ? "scoped" : "unscoped",
    bind: config.bind,
    provisioning: isProvisioning(config),
    broker,
    owned,
    streams: new BusStreams(broker, {
      provisioning: isProvisioning(config),
      replicas: config.replicas ?? 1,
      queuePolicy: { ...DEFAULT_QUEUE_POLICY, ...config.queuePolicy },
    }),
    preference: new PublishPreference(),
  };
  return new Bus(core);
}

/** What the root bus and its views share. */
interface BusCore {
  readonly mode: BusMode;
  readonly bind: boolean;
  readonly provisioning: boolean;
  readonly broker: BrokerConnection;
  readonly owned: boolean;
  readonly streams: BusStreams;
  readonly preference: PublishPreference;
}

/** A swarm to provision, and what its streams say about themselves. */
export interface ProvisionSwarmParams {
  /** The swarm to provision (a swarm name: swarm-names.ts). */
  readonly swarm: string;
  /** The description written on each stream that is created; default none. */
  readonly description?: string;
}

/** What the hub provisioned for a swarm. */
export interface ProvisionedSwarm {
  readonly swarm: string;
  /** The stream serving each resource (legacy underscore names where present). */
  readonly streams: readonly { readonly kind: SwarmStream["kind"]; readonly lane?: string; readonly bucket?: string; readonly name: string }[];
}

/** The root bus. */
export class Bus {
  readonly #core: BusCore;
  readonly #views = new Map<string, SwarmBus>();

  /** @internal Use {@link openBus}. */
  constructor(core: BusCore) {
    this.#core = core;
  }

  /** `AGENTIHOOKS_BUS_SCOPED=1`. */
  get scoped(): boolean {
    return this.#core.mode === "scoped";
  }

  /** `AGENTIHOOKS_BUS_BIND=1`: binds, never creates. */
  get bind(): boolean {
    return this.#core.bind;
  }

  /** Creates what it uses (the hub). */
  get provisioning(): boolean {
    return this.#core.provisioning;
  }

  /** The connection the bus uses. */
  get connection(): BrokerConnection {
    return this.#core.broker;
  }

  /** A view of one swarm. */
  forSwarm(swarm: string): SwarmBus {
    const problem = swarmNameProblem(swarm);
    if (problem !== undefined) throw new BusRefusedError(BUS_OWN_TEXTS.invalidSwarm(problem));
    let view = this.#views.get(swarm);
    if (view === undefined) {
      view = new SwarmBus(this.#core, this, swarm);
      this.#views.set(swarm, view);
    }
    return view;
  }

  /** Binds a queue. Scoped: `swarm.<swarm>.ready.<lane>` only. */
  queue(name: string): Promise<WorkQueue> {
    return openQueue(this.#core, undefined, name);
  }

  /** Publishes an event (or a dead letter, on `dead.<swarm>`); scoped: the subject names the swarm. */
  publish(params: PublishParams): Promise<Published> {
    return publish(this.#core, undefined, params.subject, params.event, params);
  }

  /** A page of stored events matching `pattern` (scoped: a pattern naming one swarm). */
  readEvents(params: ReadEventsParams): Promise<ReadPage> {
    return readEvents(this.#core, undefined, params.pattern, params);
  }

  /** Dead-letters an event of the swarm its `swarm` field names. */
  deadLetter(params: DeadLetterParams): Promise<Published> {
    const { event } = params;
    if (typeof event?.swarm !== "string") throw new BusRefusedError(BUS_OWN_TEXTS.deadLetterNeedsSwarm);
    return publish(this.#core, undefined, deadLetterName(event.swarm), event, params);
  }

  /** Scoped: refused (`select a swarm before opening scoped state`). Unscoped: the legacy `KV_<bucket>`. */
  state(bucket: string): Promise<StateBucket> {
    return openState(this.#core, undefined, bucket);
  }

  /**
   * The hub's provisioning of a swarm (scoped, not bind): its events,
   * dead-letter, lane queue (with the `<lane>` consumers) and state streams,
   * each capturing its migration mark's hub-only subject (a mark an earlier
   * version left under the swarm's prefix is adopted there).
   * A state stream over a legacy bucket that still holds entries is not
   * created: the call creates everything else, then fails with `legacy
   * state requires explicit key ownership`.
   */
  async provisionSwarm(params: ProvisionSwarmParams): Promise<ProvisionedSwarm> {
    const { swarm, description } = params;
    if (!this.provisioning) throw new BusPermissionError("provisioning a swarm's streams needs a bus that is not in bind mode");
    if (!this.scoped) throw new BusRefusedError("provisioning a swarm's streams needs a scoped bus");
    this.forSwarm(swarm);
    const { streams } = this.#core;
    const out: { kind: SwarmStream["kind"]; lane?: string; bucket?: string; name: string }[] = [];
    let refusal: unknown;
    const blocked: string[] = [];
    for (const stream of swarmStreams(swarm)) {
      try {
        const name = await streams.swarmStream(stream, description === undefined ? {} : { description });
        if (stream.kind === "queue") await streams.laneConsumer(name, swarm, stream.lane!);
        await prepareMarkSubject(streams, name, stream);
        out.push({ kind: stream.kind, ...(stream.lane ? { lane: stream.lane } : {}), ...(stream.bucket ? { bucket: stream.bucket } : {}), name });
      } catch (error) {
        if (!(error instanceof MigrationRefusedError)) throw error;
        if (error instanceof LegacyStateOwnershipError) blocked.push(error.bucket);
        refusal ??= error;
      }
    }
    // Every bucket whose state stream waits for key ownership, in one refusal.
    if (refusal instanceof LegacyStateOwnershipError) throw new LegacyStateOwnershipError(swarm, blocked[0]!, blocked);
    if (refusal !== undefined) throw refusal;
    return { swarm, streams: out };
  }

  /**
   * The hub's legacy (all-swarm) streams, selected (underscore names while
   * present) and, when provisioning, created: the events stream, updated
   * at once to hold both `swarm.*.execution.>` and `legacy.swarm.>`, and
   * the dead-letter stream. In bind mode a missing one is `undefined`.
   */
  async provisionLegacyStreams(): Promise<{ readonly events: string | undefined; readonly dead: string | undefined }> {
    const { streams } = this.#core;
    const events = await streams.legacyEvents().catch((error: unknown) => missingInBind(error, this.provisioning));
    const dead = this.provisioning ? await streams.legacyDead() : await streams.existingLegacyDead();
    return { events, dead };
  }

  /**
   * The hub's event fan-in (fan-in.ts): durable readers over the legacy
   * events stream and, scoped, every per-swarm events stream on the
   * server. Call `refresh()` to start it and to pick up new streams.
   */
  openFanIn(options: FanInOptions): EventFanIn {
    return new EventFanIn({ streams: this.#core.streams, mode: this.#core.mode, provisioning: this.provisioning }, options);
  }

  /** Moves the named keys of legacy `KV_<bucket>` into the swarm's state stream (see migration.ts); an aborted signal stops it at the next message. */
  migrateState(params: MigrateStateParams, signal?: AbortSignal): Promise<MigrationResult> {
    return migrateState(this.#migration(), params, signal);
  }

  /** Moves the undelivered work of the legacy queue `name` (`swarm.<swarm>.ready.<lane>`) into the lane queue. */
  migrateQueue(params: MigrateQueueParams, signal?: AbortSignal): Promise<MigrationResult> {
    return migrateQueue(this.#migration(), params, signal);
  }

  /** Moves the swarm's letters from the legacy dead-letter stream into its own. */
  migrateDead(params: MigrateDeadParams, signal?: AbortSignal): Promise<MigrationResult> {
    return migrateDead(this.#migration(), params, signal);
  }

  /** Closes the connection when the bus opened it. */
  async close(): Promise<void> {
    if (this.#core.owned) await this.#core.broker.close();
  }

  #migration(): MigrationContext {
    return { streams: this.#core.streams, scoped: this.scoped, provisioning: this.provisioning };
  }
}

/** The bus of one swarm. */
export class SwarmBus {
  readonly #core: BusCore;
  readonly #root: Bus;

  /** @internal Use {@link Bus.forSwarm}. */
  constructor(
    core: BusCore,
    root: Bus,
    readonly swarm: string,
  ) {
    this.#core = core;
    this.#root = root;
  }

  /** This view again; a scoped view refuses another swarm (`a scoped bus cannot change its swarm`). */
  forSwarm(swarm: string): SwarmBus {
    if (swarm === this.swarm) return this;
    if (this.#core.mode === "scoped") throw new BusRefusedError(BUS_TEXTS.cannotChangeSwarm);
    return this.#root.forSwarm(swarm);
  }

  /** Binds the swarm's lane queue `swarm.<swarm>.ready.<lane>`. */
  queue(name: string): Promise<WorkQueue> {
    return openQueue(this.#core, this.swarm, name);
  }

  /** Publishes an event of this swarm (or a dead letter, on `dead.<swarm>`). */
  publish(params: PublishParams): Promise<Published> {
    return publish(this.#core, this.swarm, params.subject, params.event, params);
  }

  /** A page of this swarm's stored events matching `pattern` (such as `swarm.*.execution.>`). */
  readEvents(params: ReadEventsParams): Promise<ReadPage> {
    return readEvents(this.#core, this.swarm, params.pattern, params);
  }

  /** Dead-letters an event of this swarm. */
  deadLetter(params: DeadLetterParams): Promise<Published> {
    return publish(this.#core, this.swarm, deadLetterName(this.swarm), params.event, params);
  }

  /** A page of this swarm's dead letters. */
  async readDeadLetters(options: ReadOptions = {}): Promise<ReadPage> {
    const stream = this.#core.mode === "scoped" ? await this.#core.streams.swarmStream(deadStream(this.swarm)) : await this.#core.streams.legacyDead();
    return readPage(this.#core.streams, stream, deadLetterFilters(this.#core.mode, this.swarm), options);
  }

  /** The swarm's state bucket (scoped: its state stream, refused while its migration is pending). */
  state(bucket: string): Promise<StateBucket> {
    return openState(this.#core, this.swarm, bucket);
  }
}

async function openQueue(core: BusCore, busSwarm: string | undefined, name: string): Promise<WorkQueue> {
  const route = routeQueue(core.mode, busSwarm, name);
  const { streams } = core;
  if (route.mode === "scoped") {
    const stream = await streams.swarmStream(route.stream);
    await streams.laneConsumer(stream, route.swarm, route.lane);
    await refuseWhilePending(streams.jsm(), stream, queueMarkSubject(route.swarm, route.lane), "queue");
    return new WorkQueue(streams, { mode: "scoped", name, swarm: route.swarm, stream, consumer: route.consumer, offerSubject: route.offerSubject });
  }
  const consumer = await streams.legacyQueue(route.streamName, route.offerSubject, route.consumer);
  return new WorkQueue(streams, { mode: "unscoped", name, swarm: route.swarm, stream: route.streamName, consumer, offerSubject: route.offerSubject });
}

async function publish(core: BusCore, busSwarm: string | undefined, subject: string, event: BusEvent, options: DeadLetterOptions): Promise<Published> {
  const route = routeSubject(core.mode, busSwarm, subject, "publish");
  checkEventSwarm(core.mode, route.swarm, event);
  const data = encodeEvent(event);
  const { streams } = core;
  if (core.provisioning) {
    if (core.mode === "scoped") await streams.swarmStream(route.kind === "event" ? eventsStream(route.swarm) : deadStream(route.swarm));
    else await (route.kind === "event" ? streams.legacyEvents() : streams.legacyDead());
  }
  const headers = route.kind === "dead" ? deadLetterHeaders(options) : undefined;
  return publishFirst(streams, core.preference, route.subjects, data, headers === undefined ? {} : { headers });
}

async function readEvents(core: BusCore, busSwarm: string | undefined, pattern: string, options: ReadOptions): Promise<ReadPage> {
  const route = routeSubject(core.mode, busSwarm, pattern, "read");
  const { streams } = core;
  const stream =
    core.mode === "scoped"
      ? await streams.swarmStream(route.kind === "event" ? eventsStream(route.swarm) : deadStream(route.swarm))
      : await (route.kind === "event" ? streams.legacyEvents() : streams.legacyDead());
  return readPage(streams, stream, route.subjects, options);
}

async function openState(core: BusCore, busSwarm: string | undefined, bucket: string): Promise<StateBucket> {
  if (core.mode === "scoped" && busSwarm === undefined) throw new BusPermissionError(BUS_TEXTS.selectSwarmForState);
  if (!isBucketName(bucket)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidBucket(bucket));
  const { streams } = core;
  if (core.mode === "scoped") {
    const swarm = busSwarm!;
    const stream = await streams.swarmStream(stateStream(swarm, bucket));
    await refuseWhilePending(streams.jsm(), stream, stateMarkSubject(swarm, bucket), "state");
    return new StateBucket(streams, bucket, stream, `swarm.${swarm}.state.${bucket}`);
  }
  const stream = await streams.legacyKv(bucket);
  return new StateBucket(streams, bucket, stream, `$KV.${bucket}`);
}

/** A stream a bind-mode bus found missing is `undefined`; anything else is thrown again. */
function missingInBind(error: unknown, provisioning: boolean): undefined {
  if (!provisioning && error instanceof BusResourceMissingError) return undefined;
  throw error;
}

/**
 * The inbox prefix a credential's subscribe grant allows: `_INBOX.<member>`
 * when it allows exactly one member inbox (`_INBOX.<member>.>`), else
 * undefined. Reads the user JWT's claims without verifying them (the
 * server does that); never fails.
 */
export async function inboxPrefixOfCredential(path: string): Promise<string | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    return undefined;
  }
  const jwt = /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.-]+)\s*------END NATS USER JWT------/.exec(text)?.[1];
  if (jwt === undefined) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8")) as { nats?: { sub?: { allow?: unknown } } };
    const allow = claims.nats?.sub?.allow;
    if (!Array.isArray(allow)) return undefined;
    const inboxes = allow.filter((s): s is string => typeof s === "string" && /^_INBOX\.[^.*>]+\.>$/.test(s));
    return inboxes.length === 1 ? inboxes[0]!.slice(0, -2) : undefined;
  } catch {
    return undefined;
  }
}

