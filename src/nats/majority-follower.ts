/**
 * Keeps a connection to a cluster on a node that can serve JetStream.
 *
 * nats.js moves to another server only when its connection breaks. A node
 * cut off from its peers keeps its client connections (it answers pings)
 * while its JetStream requests time out or are refused: the other two
 * nodes form a working majority, and a connection that stays put fails
 * every call for the whole partition. So while a connection is up, a probe
 * asks JetStream for the account's information (`$JS.API.INFO`, answered
 * through the cluster's meta leader) every `intervalMs`, each within
 * `timeoutMs`. After `failuresToMove` probes in a row time out, find no
 * responder or are answered "cluster not available", the connection is
 * told to move: it closes (calls waiting on it fail at once as
 * `unavailable`) and reconnects to the other servers of its list first.
 * A node that still cannot reach its peers fails the connect check in turn,
 * so the connection keeps moving until it lands on the majority side.
 *
 * A failure a caller saw on a JetStream request (a timeout or a refusal
 * while connected) makes the next probe run at once, so a cut that the
 * lanes notice first is confirmed within one probe timeout.
 */
import type { NatsConnection } from "@nats-io/transport-node";

export interface MajorityFollowerOptions {
  /** Time between probes while they succeed. Default 1 000 ms. */
  readonly intervalMs?: number;
  /** How long one probe waits for its answer. Default 1 000 ms. */
  readonly timeoutMs?: number;
  /** Failed probes in a row that make the connection move. Default 2. */
  readonly failuresToMove?: number;
}

/** Defaults: a cut node is left 2–3 s after it stops serving JetStream. */
export const MAJORITY_FOLLOWER_DEFAULTS = Object.freeze({ intervalMs: 1_000, timeoutMs: 1_000, failuresToMove: 2 });

/** JetStream API error codes that mean this node cannot serve (no meta leader, no quorum). */
const NOT_SERVING_CODES: ReadonlySet<number> = new Set([10008]);

/** A replica not heard from for this long (nanoseconds, as the server reports `active`) counts as out of reach. */
const REPLICA_SILENT_NS = 4_000_000_000;

/** The streams a probe also asks about (shared by a connection and its siblings; the lanes core names its own). */
export interface ProbeStreams {
  current: readonly string[];
}

/**
 * One probe on one live connection: true when JetStream answered for the
 * account and, when a replicated stream is named, its leader answered with
 * at least one replica it still hears from.
 *
 * Why the stream: a node cut off from its peers that was the meta leader
 * (or a stream's leader) keeps that role for a while and answers
 * `$JS.API.INFO` itself (observed for more than 12 s on 2.9.10). Asked about
 * a stream, a cut node either cannot reach the stream's leader (no answer)
 * or is the leader and reports replicas it has not heard from.
 */
export async function probeJetStream(nc: NatsConnection, apiPrefix: string, timeoutMs: number, stream?: string): Promise<boolean> {
  try {
    const answer = await nc.request(`${apiPrefix}.INFO`, undefined, { timeout: timeoutMs });
    const body = answer.json<{ error?: { code?: number; err_code?: number } }>();
    if (body.error !== undefined) {
      if (body.error.err_code !== undefined && NOT_SERVING_CODES.has(body.error.err_code)) return false;
      // Any other answer comes from a node that can reach a meta leader.
      if ((body.error.code ?? 500) >= 500) return false;
    }
    if (stream === undefined) return true;
    const info = await nc.request(`${apiPrefix}.STREAM.INFO.${stream}`, undefined, { timeout: timeoutMs });
    const streamBody = info.json<{ error?: { code?: number; err_code?: number }; cluster?: { replicas?: { current?: boolean; active?: number; offline?: boolean }[] } }>();
    if (streamBody.error !== undefined) {
      if (streamBody.error.err_code !== undefined && NOT_SERVING_CODES.has(streamBody.error.err_code)) return false;
      return (streamBody.error.code ?? 500) < 500;
    }
    const replicas = streamBody.cluster?.replicas ?? [];
    if (replicas.length === 0) return true;
    return replicas.some((r) => r.offline !== true && (r.active ?? 0) < REPLICA_SILENT_NS);
  } catch {
    return false;
  }
}

/** The probe loop of one live connection; {@link stop} ends it (the connection's close does too). */
export class MajorityFollower {
  readonly #nc: NatsConnection;
  readonly #apiPrefix: string;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #failuresToMove: number;
  readonly #move: () => void;
  #failures = 0;
  #timer: NodeJS.Timeout | undefined;
  #probing = false;
  #stopped = false;

  /** Starts probing `nc`; `move` is called once, when the node stopped serving JetStream. */
  readonly #streams: ProbeStreams | undefined;
  #round = 0;

  constructor(nc: NatsConnection, apiPrefix: string, options: MajorityFollowerOptions, move: () => void, streams?: ProbeStreams) {
    this.#nc = nc;
    this.#streams = streams;
    this.#apiPrefix = apiPrefix;
    this.#intervalMs = options.intervalMs ?? MAJORITY_FOLLOWER_DEFAULTS.intervalMs;
    this.#timeoutMs = options.timeoutMs ?? MAJORITY_FOLLOWER_DEFAULTS.timeoutMs;
    this.#failuresToMove = Math.max(1, options.failuresToMove ?? MAJORITY_FOLLOWER_DEFAULTS.failuresToMove);
    this.#move = move;
    void nc.closed().then(() => this.stop());
    this.#schedule(this.#intervalMs);
  }

  /** A JetStream request on this connection timed out or was refused: probe now. */
  suspect(): void {
    if (this.#stopped || this.#probing) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    void this.#probe();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.#probe(), delayMs);
    // Probing alone must not keep a process alive.
    this.#timer.unref();
  }

  async #probe(): Promise<void> {
    this.#timer = undefined;
    if (this.#stopped || this.#nc.isClosed()) return;
    this.#probing = true;
    // One named stream per probe, in turn.
    const names = this.#streams?.current ?? [];
    const stream = names.length === 0 ? undefined : names[this.#round++ % names.length];
    const served = await probeJetStream(this.#nc, this.#apiPrefix, this.#timeoutMs, stream);
    this.#probing = false;
    if (this.#stopped) return;
    this.#failures = served ? 0 : this.#failures + 1;
    if (this.#failures >= this.#failuresToMove) {
      this.stop();
      this.#move();
      return;
    }
    // A failed probe is confirmed at once rather than after a full interval.
    this.#schedule(served ? this.#intervalMs : Math.min(this.#intervalMs, 250));
  }
}
