import { CoreStartupError } from "../errors/core-error.js";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { silentLogger, type Logger } from "../log/logger.js";
import { BrokerConnection } from "../nats/index.js";
import { withinDeadline } from "./deadline.js";
import { LaneError } from "./errors.js";
import { LaneStore } from "./lane-store.js";
import { LaneWatchers, type LaneHold } from "./lane-watcher.js";
import { maxEnvelopeBytes, openNamespace, type Namespace } from "./namespace.js";
import { Publisher, type BatchOutcome, type PublishOutcome } from "./publisher.js";
import { LaneRegistry } from "./registry.js";
import { MAX_EVENTS, Replayer, type Cursor, type ReplayPage } from "./replay.js";
import type { LaneRecord, LanesConfig, Publication } from "./types.js";
import {
  WorkGroups,
  type AckAndClaimOutcome,
  type AckAndClaimParams,
  type Acked,
  type ClaimParams,
  type GroupInspection,
  type GroupObservation,
  type GroupTarget,
  type ReceiptOutcome,
  type ReceiptParams,
  type RecoverParams,
  type RecoveryResult,
  type WorkDelivery,
} from "./work-groups.js";

/**
 * Durable lanes as one object: the registry, publication, replay and
 * follow, over one namespace generation on JetStream.
 *
 * Two broker connections: publication, reservations, group ledgers and the
 * records claims read (with the lane watchers) use the lanes' connection;
 * Replay and Follow pages use a sibling connection of their own, so that
 * bulk reading cannot share a fate with writing. Both read with the flow
 * control of LaneStore.readFrom, each connection with its own byte budget,
 * and both keep a read's consumer for the read that continues it (the
 * next page; a group's next scan from its cursor).
 */

/** Records of a PublishBatch that share one operation_timeout of the call's bound. */
const BATCH_SHARE = 32;

/** Concurrent Follow streams one project may hold. */
export const MAX_FOLLOWERS_PER_PROJECT = 32;

/** How often a caught-up follower hears from the server when nothing is published. */
export const FOLLOW_HEARTBEAT_MS = 15_000;

export interface LanesCoreOptions {
  readonly config: LanesConfig;
  /** Laneway's own NATS connection; lanes use it unless their configuration names a broker of its own. */
  readonly broker: BrokerConnection;
  /** Replicas of every stream and bucket. */
  readonly replicas: number;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
  /** How often a caught-up follower gets an empty page with its cursor (default 15 s). */
  readonly heartbeatMs?: number;
}

/** One page of a followed lane. */
export interface FollowPage {
  readonly events: readonly LaneRecord[];
  /** Save it after processing `events`. */
  readonly cursor: number;
}

/** The lane a call addresses, as the authenticated project. */
export interface LaneTarget {
  /** The authenticated project. */
  readonly project: string;
  readonly lane: string;
}

export interface PublishParams extends LaneTarget {
  readonly publication: Publication;
}

export interface PublishBatchParams extends LaneTarget {
  /** Up to 128 publications, each answered on its own. */
  readonly publications: readonly Publication[];
}

export interface ReplayParams extends LaneTarget {
  /** The last sequence the caller processed (0: from the start). */
  readonly cursor: Cursor;
  /** The most events of the page (0: the default, at most MAX_EVENTS). */
  readonly maxEvents: number;
}

export interface FollowParams extends LaneTarget {
  /** The last sequence the caller processed (0: from the start). */
  readonly cursor: Cursor;
}

/**
 * Every operation takes one params object and the call's signal (aborted
 * with a TimeoutError at the caller's deadline, an AbortError otherwise).
 */
export interface LanesCore {
  readonly registry: LaneRegistry;
  readonly namespace: Namespace;
  publish(params: PublishParams, signal?: AbortSignal): Promise<PublishOutcome>;
  publishBatch(params: PublishBatchParams, signal?: AbortSignal): Promise<BatchOutcome[]>;
  replay(params: ReplayParams, signal?: AbortSignal): Promise<ReplayPage>;
  /** Pages from the cursor, then new events as they are published, heartbeats while idle, until `signal` aborts. */
  follow(params: FollowParams, signal: AbortSignal): AsyncGenerator<FollowPage>;
  /** Leases up to `max` deliveries of a group, waiting up to `waitMs` when none is eligible. */
  claim(params: ClaimParams, signal?: AbortSignal): Promise<WorkDelivery[]>;
  renew(params: ReceiptParams, signal?: AbortSignal): Promise<ReceiptOutcome<{ leaseExpiresAt: number }>[]>;
  ack(params: ReceiptParams, signal?: AbortSignal): Promise<ReceiptOutcome<Acked>[]>;
  /** Completes deliveries and leases up to `max` more in one write of the group's state, without waiting for work. */
  ackAndClaim(params: AckAndClaimParams, signal?: AbortSignal): Promise<AckAndClaimOutcome>;
  nack(params: ReceiptParams, signal?: AbortSignal): Promise<ReceiptOutcome<{ retryAt: number; attempt: number; duplicate: boolean }>[]>;
  inspect(params: GroupTarget, signal?: AbortSignal): Promise<GroupInspection>;
  recover(params: RecoverParams, signal?: AbortSignal): Promise<RecoveryResult>;
  /** The groups this process holds in memory, as last seen (no broker request): for metrics. */
  observeGroups(): GroupObservation[];
  /** Each lane's last sequence: one stream-info request per lane (the metrics collector bounds how often). */
  lastSequences(): Promise<Map<string, number>>;
  /**
   * True while every connection the lanes use is up: the one they write
   * over (Laneway's own, or the configuration's broker) and the readers'.
   * Each reconnects on its own, so one can be back before the other.
   */
  readonly connected: boolean;
  /** Calls `listener` whenever one of those connections changes state; returns the unsubscribe. */
  onConnectionChange(listener: () => void): () => void;
  close(): Promise<void>;
}

export async function openLanesCore(options: LanesCoreOptions): Promise<LanesCore> {
  const { config } = options;
  const log = options.logger ?? silentLogger;
  // A lanes configuration with its own `url` gets its own connection.
  const own = config.broker
    ? await BrokerConnection.open({
        servers: config.broker.servers,
        ...(config.broker.credentialsFile ? { credentialsFile: config.broker.credentialsFile } : {}),
        name: "laneway-lanes",
        initialConnect: "retry",
      })
    : undefined;
  const broker = own ?? options.broker;
  let readers: BrokerConnection | undefined;
  try {
    const namespace = await openNamespace(broker, config, options.replicas, log);
    readers = await openReaders(broker, log);
    // A replicated namespace: the connections' majority probe asks the lane streams' leaders.
    if (options.replicas > 1) broker.probeStreams([...namespace.streams.values()]);
    const registry = new LaneRegistry(config);
    const reads = { maxRecordBytes: maxEnvelopeBytes(config.bounds.maxPayload) };
    // Claims read a group's lane from its cursor on, claim after claim: their consumers are kept for the next read too.
    const store = new LaneStore(broker, config.bounds.operationTimeoutMs, options.replicas, { ...reads, reuseConsumers: true });
    // Replay and Follow pages continue one another: their consumers are kept for the next page.
    const readStore = new LaneStore(readers, config.bounds.operationTimeoutMs, options.replicas, { ...reads, reuseConsumers: true });
    const publisher = new Publisher(store, namespace, registry, options.pausePoints ?? noPausePoints);
    const replayer = new Replayer(readStore, namespace, registry);
    const watchers = new LaneWatchers(store, config.namespace);
    const groups = new WorkGroups(store, namespace, registry, watchers, undefined, log);
    groups.warnUnrecoverable(log);
    const followers = new Map<string, number>();
    const heartbeatMs = options.heartbeatMs ?? FOLLOW_HEARTBEAT_MS;
    // Every call answers within operation_timeout (and the caller's deadline), whatever the broker does.
    const bounded = <T>(action: string, signal: AbortSignal | undefined, run: (signal: AbortSignal) => Promise<T>, extraMs = 0): Promise<T> =>
      withinDeadline(config.bounds.operationTimeoutMs + extraMs, action, signal, run);

    return {
      registry,
      namespace,
      publish: ({ project, lane, publication }, signal) => bounded("publishing", signal, (s) => publisher.publish(project, lane, publication, s)),
      // A batch is up to 128 publications sharing the connection's throughput: operation_timeout for every 32 of them.
      publishBatch: ({ project, lane, publications }, signal) =>
        bounded("publishing a batch", signal, (s) => publisher.publishBatch(project, lane, publications, s), (Math.max(1, Math.ceil(publications.length / BATCH_SHARE)) - 1) * config.bounds.operationTimeoutMs),
      replay: ({ project, lane, cursor, maxEvents }, signal) => bounded("reading a page", signal, (s) => replayer.replay(project, lane, cursor, maxEvents, s)),
      async *follow({ project, lane, cursor }, signal) {
        registry.require(project, lane, "subscribe");
        const held = followers.get(project) ?? 0;
        if (held >= MAX_FOLLOWERS_PER_PROJECT) {
          throw new LaneError("lane_capacity", `project ${project} already follows ${held} lanes at once; close one (at most ${MAX_FOLLOWERS_PER_PROJECT})`);
        }
        followers.set(project, held + 1);
        let left = false;
        let hold: LaneHold | undefined;
        // The follower's slot and its hold on the lane's watcher go as soon
        // as the signal aborts, not only when the generator finishes: a
        // stream whose client stopped reading is suspended at its yield,
        // and once its connection is closed nothing may ever resume it.
        const leave = () => {
          if (left) return;
          left = true;
          hold?.release();
          const now = (followers.get(project) ?? 1) - 1;
          if (now === 0) followers.delete(project);
          else followers.set(project, now);
        };
        signal.addEventListener("abort", leave, { once: true });
        try {
          hold = await watchers.hold(lane);
          if (left) hold.release();
          // The caller's cursor until the first page answers with the examined sequence.
          let position: Cursor = cursor;
          let started = false;
          // The next page, read while the client takes the one before it.
          let ahead: { version: number; page: Promise<ReplayPage> } | undefined;
          while (!signal.aborted) {
            let version: number;
            let page: ReplayPage;
            if (ahead !== undefined) {
              ({ version } = ahead);
              page = await ahead.page;
              ahead = undefined;
            } else {
              version = hold.version();
              page = await bounded("reading a page", signal, (s) => replayer.page(lane, position, MAX_EVENTS, s));
            }
            if (page.examined > 0 || !started) {
              // The first page goes out at once, even empty: the follower
              // learns the stream is open and its cursor checked.
              started = true;
              position = page.cursor;
              if (page.examined > 0) {
                // Read ahead one page (at most: what waits for the client
                // stays within two pages); its failure is the next page's.
                const aheadVersion = hold.version();
                const next = bounded("reading a page", signal, (s) => replayer.page(lane, position, MAX_EVENTS, s));
                next.catch(() => undefined);
                ahead = { version: aheadVersion, page: next };
              }
              yield { events: page.events, cursor: page.cursor };
              if (page.examined > 0) continue;
            }
            const woken = await hold.wait(version, heartbeatMs, signal);
            if (!woken && !signal.aborted) yield { events: [], cursor: Number(position) };
          }
        } finally {
          signal.removeEventListener("abort", leave);
          leave();
        }
      },
      // A claim may wait for work as long as it asked before its broker work begins.
      claim: (params, signal) => bounded("claiming work", signal, (s) => groups.claim(params, s), Math.max(0, params.waitMs)),
      renew: (params, signal) => bounded("renewing leases", signal, (s) => groups.renew(params, s)),
      ack: (params, signal) => bounded("acknowledging work", signal, (s) => groups.ack(params, s)),
      ackAndClaim: (params, signal) => bounded("acknowledging and claiming work", signal, (s) => groups.ackAndClaim(params, s)),
      nack: (params, signal) => bounded("returning work", signal, (s) => groups.nack(params, s)),
      inspect: (params, signal) => bounded("inspecting a group", signal, (s) => groups.inspect(params, s)),
      recover: (params, signal) => bounded("recovering work", signal, (s) => groups.recover(params, s)),
      observeGroups: () => groups.observe(),
      async lastSequences() {
        const last = new Map<string, number>();
        await Promise.all(
          [...namespace.streams].map(async ([lane, stream]) => {
            const range = await store.range(stream).catch(() => undefined);
            if (range !== undefined) last.set(lane, range.last);
          }),
        );
        return last;
      },
      get connected() {
        return broker.state === "connected" && readers?.state === "connected";
      },
      onConnectionChange(listener) {
        const offWriter = broker.onStateChange(listener);
        const offReaders = readers?.onStateChange(listener);
        return () => {
          offWriter();
          offReaders?.();
        };
      },
      async close() {
        groups.close();
        watchers.close();
        readStore.close();
        await readers?.close();
        await own?.close();
      },
    };
  } catch (error) {
    await readers?.close();
    await own?.close();
    throw error;
  }
}

/** The connection Replay and Follow read over: a sibling of the lanes' own, whose state changes are logged. */
async function openReaders(broker: BrokerConnection, log: Logger): Promise<BrokerConnection> {
  let readers: BrokerConnection;
  try {
    readers = await broker.sibling("laneway-lanes-readers");
  } catch (error) {
    throw new CoreStartupError("lanes", "unavailable", "lanes: the message broker is unavailable while opening the readers' connection", { cause: error });
  }
  readers.onStateChange((change) => {
    if (change.state === "connected") log.info("the lane readers' NATS connection is available", { generation: change.generation });
    else if (change.state !== "closed") log.warn("the lane readers' NATS connection is not available", { state: change.state });
  });
  return readers;
}
