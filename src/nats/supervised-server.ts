/**
 * Keeps Laneway's embedded nats-server running.
 *
 * Why: the embedded broker is a child process, and a child can die on its
 * own (the OOM killer, `kill -9`, a crash). Laneway's connection reconnects
 * by itself, but only to a server that exists; without supervision every
 * lane call would answer `unavailable` for good. So when the server exits
 * without having been asked to, the supervisor logs how it ended and starts
 * it again on the same store, the same port (clients' URL stays valid) and
 * the same configuration — refreshed through `refresh` where it depends on
 * state (the hive's accounts) — and the connection finds it there.
 *
 * Bounded: attempts follow each other after 0 s, 1 s, 2 s, 4 s and 8 s (at
 * most {@link DEFAULT_RESTART_POLICY}.maxAttempts in a row, about 15 s of
 * waiting). A server that ran for `stableAfterMs` (30 s) before it exited
 * starts a new series; one that keeps dying sooner uses up the same series,
 * so a crash loop ends as surely as a binary that is gone. When a series is
 * used up, {@link SupervisedNatsServer.fatal} settles: Laneway then stops
 * and exits non-zero, so that whatever supervises Laneway (systemd, a
 * container runtime) takes over with a fresh process.
 *
 * Stopping (`stop`, on Laneway's graceful shutdown) ends supervision first,
 * so the server's exit then is expected and nothing restarts it.
 */
import { setTimeout as sleep } from "node:timers/promises";

import { safeErrorFields, type Logger } from "../log/logger.js";
import type { DisconnectReason } from "./broker-errors.js";
import { EmbeddedServerRestartError } from "./embedded-server-errors.js";
import { EmbeddedNatsServer, type EmbeddedNatsServerOptions, type ServerExit } from "./embedded-server.js";
import { processHasEnded } from "./process-lifetime.js";

/** How restarts are paced and bounded. */
export interface RestartPolicy {
  /** Attempts in a row before giving up. Default 5. */
  readonly maxAttempts: number;
  /** Delay before the second attempt of a series (the first is immediate); doubles each time. Default 1 000 ms. */
  readonly initialDelayMs: number;
  /** Cap of the delay. Default 8 000 ms. */
  readonly maxDelayMs: number;
  /** A server that ran at least this long before exiting starts a new series. Default 30 000 ms. */
  readonly stableAfterMs: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = Object.freeze({
  maxAttempts: 5,
  initialDelayMs: 1_000,
  maxDelayMs: 8_000,
  stableAfterMs: 30_000,
});

export interface SupervisedNatsServerOptions {
  /** How to start the server the first time. */
  readonly server: EmbeddedNatsServerOptions;
  /** Where the supervisor says what happened (never an address or a raw error). */
  readonly log: Logger;
  /**
   * Called before every restart for configuration that follows state (the
   * hive's account JWTs and revocations); its keys replace the first
   * start's. A failure counts as a failed attempt.
   */
  readonly refresh?: () => Promise<Pick<EmbeddedNatsServerOptions, "extraConfig" | "extraConfigText">>;
  /** Overrides of {@link DEFAULT_RESTART_POLICY}. */
  readonly restart?: Partial<RestartPolicy>;
}

/** `running`: a server is up; `restarting`: it exited and attempts are under way; `failed`: they were used up; `stopped`: after `stop`. */
export type SupervisorState = "running" | "restarting" | "failed" | "stopped";

/** Delay before attempt `attempt` (1-based) of a series. */
export function restartDelay(attempt: number, policy: RestartPolicy = DEFAULT_RESTART_POLICY): number {
  if (attempt <= 1) return 0;
  return Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** Math.min(attempt - 2, 30));
}

/** The embedded nats-server under supervision. Create with {@link SupervisedNatsServer.start}. */
export class SupervisedNatsServer {
  readonly #options: SupervisedNatsServerOptions;
  readonly #policy: RestartPolicy;
  readonly #log: Logger;
  readonly #stopSignal = new AbortController();
  readonly #fatal: Promise<EmbeddedServerRestartError>;
  #giveUp!: (error: EmbeddedServerRestartError) => void;
  #current: EmbeddedNatsServer;
  #startedAt: number;
  #state: SupervisorState = "running";
  /** Attempts made in the current series. */
  #attempts = 0;
  #restarts = 0;
  #restarting: Promise<void> | undefined;

  /** Client URL; the same across restarts. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly storeDir: string;
  /** The server's own log file (rotated copies beside it). */
  readonly logFile: string;
  /** Whether `sync_interval: always` applies (see {@link EmbeddedNatsServer.syncAlways}). */
  readonly syncAlways: boolean;
  readonly serverVersion: string | undefined;
  /**
   * Settles when the server cannot be restarted: the owner should stop and
   * exit non-zero so that its own supervisor takes over. Never rejects.
   */
  readonly fatal: Promise<Error>;

  private constructor(options: SupervisedNatsServerOptions, first: EmbeddedNatsServer) {
    this.#options = options;
    this.#policy = { ...DEFAULT_RESTART_POLICY, ...options.restart };
    this.#log = options.log;
    this.#current = first;
    this.#startedAt = Date.now();
    this.#fatal = new Promise((resolve) => {
      this.#giveUp = resolve;
    });
    this.fatal = this.#fatal;
    this.url = first.url;
    this.host = first.host;
    this.port = first.port;
    this.storeDir = first.storeDir;
    this.logFile = first.logFile;
    this.syncAlways = first.syncAlways;
    this.serverVersion = first.serverVersion;
    this.#watch(first);
  }

  /**
   * Starts the server and supervises it. The first start's failures are
   * thrown as by {@link EmbeddedNatsServer.start} (nothing is retried:
   * a server that cannot start at all is a startup error).
   */
  static async start(options: SupervisedNatsServerOptions): Promise<SupervisedNatsServer> {
    return new SupervisedNatsServer(options, await EmbeddedNatsServer.start(options.server));
  }

  get state(): SupervisorState {
    return this.#state;
  }

  /** The pid of the server started last (it may have exited). */
  get pid(): number {
    return this.#current.pid;
  }

  /** How many times the server has been started again. */
  get restarts(): number {
    return this.#restarts;
  }

  /**
   * Why the server closed client connection `clientId`, when Laneway can
   * tell: `broker_exited` when the process has ended, otherwise what its
   * log says about that connection (e.g. `slow_consumer`).
   */
  async disconnectReason(clientId: number | undefined): Promise<DisconnectReason | undefined> {
    const server = this.#current;
    if (this.#state !== "running" || server.exited || (await processHasEnded(server.pid))) return "broker_exited";
    return clientId === undefined ? undefined : server.clientCloseReason(clientId);
  }

  /**
   * Ends supervision, then stops the server gracefully (see
   * {@link EmbeddedNatsServer.stop}). A restart under way is abandoned (a
   * server it was starting is stopped too). Safe to call more than once.
   */
  async stop(options: { timeoutMs?: number } = {}): Promise<ServerExit & { forced: boolean }> {
    this.#state = "stopped";
    this.#stopSignal.abort();
    await this.#restarting;
    return this.#current.stop(options);
  }

  #watch(server: EmbeddedNatsServer): void {
    void server.whenExited().then((exit) => {
      if (this.#stopSignal.signal.aborted || server !== this.#current) return;
      const uptimeMs = Date.now() - this.#startedAt;
      if (uptimeMs >= this.#policy.stableAfterMs) this.#attempts = 0;
      this.#state = "restarting";
      this.#log.error("the embedded nats-server exited unexpectedly; restarting it on the same store and port", {
        pid: server.pid,
        exitCode: exit.code ?? undefined,
        signal: exit.signal ?? undefined,
        uptimeMs,
      });
      const restarting: Promise<void> = this.#restart(server).finally(() => {
        if (this.#restarting === restarting) this.#restarting = undefined;
      });
      this.#restarting = restarting;
    });
  }

  async #restart(exited: EmbeddedNatsServer): Promise<void> {
    const { maxAttempts } = this.#policy;
    let lastError: unknown;
    while (this.#attempts < maxAttempts) {
      this.#attempts += 1;
      const attempt = this.#attempts;
      const delayMs = restartDelay(attempt, this.#policy);
      if (delayMs > 0) {
        try {
          await sleep(delayMs, undefined, { signal: this.#stopSignal.signal });
        } catch {
          return; // stopped while waiting
        }
      }
      if (this.#stopSignal.signal.aborted) return;
      let server: EmbeddedNatsServer;
      try {
        const refreshed = (await this.#options.refresh?.()) ?? {};
        server = await EmbeddedNatsServer.start({ ...exited.restartOptions(), ...refreshed });
      } catch (error) {
        lastError = error;
        this.#log.error("the embedded nats-server could not be restarted", { attempt, maxAttempts, ...safeErrorFields(error) });
        continue;
      }
      if (this.#stopSignal.signal.aborted) {
        this.#current = server;
        return; // stop() stops it
      }
      this.#current = server;
      this.#startedAt = Date.now();
      this.#restarts += 1;
      this.#state = "running";
      this.#log.info("the embedded nats-server is running again", { pid: server.pid, attempt });
      this.#watch(server);
      return;
    }
    this.#state = "failed";
    const error = new EmbeddedServerRestartError(this.#attempts, { cause: lastError });
    this.#log.error("the embedded nats-server cannot be restarted; Laneway stops so that its own supervisor can start it afresh", {
      attempts: this.#attempts,
      ...(lastError === undefined ? {} : safeErrorFields(lastError)),
    });
    this.#giveUp(error);
  }
}
