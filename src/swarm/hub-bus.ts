/**
 * The hub's bus: provisioning, event fan-in and migration, on the hub's own
 * NATS connection (its service user in the hive account).
 *
 * Mode, from the hub's settings (hubSettingsFromEnv, open-hive-hub.ts):
 *
 * | `AGENTIHOOKS_BUS_SCOPED` | `AGENTIHOOKS_BUS_BIND` | the hub |
 * | --- | --- | --- |
 * | `1` | unset | creates each swarm's events, dead-letter, lane queue and state streams (every swarm in member_swarms at start and on every scope change, and any swarm an event names before that event is handled); updates the legacy events stream to `swarm.*.execution.>` and `legacy.swarm.>`; fans in the legacy stream and every `AGENTIHOOKS-<hex>-EVENTS` stream on the server |
 * | `1` | `1` | binds what exists (creates nothing) and fans in the existing streams |
 * | unset | any | legacy streams only: with `AGENTIHOOKS_BUS=nats` it selects (and, not bind, creates or updates) the legacy events and dead-letter streams and fans in the legacy events stream; without it the hub touches no stream |
 *
 * Migration (MigrateState/Queue/Dead) always goes through this bus, so its
 * refusals are the library's: `migration requires privileged provisioning`
 * in bind mode, `scoped migration is not enabled` without scoping.
 *
 * What the hub does with a fanned-in event: before acknowledging it, it
 * makes sure the swarm the event names has its streams (scoped and
 * provisioning only; a swarm whose legacy state still holds entries keeps
 * using it: the refusal `legacy state requires explicit key ownership` is
 * logged once, with the bucket and the command that resolves it, and the
 * event is handled); it then counts the event per swarm and logs it at
 * debug (source stream, sequence, logical subject — never the payload). A
 * broker failure while provisioning leaves the event unacknowledged: it is
 * handed out again later.
 *
 * Swarms come from the operator. An event may name any swarm (an unscoped
 * publisher chooses its subject), so a swarm no operator named — in
 * member_swarms or by a hub command ({@link HubBusOptions.memberSwarms}) —
 * still has its streams created and its events handled and counted, but
 * its streams carry the description {@link EVENT_ONLY_STREAM_DESCRIPTION}:
 * the hub never counts such a swarm among the swarms in the store, so
 * `hive scope` and `hive invite` without `--swarm` never grant it.
 *
 * Nothing here blocks the hub from opening: provisioning and fan-in start
 * in the background and retry every `refreshIntervalMs` while the broker
 * is unreachable.
 */
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import type { BrokerConnection } from "../nats/index.js";
import { openBus, type Bus } from "../swarm-bus/index.js";
import {
  type EventFanIn,
  type FanInSource,
  type FannedInEvent,
  isSwarmName,
  LegacyStateOwnershipError,
  type MigrateDeadParams as BusMigrateDeadParams,
  type MigrateQueueParams as BusMigrateQueueParams,
  type MigrateStateParams as BusMigrateStateParams,
  MIGRATION_PAUSE_POINTS,
  type MigrationParams as BusMigrationParams,
  type MigrationResult,
  ownStateCommand,
} from "../swarm-bus/internal.js";
import { SwarmError } from "../swarm-bus/index.js";

/** The pause points of the hub's migrations (`LANEWAY_PAUSE_AT`, tests only). */
export const HUB_PAUSE_POINTS = MIGRATION_PAUSE_POINTS;

/**
 * The most swarms the hub provisions for, counting member_swarms and the
 * swarms events name. An unscoped publisher may name any swarm in an event
 * subject; past this bound such an event is still handled, its swarm gets
 * no streams, and one warning is logged. The per-swarm event counts have the same bound (then `(other)`).
 */
export const MAX_PROVISIONED_SWARMS = 4096;

/**
 * The description of the streams the hub creates for a swarm that only an
 * event named: such a swarm is not "in the store" (open-hive-hub.ts).
 */
export const EVENT_ONLY_STREAM_DESCRIPTION = "laneway hub: created for an event naming a swarm no operator named; grants nothing";

/** The hub's durable consumer on every events stream it fans in (`laneway-hub-legacy` beside it on the legacy stream). */
export const HUB_FAN_IN_DURABLE = "laneway-hub";

/** How often the hub looks for new events streams and retries what failed. */
export const HUB_BUS_REFRESH_MS = 30_000;

/** How the hub's bus runs (hub-bus.ts's table). */
export interface HubBusMode {
  /** `AGENTIHOOKS_BUS_SCOPED=1`: per-swarm streams. */
  readonly scoped: boolean;
  /** `AGENTIHOOKS_BUS_BIND=1`: bind to what exists, create nothing. */
  readonly bind: boolean;
  /** `AGENTIHOOKS_BUS` is set: unscoped, the legacy streams. */
  readonly legacy: boolean;
}

export interface HubBusOptions {
  /** The hub's own connection (hive account service user). */
  readonly broker: BrokerConnection;
  /** Its mode (the table above; hubSettingsFromEnv reads it). */
  readonly mode: HubBusMode;
  readonly log: Logger;
  /**
   * The swarms the operator named: every swarm member_swarms lists and
   * those named by hub commands (read at start and on every refresh).
   */
  readonly memberSwarms: () => Promise<readonly string[]>;
  /** Replicas of the streams the hub creates (default 1). */
  readonly replicas?: number;
  /** Migration pause points (tests only; `laneway serve` passes those of `LANEWAY_PAUSE_AT`); default: none. */
  readonly pausePoints?: PausePoints;
  readonly refreshIntervalMs?: number;
  /** The bound on provisioned swarms and per-swarm counts (default MAX_PROVISIONED_SWARMS). */
  readonly maxSwarms?: number;
}

/**
 * What the hub's migrations take: the bus's own params (src/swarm-bus,
 * migration.ts) without its pause points, which the hub sets from its
 * options.
 */
export type MigrationParams = Omit<BusMigrationParams, "pausePoints">;
export type MigrateStateParams = Omit<BusMigrateStateParams, "pausePoints">;
export type MigrateQueueParams = Omit<BusMigrateQueueParams, "pausePoints">;
export type MigrateDeadParams = Omit<BusMigrateDeadParams, "pausePoints">;

/**
 * What the hub's operator RPCs use: one params object per migration and the
 * call's signal, whose abort stops the copy at the next message boundary
 * (the pending mark stays; a repeat resumes).
 */
export interface HubMigrator {
  migrateState(params: MigrateStateParams, signal?: AbortSignal): Promise<MigrationResult>;
  migrateQueue(params: MigrateQueueParams, signal?: AbortSignal): Promise<MigrationResult>;
  migrateDead(params: MigrateDeadParams, signal?: AbortSignal): Promise<MigrationResult>;
}

/**
 * What the hub's bus does for the hub's calls: creates the streams of the
 * swarms a call grants before the call answers, and tells which swarms
 * only events named.
 */
export interface HubProvisioner {
  /** Creates the streams of swarms the operator named (a no-op when the hub does not provision). */
  provisionNamed(swarms: readonly string[]): Promise<void>;
  /** The swarms only events named since the hub started, and the events handled per swarm. */
  eventSwarms(): { readonly unnamed: readonly string[]; readonly handled: Readonly<Record<string, number>> };
}

/** The hub's view of its bus, for logs and tests. */
export interface HubBusStatus {
  readonly scoped: boolean;
  readonly bind: boolean;
  /** Whether the hub provisions and fans in (see the table above). */
  readonly active: boolean;
  /** Swarms whose streams the hub ensured. */
  readonly provisioned: readonly string[];
  /** Of those, the swarms only events named (their streams grant nothing). */
  readonly unnamed: readonly string[];
  /** Events handled per swarm (`""`: events naming no swarm). */
  readonly handled: Readonly<Record<string, number>>;
  readonly sources: readonly FanInSource[];
}

export class HubBus implements HubMigrator, HubProvisioner {
  readonly #o: HubBusOptions;
  readonly #bus: Bus;
  readonly #active: boolean;
  readonly #pause: PausePoints;
  readonly #provisioned = new Map<string, Promise<void>>();
  readonly #handled = new Map<string, number>();
  #capLogged = false;
  readonly #maxSwarms: number;
  readonly #refusalsLogged = new Set<string>();
  /** The swarms the operator named, as last read (events naming others provision event-only streams). */
  #named = new Set<string>();
  readonly #unnamed = new Set<string>();
  #fanIn: EventFanIn | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopWatchingBroker: (() => void) | undefined;
  #syncing: Promise<void> | undefined;
  #closed = false;

  private constructor(options: HubBusOptions, bus: Bus, active: boolean) {
    this.#o = options;
    this.#bus = bus;
    this.#active = active;
    this.#pause = options.pausePoints ?? noPausePoints;
    this.#maxSwarms = options.maxSwarms ?? MAX_PROVISIONED_SWARMS;
  }

  /**
   * Opens the hub's bus on its connection (no round trip) and, when
   * active, starts provisioning and fan-in in the background.
   */
  static async open(options: HubBusOptions): Promise<HubBus> {
    const { mode } = options;
    const active = mode.scoped || mode.legacy;
    // The URL is not used: the bus runs on the hub's connection.
    const bus = await openBus(
      { backend: "nats", url: options.broker.servers[0] ?? "nats://127.0.0.1:4222", scoped: mode.scoped, bind: mode.bind, replicas: options.replicas ?? 1 },
      { connection: options.broker },
    );
    const hubBus = new HubBus(options, bus, active);
    if (active) {
      options.log.info("hub bus open", { scoped: mode.scoped, bind: mode.bind });
      hubBus.#fanIn = bus.openFanIn({
        durable: HUB_FAN_IN_DURABLE,
        handle: (event) => hubBus.#handle(event),
        onProblem: (source, error) => options.log.warn("the hub cannot read an events stream", { stream: source, reason: reasonOf(error), problem: error.message }),
      });
      hubBus.sync();
      hubBus.#timer = setInterval(() => hubBus.sync(), options.refreshIntervalMs ?? HUB_BUS_REFRESH_MS);
      hubBus.#timer.unref();
      // A server that comes back (or comes late) is provisioned at once rather than at the next refresh.
      hubBus.#stopWatchingBroker = options.broker.onStateChange((change) => {
        if (change.state === "connected") void hubBus.sync();
      });
    }
    return hubBus;
  }

  /** The bus itself. */
  get bus(): Bus {
    return this.#bus;
  }

  /** The swarms only events named since the hub started, and the events handled per swarm. */
  eventSwarms(): { readonly unnamed: readonly string[]; readonly handled: Readonly<Record<string, number>> } {
    const status = this.status();
    return { unnamed: status.unnamed, handled: status.handled };
  }

  status(): HubBusStatus {
    return {
      scoped: this.#bus.scoped,
      bind: this.#bus.bind,
      active: this.#active,
      provisioned: [...this.#provisioned.keys()].sort(),
      unnamed: [...this.#unnamed].filter((swarm) => !this.#named.has(swarm)).sort(),
      handled: Object.fromEntries([...this.#handled].sort(([a], [b]) => a.localeCompare(b))),
      sources: this.#fanIn?.sources() ?? [],
    };
  }

  /**
   * Provisions the legacy streams and every member swarm, then refreshes
   * the fan-in (new events streams). Runs in the background; concurrent
   * calls share a run. Resolves when the run ends (failures are logged).
   */
  sync(): Promise<void> {
    if (!this.#active || this.#closed) return Promise.resolve();
    this.#syncing ??= this.#sync().finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  /**
   * Provisions swarms the operator just named (a scope, an invite, a
   * join or refresh that grants them) and waits for it, so that the
   * credential's streams exist when the call answers. Resolves at once when
   * the hub does not provision (not scoped, or bind mode); rejects when the
   * broker cannot be reached.
   */
  async provisionNamed(swarms: readonly string[]): Promise<void> {
    for (const swarm of swarms) this.#named.add(swarm);
    if (!this.#active || this.#closed) return;
    for (const swarm of swarms) await this.ensureSwarm(swarm);
  }

  /**
   * Ensures `swarm`'s streams (scoped, provisioning); remembered once it
   * succeeded. `eventOnly`: an event names the swarm and the operator did
   * not; its streams are created with {@link EVENT_ONLY_STREAM_DESCRIPTION}.
   */
  ensureSwarm(swarm: string, options: { eventOnly?: boolean } = {}): Promise<void> {
    if (!this.#bus.scoped || !this.#bus.provisioning || !isSwarmName(swarm)) return Promise.resolve();
    let pending = this.#provisioned.get(swarm);
    if (pending === undefined) {
      if (this.#provisioned.size >= this.#maxSwarms) {
        if (!this.#capLogged) this.#o.log.warn("the hub provisions no more swarms: the bound is reached", { bound: this.#maxSwarms });
        this.#capLogged = true;
        return Promise.resolve();
      }
      if (options.eventOnly === true) {
        this.#unnamed.add(swarm);
        this.#o.log.info("an event names a swarm no operator named: its streams are created and grant nothing", { swarm });
      }
      pending = this.#provision(swarm, options.eventOnly === true);
      this.#provisioned.set(swarm, pending);
      pending.catch(() => {
        if (this.#provisioned.get(swarm) === pending) this.#provisioned.delete(swarm);
      });
    }
    return pending;
  }

  migrateState(params: MigrateStateParams, signal?: AbortSignal): Promise<MigrationResult> {
    return this.#migrate("state", params.swarm, () => this.#bus.migrateState({ ...params, pausePoints: this.#pause }, signal));
  }

  migrateQueue(params: MigrateQueueParams, signal?: AbortSignal): Promise<MigrationResult> {
    return this.#migrate("queue", params.swarm, () => this.#bus.migrateQueue({ ...params, pausePoints: this.#pause }, signal));
  }

  migrateDead(params: MigrateDeadParams, signal?: AbortSignal): Promise<MigrationResult> {
    return this.#migrate("dead", params.swarm, () => this.#bus.migrateDead({ ...params, pausePoints: this.#pause }, signal));
  }

  /** Stops the fan-in (events being handled finish first); the connection is the hub's and stays open. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    this.#stopWatchingBroker?.();
    await this.#syncing?.catch(() => undefined);
    await this.#fanIn?.close();
    await this.#bus.close();
  }

  async #sync(): Promise<void> {
    try {
      if (this.#bus.provisioning || this.#bus.scoped) await this.#bus.provisionLegacyStreams();
      const named = await this.#o.memberSwarms();
      this.#named = new Set([...this.#named, ...named]);
      if (this.#bus.scoped && this.#bus.provisioning) {
        for (const swarm of named) {
          if (this.#closed) return;
          await this.ensureSwarm(swarm);
        }
      }
      await this.#fanIn?.refresh();
    } catch (error) {
      if (this.#closed) return;
      this.#o.log.warn("the hub's bus is not fully provisioned yet; it retries", { reason: reasonOf(error), ...safeErrorFields(error) });
    }
  }

  async #provision(swarm: string, eventOnly: boolean): Promise<void> {
    try {
      const provisioned = await this.#bus.provisionSwarm({ swarm, ...(eventOnly ? { description: EVENT_ONLY_STREAM_DESCRIPTION } : {}) });
      this.#o.log.info("swarm streams provisioned", { swarm, streams: provisioned.streams.length });
    } catch (error) {
      // Everything else was created; the legacy bucket keeps serving until its keys are migrated.
      if (error instanceof LegacyStateOwnershipError) {
        if (!this.#refusalsLogged.has(swarm)) {
          this.#refusalsLogged.add(swarm);
          this.#o.log.warn("a swarm's state stream was not created over legacy state", {
            swarm,
            problem: error.message,
            buckets: error.buckets.join(","),
            legacyBuckets: error.buckets.map((bucket) => `KV_${bucket}`).join(","),
            resolve: ownStateCommand(swarm, "<bucket>", "<key>... (or --no-legacy-keys)"),
          });
        }
        return;
      }
      throw error;
    }
    // A new events stream: read it now rather than at the next refresh.
    if (!this.#closed) void this.#fanIn?.refresh().catch(() => undefined);
  }

  async #handle(event: FannedInEvent): Promise<void> {
    if (event.swarm !== undefined) await this.ensureSwarm(event.swarm, { eventOnly: !this.#named.has(event.swarm) });
    const named = event.swarm ?? "";
    // Counted per swarm up to the bound, then together (the map stays bounded).
    const key = this.#handled.has(named) || this.#handled.size < this.#maxSwarms ? named : "(other)";
    this.#handled.set(key, (this.#handled.get(key) ?? 0) + 1);
    this.#o.log.debug("hub event fanned in", { stream: event.source, seq: event.seq, subject: event.subject, swarm: key, deliveries: event.deliveryCount });
  }

  async #migrate(kind: "state" | "queue" | "dead", swarm: string, run: () => Promise<MigrationResult>): Promise<MigrationResult> {
    this.#o.log.info("migration started", { kind, swarm });
    try {
      const result = await run();
      this.#o.log.info("migration finished", { kind, swarm, outcome: result.outcome, copied: result.copied, skipped: result.skipped, total: result.total });
      // A migration creates the target streams; the fan-in picks up a new events stream.
      if (this.#active && !this.#closed) void this.#fanIn?.refresh().catch(() => undefined);
      return result;
    } catch (error) {
      this.#o.log.warn("migration stopped", { kind, swarm, reason: reasonOf(error), problem: error instanceof SwarmError ? error.message : undefined });
      throw error;
    }
  }
}

function reasonOf(error: unknown): string {
  return error instanceof SwarmError ? error.reason : "internal";
}
