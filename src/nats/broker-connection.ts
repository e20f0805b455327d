/**
 * Laneway's connection to a NATS server or cluster.
 *
 * Why Laneway owns reconnection: nats.js has no reconnect buffer setting.
 * With its own reconnect on, core publishes made while disconnected are
 * dropped silently and JetStream requests hang until their timeout. The
 * cores promise that a call either reaches the broker or fails as
 * `unavailable` at once, so every nats.js connection here is opened with
 * `reconnect: false` (a lost connection closes, and every call on it fails
 * immediately with "closed connection"), and this class opens a fresh
 * connection after bounded exponential backoff with jitter.
 *
 * While not connected, the accessors throw {@link BrokerUnavailableError}
 * (`not_connected`) at once: nothing waits, nothing is queued. Objects
 * obtained earlier (a JetStreamClient, a KV handle) belong to the
 * connection they came from; after a reconnect they fail with a closed
 * connection error, so callers fetch them from here per operation (they
 * are cheap) or watch {@link BrokerConnection.generation}.
 */
import { readFile } from "node:fs/promises";

import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import type { JetStreamClient, JetStreamManager, JetStreamOptions } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, credsAuthenticator, nkeyAuthenticator, PermissionViolationError } from "@nats-io/transport-node";
import type { Authenticator, NatsConnection, Status } from "@nats-io/transport-node";

import { BrokerUnavailableError, classifyNatsError, classifyServerError, type DisconnectReason, type NatsFailure } from "./broker-errors.js";
import { MajorityFollower, type MajorityFollowerOptions, type ProbeStreams } from "./majority-follower.js";

/** Lifecycle of a {@link BrokerConnection}. */
export type BrokerState = "connecting" | "connected" | "disconnected" | "closed";

/** Delivered to state listeners on every transition. */
export interface BrokerStateChange {
  readonly state: BrokerState;
  readonly previous: BrokerState;
  /** Increments on each new live connection; unchanged by other transitions. */
  readonly generation: number;
  /**
   * Why the connection was lost or an attempt failed, classified (safe to
   * report: fixed message and typed fields; never log its `cause`).
   */
  readonly failure: NatsFailure | undefined;
  /**
   * On the change from `connected` to `disconnected`: why the live
   * connection ended, when it can be told (the server's `-ERR`, missed
   * pings, what {@link BrokerConnectionOptions.explainDisconnect} found);
   * undefined otherwise.
   */
  readonly disconnect?: DisconnectReason | undefined;
}

/** Reconnect delays: `initialMs` doubling up to `maxMs`, each with jitter. */
export interface BackoffOptions {
  /** First delay. Default 50 ms. */
  initialMs?: number;
  /** Cap. Default 3 000 ms. */
  maxMs?: number;
  /**
   * Fraction of each delay that is randomised (0 = none, 1 = anywhere in
   * [0, delay]). Default 0.5: a delay d is drawn from [d/2, d].
   */
  jitter?: number;
}

export interface BrokerConnectionOptions {
  /** Server URL(s): `nats://host:port`, or a list for a cluster. */
  servers: string | readonly string[];
  /**
   * Path of a `.creds` file (user JWT + nkey seed) or of a bare user nkey
   * seed. Read again on every connect attempt so rotated credentials are
   * picked up.
   */
  credentialsFile?: string;
  /**
   * Any other nats.js authenticator (user/password, token, nkey), e.g.
   * `usernamePasswordAuthenticator(user, pass)`. Not combined with
   * `credentialsFile`: when both are set, the credentials file wins.
   */
  authenticator?: Authenticator;
  /** Connection name shown in the server's monitoring. */
  name?: string;
  /** Inbox prefix, for users whose permissions allow only `_INBOX.<user>.>` replies. */
  inboxPrefix?: string;
  /**
   * Initial connect: `"fail"` (default) rejects {@link BrokerConnection.open}
   * with the classified error if the first attempt fails; `"retry"` returns
   * at once in state `connecting` and keeps trying in the background.
   */
  initialConnect?: "fail" | "retry";
  /** Reconnect backoff. */
  backoff?: BackoffOptions;
  /** Per-attempt connect timeout in ms. Default 5 000. */
  connectTimeoutMs?: number;
  /**
   * Ping interval in ms: how soon a silent (hung, paused, partitioned)
   * server is detected — after `maxPingOut` unanswered pings. Default
   * 10 000 ms with 2 pings outstanding.
   */
  pingIntervalMs?: number;
  maxPingOut?: number;
  /** Options for the JetStream client/manager (domain, apiPrefix, request timeout). */
  jetstream?: JetStreamOptions;
  /**
   * Ask JetStream for account info before reporting `connected`, so a
   * server without JetStream (or a cluster without a meta leader) counts as
   * unavailable. Default true. Turn off for users not allowed `$JS.API.INFO`.
   */
  verifyJetStream?: boolean;
  /**
   * Asked when the server closed a live connection without saying why (no
   * `-ERR`, no missed pings): the embedded server's supervisor answers from
   * the process's state and the server's log (`broker_exited`,
   * `slow_consumer`). `clientId` is the connection's `cid` on the server.
   */
  explainDisconnect?: (clientId: number | undefined) => Promise<DisconnectReason | undefined>;
  /**
   * Leave a node that stops serving JetStream while the connection to it
   * is up (a node cut off from its peers), for another server of the list
   * (src/nats/majority-follower.ts). Default: on when `servers` lists more
   * than one server and `verifyJetStream` is on; `false` turns it off.
   */
  followMajority?: MajorityFollowerOptions | false;
  /** The replicated streams the majority probe asks about; shared with siblings (see {@link BrokerConnection.probeStreams}). */
  probeStreams?: ProbeStreams;
}

type Listener = (change: BrokerStateChange) => void;

/** The objects that belong to one live nats.js connection. */
interface Live {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly kvm: Kvm;
}

/**
 * A self-healing connection. Create with {@link BrokerConnection.open};
 * finish with {@link BrokerConnection.close}.
 */
export class BrokerConnection {
  readonly #options: BrokerConnectionOptions;
  readonly #listeners = new Set<Listener>();
  #state: BrokerState = "connecting";
  #live: Live | undefined;
  #generation = 0;
  #failedAttempts = 0;
  #timer: NodeJS.Timeout | undefined;
  #attempt: Promise<void> | undefined;
  #lastFailure: NatsFailure | undefined;
  /** Probes the live connection while it is up (a cluster only). */
  #follower: MajorityFollower | undefined;
  /** The server (host:port) the next attempts try last: the one just left for not serving JetStream. */
  #avoid: string | undefined;
  /** The live connection being left on purpose, so its close is reported as such. */
  #leaving: NatsConnection | undefined;

  private constructor(options: BrokerConnectionOptions) {
    this.#options = { ...options, probeStreams: options.probeStreams ?? { current: [] } };
  }

  /**
   * Names replicated streams whose leaders the majority probe asks about
   * (the lanes core names its lane streams): a node cut off from its peers
   * that still holds a leader role answers other JetStream requests itself.
   * Shared with every sibling.
   */
  probeStreams(names: readonly string[]): void {
    this.#options.probeStreams!.current = [...names];
  }

  /**
   * Connects. With `initialConnect: "fail"` (default) it resolves once
   * connected or rejects with the classified failure (a
   * {@link BrokerUnavailableError} for refused/unreachable/auth); with
   * `"retry"` it resolves at once and connects in the background.
   */
  static async open(options: BrokerConnectionOptions): Promise<BrokerConnection> {
    const broker = new BrokerConnection(options);
    if (options.initialConnect === "retry") {
      broker.#runAttempt();
      return broker;
    }
    try {
      await broker.#connectOnce();
    } catch (err) {
      const failure = classifyNatsError(err);
      broker.#lastFailure = failure;
      broker.#setState("closed", failure);
      throw failure;
    }
    broker.#watch();
    return broker;
  }

  /** The server URL(s) this connection uses. */
  get servers(): readonly string[] {
    const { servers } = this.#options;
    return typeof servers === "string" ? [servers] : servers;
  }

  /** Current state. */
  get state(): BrokerState {
    return this.#state;
  }

  /** Number of connections opened so far; a new value means handles from before are dead. */
  get generation(): number {
    return this.#generation;
  }

  /** The nats-server version of the live connection's server (its INFO), if connected. */
  get serverVersion(): string | undefined {
    return this.#state === "connected" ? this.#live?.nc.info?.version : undefined;
  }

  /**
   * A JetStream request on the live connection timed out or was refused
   * while connected: when the connection follows the majority, it checks
   * at once whether its node still serves JetStream (and moves if not).
   */
  suspectJetStream(): void {
    this.#follower?.suspect();
  }

  /** The inbox prefix replies use (nats.js's default `_INBOX` unless the options name one). */
  get inboxPrefix(): string {
    return this.#options.inboxPrefix ?? "_INBOX";
  }

  /**
   * Opens a second, independent connection with the same servers,
   * credentials and settings under another name, so that one kind of
   * traffic cannot share another's fate: the broker may cut one connection
   * (a slow consumer, say) while the other keeps working. When this one is
   * connected the sibling's first attempt must succeed too (it rejects
   * otherwise); when it is not, the sibling keeps trying in the background.
   */
  sibling(name: string): Promise<BrokerConnection> {
    return BrokerConnection.open({ ...this.#options, name, initialConnect: this.#state === "connected" ? "fail" : "retry" });
  }

  /** The classified reason of the last lost connection or failed attempt (cleared on connect). */
  get lastFailure(): NatsFailure | undefined {
    return this.#lastFailure;
  }

  /**
   * Calls `listener` on every state change until the returned function is
   * called. Listeners run synchronously; an exception in one is swallowed so
   * it cannot break reconnection.
   */
  onStateChange(listener: Listener): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** The live nats.js connection; throws BrokerUnavailableError if not connected. */
  connection(): NatsConnection {
    return this.#requireLive().nc;
  }

  /** The JetStream client of the live connection; throws BrokerUnavailableError if not connected. */
  jetstream(): JetStreamClient {
    return this.#requireLive().js;
  }

  /** The JetStreamManager of the live connection; throws BrokerUnavailableError if not connected. */
  jetstreamManager(): JetStreamManager {
    return this.#requireLive().jsm;
  }

  /** The KV manager of the live connection; throws BrokerUnavailableError if not connected. */
  kvm(): Kvm {
    return this.#requireLive().kvm;
  }

  /**
   * Stops reconnecting and drains the live connection (bounded by
   * `timeoutMs`, default 5 000; then it is closed hard). Idempotent.
   * Resolves `drained: false` when the drain failed or timed out and the
   * connection had to be closed hard.
   */
  async close(options: { timeoutMs?: number } = {}): Promise<{ drained: boolean }> {
    if (this.#state === "closed") {
      await this.#attempt;
      return { drained: true };
    }
    this.#setState("closed", undefined);
    this.#follower?.stop();
    clearTimeout(this.#timer);
    this.#timer = undefined;
    // An attempt in flight notices the closed state and closes what it opened.
    await this.#attempt;
    const live = this.#live;
    this.#live = undefined;
    if (live === undefined) return { drained: true };
    return { drained: await drainBounded(live.nc, options.timeoutMs ?? 5_000) };
  }

  #requireLive(): Live {
    const live = this.#live;
    if (this.#state !== "connected" || live === undefined || live.nc.isClosed()) {
      throw new BrokerUnavailableError("not_connected");
    }
    return live;
  }

  /** One attempt: connect, build the JetStream objects, verify JetStream. Sets state. */
  async #connectOnce(): Promise<void> {
    this.#setState("connecting", undefined);
    const o = this.#options;
    const authenticator = o.credentialsFile === undefined ? o.authenticator : authenticatorOf(await readCredentials(o.credentialsFile));
    const following = this.#following();
    const servers = typeof o.servers === "string" ? [o.servers] : [...o.servers];
    const nc = await connect({
      // Following the majority: the list in an order that tries the node
      // just left last, and only the operator's list (not the addresses
      // the cluster gossips, which may not be reachable from here).
      servers: following ? orderAvoiding(servers, this.#avoid) : servers,
      ...(following ? { noRandomize: this.#avoid !== undefined, ignoreClusterUpdates: true } : {}),
      reconnect: false,
      timeout: o.connectTimeoutMs ?? 5_000,
      pingInterval: o.pingIntervalMs ?? 10_000,
      maxPingOut: o.maxPingOut ?? 2,
      // No stack trace captured for every request: it cost a fifth of the
      // lanes core's CPU (bench lanes-publish), and errors are classified
      // by code, never by their trace.
      noAsyncTraces: true,
      ...(authenticator === undefined ? {} : { authenticator }),
      ...(o.name === undefined ? {} : { name: o.name }),
      ...(o.inboxPrefix === undefined ? {} : { inboxPrefix: o.inboxPrefix }),
    });
    try {
      const jsm = await jetstreamManager(nc, { ...o.jetstream, checkAPI: false });
      if (o.verifyJetStream ?? true) {
        // Following the majority, a node that cannot reach a meta leader is
        // refused quickly, and the next attempt starts with another.
        const verifier = following ? await jetstreamManager(nc, { ...o.jetstream, checkAPI: false, timeout: VERIFY_TIMEOUT_MS }) : jsm;
        try {
          await verifier.getAccountInfo();
        } catch (err) {
          if (following) this.#avoid = nc.getServer();
          throw err;
        }
      }
      if (this.#state === "closed") throw new BrokerUnavailableError("not_connected");
      const js = jetstream(nc, o.jetstream);
      this.#generation += 1;
      this.#live = { nc, js, jsm, kvm: new Kvm(js) };
    } catch (err) {
      await nc.close().catch(() => undefined);
      throw err;
    }
    this.#failedAttempts = 0;
    this.#lastFailure = undefined;
    this.#setState("connected", undefined);
  }

  /** Runs a background attempt; on failure schedules the next one. */
  #runAttempt(): void {
    this.#timer = undefined;
    if (this.#state === "closed") return;
    const attempt = this.#connectOnce().then(
      () => this.#watch(),
      (err: unknown) => {
        if (this.#state === "closed") return;
        this.#failedAttempts += 1;
        const failure = classifyNatsError(err);
        this.#lastFailure = failure;
        this.#setState("disconnected", failure);
        this.#schedule();
      },
    );
    const tracked: Promise<void> = attempt.finally(() => {
      if (this.#attempt === tracked) this.#attempt = undefined;
    });
    this.#attempt = tracked;
  }

  /** Whether this connection leaves nodes that stop serving JetStream. */
  #following(): boolean {
    const o = this.#options;
    return o.followMajority !== false && (o.verifyJetStream ?? true) && this.servers.length > 1;
  }

  /** Leaves the live connection's node: it closes, and the reconnect tries the others first. */
  #leave(live: Live): void {
    if (this.#live !== live || this.#state !== "connected") return;
    this.#avoid = live.nc.getServer();
    this.#leaving = live.nc;
    void live.nc.close().catch(() => undefined);
  }

  /** Reacts when the live connection closes by itself, saying why when it can be told. */
  #watch(): void {
    const live = this.#live;
    if (live === undefined) return;
    this.#follower?.stop();
    this.#follower = undefined;
    if (this.#following()) {
      const o = this.#options;
      const prefix = o.jetstream?.apiPrefix ?? (o.jetstream?.domain ? `$JS.${o.jetstream.domain}.API` : "$JS.API");
      const follow = typeof o.followMajority === "object" ? o.followMajority : {};
      this.#follower = new MajorityFollower(live.nc, prefix, follow, () => this.#leave(live), o.probeStreams);
    }
    // What the server said (a fatal -ERR), missed pings, lame duck mode:
    // the first wins. An -ERR the server does not always close for (an
    // unknown text, too many subscriptions) only counts when nothing better
    // explains the close.
    let told: DisconnectReason | undefined;
    let hinted: DisconnectReason | undefined;
    // Read now: nats.js forgets the server's INFO once the connection is closed.
    const clientId = live.nc.info?.client_id;
    void (async () => {
      for await (const status of live.nc.status()) {
        const reason = disconnectReasonOf(status);
        if (reason === "server_error" || reason === "max_subscriptions_exceeded") hinted = reason;
        else told ??= reason;
      }
    })().catch(() => undefined);
    void live.nc.closed().then(async (err) => {
      if (this.#live !== live) return; // closed by close() or replaced
      this.#live = undefined;
      if (this.#state === "closed") return;
      const failure =
        err === undefined ? new BrokerUnavailableError("connection_closed") : classifyNatsError(err);
      // Status events queued before the close are read first.
      await new Promise((resolve) => setImmediate(resolve));
      let disconnect = this.#leaving === live.nc ? ("jetstream_unresponsive" as const) : told;
      if (this.#leaving === live.nc) this.#leaving = undefined;
      if (disconnect === undefined) {
        const explained = await this.#options.explainDisconnect?.(clientId).catch(() => undefined);
        disconnect = explained ?? hinted ?? (isSocketFailure(err) ? "socket_error" : "closed_by_server");
      }
      if ((this.#state as BrokerState) === "closed") return;
      this.#lastFailure = failure;
      this.#setState("disconnected", failure, disconnect);
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#state === "closed" || this.#timer !== undefined) return;
    const delay = backoffDelay(this.#failedAttempts, this.#options.backoff);
    this.#timer = setTimeout(() => this.#runAttempt(), delay);
    // Reconnecting alone must not keep a process alive that has nothing else to do.
    this.#timer.unref();
  }

  #setState(state: BrokerState, failure: NatsFailure | undefined, disconnect?: DisconnectReason): void {
    const previous = this.#state;
    if (previous === state) return;
    if (previous === "closed") return; // terminal
    this.#state = state;
    const change: BrokerStateChange = { state, previous, generation: this.#generation, failure, disconnect };
    for (const listener of [...this.#listeners]) {
      try {
        listener(change);
      } catch {
        // A listener's bug must not stop reconnection.
      }
    }
  }
}

/** How long the connect check waits for JetStream when following the majority. */
const VERIFY_TIMEOUT_MS = 2_000;

/** `servers` starting after `avoid` (a `host:port` nats.js reported), which comes last; unchanged without it. */
export function orderAvoiding(servers: readonly string[], avoid: string | undefined): string[] {
  if (avoid === undefined) return [...servers];
  const index = servers.findIndex((server) => hostPort(server) === avoid);
  if (index < 0) return [...servers];
  return [...servers.slice(index + 1), ...servers.slice(0, index + 1)];
}

/** `host:port` of a server URL as nats.js names it (`nats://h:4222` → `h:4222`; the default port when none). */
function hostPort(server: string): string {
  const bare = server.replace(/^[a-z]+:\/\//i, "").replace(/\/.*$/, "").replace(/^[^@]*@/, "");
  const lower = bare.toLowerCase();
  return /:\d+$/.test(lower) ? lower : `${lower}:4222`;
}

/**
 * Delay before attempt `failures + 1`: initial × 2^failures, capped, with
 * the configured share randomised downwards (so concurrent Laneway
 * instances do not reconnect in lockstep).
 */
export function backoffDelay(failures: number, options: BackoffOptions = {}): number {
  const initial = options.initialMs ?? 50;
  const max = options.maxMs ?? 3_000;
  const jitter = Math.min(1, Math.max(0, options.jitter ?? 0.5));
  const base = Math.min(max, initial * 2 ** Math.min(failures, 30));
  return Math.round(base * (1 - jitter * Math.random()));
}

/** What a nats.js status event says about why the connection is ending, if anything. */
function disconnectReasonOf(status: Status): DisconnectReason | undefined {
  switch (status.type) {
    case "error":
      // A permission violation refuses one publish or subscription; the connection stays.
      return status.error instanceof PermissionViolationError ? undefined : classifyServerError(status.error.message);
    case "staleConnection":
      return "server_unresponsive";
    case "ldm":
      return "lame_duck_mode";
    default:
      return undefined;
  }
}

/** A socket failure (reset, broken pipe, timeout) as nats.js passes it to `closed()`. */
function isSocketFailure(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === "string" && /^E[A-Z]+/.test(code);
}

async function drainBounded(nc: NatsConnection, timeoutMs: number): Promise<boolean> {
  if (nc.isClosed()) return true;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"timeout">((r) => {
    timer = setTimeout(() => r("timeout"), timeoutMs);
  });
  try {
    const outcome = await Promise.race([nc.drain().then(() => "drained" as const), timeout]);
    if (outcome === "timeout") await nc.close();
    return outcome === "drained";
  } catch {
    await nc.close().catch(() => undefined);
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A credentials file is either a `.creds` file (a user JWT and its nkey
 * seed, for operator-mode servers) or a bare user nkey seed (`SU…`, for a
 * server that lists the user's public nkey, as the embedded one does).
 */
function authenticatorOf(file: Uint8Array): Authenticator {
  const text = new TextDecoder().decode(file).trim();
  if (/^SU[A-Z2-7]{56}$/.test(text)) return nkeyAuthenticator(new TextEncoder().encode(text));
  return credsAuthenticator(file);
}

async function readCredentials(path: string): Promise<Uint8Array> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new BrokerUnavailableError("credentials_unreadable", { cause: err });
  }
}
