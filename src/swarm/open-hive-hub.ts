/**
 * Opening the hub from a data directory and its settings (the variables
 * the server's swarm binding declares, read by hubSettingsFromEnv before
 * anything starts): the hive's trust material (`laneway hive init`), the
 * signer record (`AGENTIHOOKS_NATS_SIGNER`), the hub state, Redis
 * (`LANEWAY_HIVE_REDIS_URL`), and two NATS connections of its own — the
 * hub's service user in the hive account, and a system account user that
 * pushes hive account updates (revocations, signing keys). The hub answers
 * account slot requests (`slots.*.*`, queue group `hub-slots`) on its own
 * connection from the moment it opens until it closes. Its bus
 * (hub-bus.ts: provisioning, event fan-in and migration, per
 * `AGENTIHOOKS_BUS_SCOPED`/`AGENTIHOOKS_BUS_BIND`) runs on that connection too.
 */
import type { Env } from "../config/index.js";
import type { PausePoints } from "../fault-injection/pause-points.js";
import { envValue, Secret } from "../config/index.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import { BrokerConnection } from "../nats/index.js";
import { HiveAccountPublisher } from "./account-claims.js";
import { SwarmError } from "../swarm-bus/index.js";
import { HiveHub, type StoreSwarms } from "./hive-hub.js";
import { loadHiveTrust, type HiveTrust } from "./hive-trust.js";
import { HIVE_ENV, swarmOfStream } from "../swarm-bus/index.js";
import { busModeFromEnv, isSwarmName } from "../swarm-bus/internal.js";
import { EVENT_ONLY_STREAM_DESCRIPTION, HubBus, type HubBusMode } from "./hub-bus.js";
import { HubStore } from "./hub-store.js";
import { REDIS_URL_ENV } from "./redis-accounts.js";
import { openSignerStore, SIGNER_ENV } from "./signer-store.js";
import { slotPolicyFromEnv, type SlotPolicy } from "./slots/slot-policy.js";
import { SlotResponder } from "./slots/slot-responder.js";

/** The hub's settings: what its variables (the specification's names) say. */
export interface HubSettings {
  /** `AGENTIHOOKS_NATS_SIGNER`: where the signer record lives (undefined: the hive's own, in its folder). */
  readonly signer: string | undefined;
  /** `LANEWAY_HIVE_REDIS_URL`: the hive's Redis, for member passwords. */
  readonly redisUrl: Secret | undefined;
  /** `LANEWAY_HIVE_SLOT_ACCOUNTS`, `LANEWAY_HIVE_SLOTS_PER_HIVE`. */
  readonly slotPolicy: SlotPolicy;
  readonly busMode: HubBusMode;
}

/** The hub's settings from these variables; refuses bad values (`swarm_invalid`, naming the variable) before anything opens. */
export function hubSettingsFromEnv(env: Env): HubSettings {
  const redisUrl = envValue(env, REDIS_URL_ENV);
  return {
    signer: envValue(env, SIGNER_ENV),
    redisUrl: redisUrl === undefined ? undefined : new Secret(redisUrl),
    slotPolicy: slotPolicyFromEnv(env),
    busMode: { ...busModeFromEnv(env), legacy: envValue(env, HIVE_ENV.bus) !== undefined },
  };
}

export interface OpenHiveHubOptions {
  readonly dataDir: string;
  readonly settings: HubSettings;
  /** The NATS servers Laneway uses (the embedded one, or `--nats-url`). */
  readonly servers: readonly string[];
  readonly log: Logger;
  /** Relative `file:` signer folders resolve against it (default the working directory). */
  readonly cwd?: string;
  readonly credentialLifetimeMs?: number;
  /** How long opening waits for the hub's NATS connections (default 10 s); later they connect in the background. */
  readonly connectWaitMs?: number;
  /** Replicas of the hub's slot buckets (the server's `--replicas`; default 1). */
  readonly replicas?: number;
  /** Migration pause points (tests only; the swarm binding passes those named in `LANEWAY_PAUSE_AT`); default: none. */
  readonly pausePoints?: PausePoints;
}

/** An opened hub and what it holds. */
export interface OpenedHive {
  readonly hub: HiveHub;
  readonly trust: HiveTrust;
  /** The hub's own connection in the hive account. */
  readonly hubBroker: BrokerConnection;
  /** The system account connection that pushes account updates. */
  readonly systemBroker: BrokerConnection;
  /** Answers account slot requests from the `hub-slots` queue group. */
  readonly slots: SlotResponder;
  /** Provisioning, event fan-in and migration (hub-bus.ts). */
  readonly bus: HubBus;
  /** What the signer record is (`file` or `hub`). */
  readonly signerKind: "file" | "hub";
  close(): Promise<void>;
}

/**
 * Opens the hub, or returns undefined when the hive is not initialized.
 * Refuses a malformed or unreadable signer record (SwarmError) before
 * opening anything.
 */
export async function openHiveHub(options: OpenHiveHubOptions): Promise<OpenedHive | undefined> {
  const trust = await loadHiveTrust(options.dataDir);
  if (trust === undefined) return undefined;
  const { settings } = options;
  const signer = openSignerStore(settings.signer, trust.dir, options.cwd);
  await signer.read();
  const store = await HubStore.open({ statePath: trust.statePath, signer, redisUrl: settings.redisUrl });

  const opened: { close(): Promise<unknown> }[] = [];
  try {
    const hubBroker = await BrokerConnection.open({
      servers: options.servers,
      credentialsFile: trust.credsPaths.hub,
      name: "laneway-hub",
      initialConnect: "retry",
    });
    opened.push(hubBroker);
    const systemBroker = await BrokerConnection.open({
      servers: options.servers,
      credentialsFile: trust.credsPaths.system,
      name: "laneway-hub-system",
      initialConnect: "retry",
      verifyJetStream: false,
    });
    opened.push(systemBroker);
    const hub = new HiveHub({
      trust,
      store,
      publisher: new HiveAccountPublisher(trust, systemBroker),
      defaultBusUrl: trust.busUrl ?? options.servers[0]!,
      listSwarms: () => swarmsInStore(hubBroker),
      log: options.log,
      ...(options.credentialLifetimeMs === undefined ? {} : { credentialLifetimeMs: options.credentialLifetimeMs }),
    });
    // The server is usually up already (the embedded one always is): wait a
    // little for both connections, so that the first calls find them; a
    // server that comes later is joined in the background.
    await bothConnected([hubBroker, systemBroker], options.connectWaitMs ?? 10_000);
    // Bring the server's hive account up to date (a server the operator
    // provisioned may hold an older one) as soon as the system user connects.
    const sync = () =>
      hub.syncAccount().catch((error: unknown) =>
        options.log.warn("the hive account could not be updated on the NATS server; the next join or refresh retries", safeErrorFields(error)),
      );
    if (systemBroker.state === "connected") void sync();
    const unsubscribe = systemBroker.onStateChange((change) => {
      if (change.state === "connected") void sync();
    });
    const slots = SlotResponder.start({
      broker: hubBroker,
      policy: settings.slotPolicy,
      isMember: (hive) => hub.state.members[hive] !== undefined,
      log: options.log,
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
    });
    const bus = await HubBus.open({
      broker: hubBroker,
      mode: settings.busMode,
      log: options.log,
      memberSwarms: () => hub.namedSwarms(),
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
      ...(options.pausePoints === undefined ? {} : { pausePoints: options.pausePoints }),
    });
    hub.useMigrator(bus);
    hub.useProvisioner(bus);
    const stopBusSync = hub.onModeChange(() => void bus.sync());
    return {
      hub,
      trust,
      hubBroker,
      systemBroker,
      slots,
      bus,
      signerKind: store.signerKind,
      async close() {
        unsubscribe();
        stopBusSync();
        await bus.close();
        await slots.close();
        await store.close();
        await systemBroker.close();
        await hubBroker.close();
      },
    };
  } catch (error) {
    for (const part of opened.reverse()) await part.close().catch(() => {});
    await store.close();
    throw error;
  }
}

/** Resolves once every connection is connected, or after `timeoutMs`. */
async function bothConnected(brokers: readonly BrokerConnection[], timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const unsubscribes: (() => void)[] = [];
  await new Promise<void>((resolve) => {
    const check = () => {
      if (brokers.every((b) => b.state === "connected")) resolve();
    };
    for (const broker of brokers) unsubscribes.push(broker.onStateChange(check));
    timer = setTimeout(resolve, timeoutMs);
    check();
  });
  clearTimeout(timer);
  for (const unsubscribe of unsubscribes) unsubscribe();
}

/**
 * The swarms with a stream on the server, in either name format (sorted):
 * `inStore` when one of its streams was not created by the hub for an
 * event alone (the hub marks those with EVENT_ONLY_STREAM_DESCRIPTION),
 * `eventOnly` when every one of them was. Only the hub creates streams in
 * the hive account (no member grant allows it), so the mark is the hub's.
 */
export async function swarmsInStore(hubBroker: BrokerConnection): Promise<StoreSwarms> {
  const inStore = new Set<string>();
  const eventOnly = new Set<string>();
  try {
    for await (const info of hubBroker.jetstreamManager().streams.list()) {
      const swarm = swarmOfStream(info.config.name);
      if (swarm === undefined || !isSwarmName(swarm)) continue;
      if (info.config.description === EVENT_ONLY_STREAM_DESCRIPTION) eventOnly.add(swarm);
      else inStore.add(swarm);
    }
  } catch (error) {
    throw new SwarmError("swarm_unavailable", "the swarms in the store cannot be listed: the NATS server cannot be reached", { cause: error });
  }
  return { inStore: [...inStore].sort(), eventOnly: [...eventOnly].filter((swarm) => !inStore.has(swarm)).sort() };
}
