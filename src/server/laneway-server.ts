import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { file_laneway_errors_v1_errors } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CoreError, CoreStartupError } from "../errors/core-error.js";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import { bootBroker, enforceBrokerVersion, logBrokerState, type BrokerConnection, type SupervisedNatsServer } from "../nats/index.js";
import type { StartupConfig } from "../startup/index.js";
import { contractValidator } from "../validation/contract-validator.js";
import { Authenticator, type ServiceAccess } from "./auth.js";
import type { CoreBinding, OpenCore } from "./core-binding.js";
import { coreBindings } from "./cores/index.js";
import { selectCores, takeOwnerLock, type OwnerLock } from "./cores/served-cores.js";
import { codeOfReason, errorMappingInterceptor, invalidReason, lanewayError, serverDomain } from "./error-mapping.js";
import { HealthRollup, HealthStatus, healthRoutes } from "./health.js";
import { DualProtocolListener } from "./listener.js";
import { openObservation } from "./services/observe/index.js";
import { reflectionRoutes } from "./reflection.js";
import { fastPathValidator } from "./wire/fast-validation.js";
import { lanewayNodeAdapter } from "./wire/node-adapter.js";

/**
 * The Laneway server: one port serving every service over the Connect
 * protocol (JSON and binary), gRPC and gRPC-Web, on HTTP/1.1 and h2c.
 *
 * This module only composes: it starts or connects to NATS, opens the cores
 * of src/server/cores, registers their services behind authentication,
 * validation and error mapping, and owns the order of shutdown. Business
 * rules live in the cores.
 */

/** The name health reports for the NATS connection. */
export const NATS_HEALTH_NAME = "laneway.nats";

/** Every Laneway service, in the order they are registered and advertised. */
export const lanewayServices: readonly DescService[] = coreBindings.flatMap((core) => core.services.map((s) => s.service));

/** The public services the server itself serves: no credential, domain `server`. */
const publicServices = ["grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"];

/** Every pause point name a core declares (for `LANEWAY_PAUSE_AT`). */
export const corePausePoints: readonly string[] = coreBindings.flatMap((core) => core.pausePoints ?? []);

export interface LanewayServerOptions {
  readonly startup: StartupConfig;
  readonly logger: Logger;
  /** Fault-injection pause points (tests only; see src/fault-injection). */
  readonly pausePoints?: PausePoints;
  /** The cores to serve; default all of src/server/cores. */
  readonly cores?: readonly CoreBinding[];
}

/** One step of shutdown and whether it succeeded. */
export interface ShutdownStep {
  readonly step: string;
  readonly ok: boolean;
}

/** The outcome of `close`: `ok` only when every step succeeded. */
export interface ShutdownReport {
  readonly ok: boolean;
  readonly steps: readonly ShutdownStep[];
}

export class LanewayServer {
  /** Base URL of the listener, e.g. `http://127.0.0.1:7600`. */
  readonly url: string;
  readonly port: number;
  readonly health: HealthStatus;
  /** The embedded nats-server's client URL (undefined with an external server); it admits only Laneway. */
  readonly embeddedNatsUrl: string | undefined;
  /** Whether the embedded nats-server applies `sync_interval: always` (undefined with an external server). */
  readonly natsSyncAlways: boolean | undefined;
  /**
   * Settles with the error that ended a core the server cannot run without
   * (a command runtime), or with the embedded nats-server's when it
   * cannot be restarted; the owner should close the server and exit
   * non-zero so that a supervisor restarts it and the restart recovers.
   */
  readonly fatal: Promise<Error>;

  readonly #listener: DualProtocolListener;
  readonly #broker: BrokerConnection;
  readonly #embedded: SupervisedNatsServer | undefined;
  readonly #cores: readonly { readonly name: string; readonly core: OpenCore }[];
  readonly #drain: AbortController;
  readonly #shutdown: AbortController;
  readonly #log: Logger;
  readonly #shutdownTimeoutMs: number;
  readonly #ownerLock: OwnerLock | undefined;
  #closing: Promise<ShutdownReport> | undefined;

  private constructor(init: {
    url: string;
    port: number;
    health: HealthStatus;
    listener: DualProtocolListener;
    broker: BrokerConnection;
    embedded: SupervisedNatsServer | undefined;
    cores: readonly { readonly name: string; readonly core: OpenCore }[];
    drain: AbortController;
    fatal: Promise<Error>;
    shutdown: AbortController;
    log: Logger;
    shutdownTimeoutMs: number;
    ownerLock: OwnerLock | undefined;
  }) {
    this.url = init.url;
    this.port = init.port;
    this.health = init.health;
    this.natsSyncAlways = init.embedded?.syncAlways;
    this.embeddedNatsUrl = init.embedded?.url;
    this.#listener = init.listener;
    this.#broker = init.broker;
    this.#embedded = init.embedded;
    this.#cores = init.cores;
    this.#drain = init.drain;
    this.fatal = init.fatal;
    this.#shutdown = init.shutdown;
    this.#log = init.log;
    this.#shutdownTimeoutMs = init.shutdownTimeoutMs;
    this.#ownerLock = init.ownerLock;
  }

  /** Starts NATS (or connects to it), the cores and the listener. */
  static async start(options: LanewayServerOptions): Promise<LanewayServer> {
    const { startup, logger: log } = options;
    const { server } = startup;
    const known = options.cores ?? coreBindings;
    const bindings = selectCores(known, server.cores);
    await mkdir(server.dataDir, { recursive: true, mode: 0o700 });

    const started: { close(): Promise<unknown> }[] = [];
    // Before anything opens: a second owner of the single-writer cores stops here.
    const ownerLock = takeOwnerLock(server.dataDir, bindings);
    if (ownerLock !== undefined) started.push({ close: async () => ownerLock.release() });
    try {
      const { broker, embedded } = await startBroker(server, bindings, log);
      if (embedded) started.push({ close: () => embedded.stop() });
      started.push({ close: () => broker.close() });
      // Replicated streams only on a broker without the known defects, or with the operator's explicit override.
      if (embedded === undefined) await enforceBrokerVersion(broker, { replicas: server.replicas, allowUnsafe: server.allowUnsafeBroker, log });

      const health = new HealthStatus();
      const reporter = new HealthRollup(health);
      const refreshBroker = () => reporter.set(NATS_HEALTH_NAME, broker.state === "connected" ? "serving" : "not_serving");
      const observe = openObservation({ broker, log, cores: known, settings: server.observe });
      started.push({ close: async () => observe.close() });
      logBrokerState(broker, log);
      broker.onStateChange(refreshBroker);
      refreshBroker();

      const shutdown = new AbortController();
      // Every in-flight call links its own signal to this one.
      setMaxListeners(0, shutdown.signal);
      // Aborted first on shutdown: server streams end cleanly.
      const drain = new AbortController();
      setMaxListeners(0, drain.signal);
      drain.signal.addEventListener("abort", () => observe.close(), { once: true });

      const cores: { name: string; core: OpenCore }[] = [];
      for (const binding of bindings) {
        const context = { startup, settings: startup.cores.get(binding.name), log: log.child({ core: binding.name }), broker, drain: drain.signal, health: reporter, pausePoints: options.pausePoints ?? noPausePoints };
        const core = await binding.open(context).catch((error: unknown) => {
          throw startupFailure(binding, error);
        });
        cores.push({ name: binding.name, core });
        started.push({ close: () => core.close() });
      }

      const access = serviceAccess(bindings);
      const authenticator = new Authenticator({
        operatorToken: server.adminToken,
        authenticators: cores.flatMap(({ core }) => (core.authenticate ? [core.authenticate] : [])),
        kinds: new Map(bindings.flatMap((b) => Object.entries(b.principals ?? {}))),
        access,
      });

      // The first core to fail at run time, or an embedded broker that
      // cannot be restarted, ends the server.
      const fatal = Promise.race(
        cores
          .flatMap(({ core }) => (core.fatal ? [core.fatal] : []))
          .concat(embedded ? [embedded.fatal] : [])
          .concat(new Promise<Error>(() => {})),
      );

      const routes = (router: ConnectRouter) => serviceRoutes(router, bindings, cores, health);
      const domainOf = (typeName: string) => access.get(typeName)?.errors ?? serverDomain;
      // Once shutdown has begun, a new call is refused before it executes;
      // only calls already running may finish.
      const gate = async (ctx: HandlerContext) => {
        if (shutdown.signal.aborted || drain.signal.aborted) {
          throw lanewayError("unavailable", "the server is shutting down: retry against another instance or after it restarts", domainOf(ctx.service.typeName).domain);
        }
        await authenticator.gate(ctx);
      };
      const handler = lanewayNodeAdapter({
        routes,
        interceptors: [observe.calls.interceptor, errorMappingInterceptor(log, domainOf, new Map(bindings.map((b) => [b.errors.domain, b.errors]))), createValidateInterceptor({ validator: fastPathValidator(contractValidator) })],
        requestGate: observe.calls.gate(gate),
        observeRequest: observe.noteRequest,
        shutdownSignal: shutdown.signal,
        limits: server.wire,
        log,
        domainOf: (typeName) => {
          const spec = domainOf(typeName);
          return { domain: spec.domain, invalidReason: invalidReason(spec) };
        },
      });

      const maxConnections = connectionCapFor(server.wire.maxConnections);
      if (maxConnections < server.wire.maxConnections) {
        log.warn("the process may open too few files for --max-connections; the connection cap is lowered", { maxConnections });
      }
      const listener = new DualProtocolListener(observe.routes(handler), { ...server.wire, maxConnections });
      const address = await listener.listen(server.listen.host, server.listen.port);
      const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
      for (const { name, core } of cores) {
        try {
          core.listening?.();
        } catch (error) {
          // The server listens and serves; what this core meant to start is logged, not fatal.
          log.error("a core could not start its work after listening", { core: name, ...safeErrorFields(error) });
        }
      }
      return new LanewayServer({
        url: `http://${host}:${address.port}`,
        port: address.port,
        health,
        listener,
        broker,
        embedded,
        cores,
        drain,
        fatal,
        shutdown,
        log,
        shutdownTimeoutMs: server.shutdownTimeoutMs,
        ownerLock,
      });
    } catch (error) {
      for (const part of started.reverse()) await part.close().catch(() => {});
      throw error;
    }
  }

  /**
   * Graceful shutdown: report NOT_SERVING and end health watches and the
   * cores' server streams, stop accepting connections, let in-flight calls
   * finish until the shutdown timeout (then cancel them), close the cores in
   * reverse order (a command runtime stops after the command it is applying
   * and closes SQLite), close NATS, stop the embedded nats-server.
   * Safe to call more than once.
   */
  close(): Promise<ShutdownReport> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<ShutdownReport> {
    const steps: ShutdownStep[] = [];
    const run = async (step: string, action: () => Promise<boolean | void>) => {
      try {
        const result = await action();
        steps.push({ step, ok: result !== false });
      } catch (error) {
        this.#log.error(`shutdown step failed: ${step}`, safeErrorFields(error));
        steps.push({ step, ok: false });
      }
    };
    this.#drain.abort();
    this.health.shutdown();
    await run("finish in-flight calls", async () => {
      const result = await this.#listener.close(this.#shutdownTimeoutMs, () => {
        this.#shutdown.abort(new ConnectError("the server is shutting down", Code.Unavailable));
      });
      if (!result.drained) this.#log.warn("in-flight calls were canceled at the shutdown deadline", { timeoutMs: this.#shutdownTimeoutMs });
      return result.drained;
    });
    for (const { name, core } of [...this.#cores].reverse()) await run(`close the ${name} core`, () => core.close());
    await run("close NATS connection", async () => (await this.#broker.close()).drained);
    if (this.#embedded) {
      const embedded = this.#embedded;
      await run("stop embedded nats-server", async () => !(await embedded.stop()).forced);
    }
    // Last: the single-writer cores are closed, another process may own them now.
    this.#ownerLock?.release();
    return { ok: steps.every((s) => s.ok), steps };
  }
}

/** A core's failure to open or to prepare the broker, as every core reports it (see `CoreBinding.open`). */
function startupFailure(binding: CoreBinding, error: unknown): unknown {
  if (error instanceof CoreStartupError || !(error instanceof CoreError)) return error;
  const kind = codeOfReason(binding.errors, error.reason) === Code.Unavailable ? "unavailable" : "state_conflict";
  return new CoreStartupError(binding.errors.domain, kind, `${binding.title} cannot start: ${error.message}`, { cause: error });
}

/**
 * The connection cap that leaves room under the process's open-file limit
 * for NATS, SQLite, the embedded server's pipes and new accepts: past the
 * limit accept() itself fails and every client is refused, which the cap is
 * there to prevent.
 */
function connectionCapFor(configured: number): number {
  let soft: number | undefined;
  try {
    const limits = readFileSync("/proc/self/limits", "utf8");
    const value = /^Max open files\s+(\S+)/m.exec(limits)?.[1];
    soft = value === undefined || value === "unlimited" ? undefined : Number(value);
  } catch {
    soft = undefined;
  }
  if (soft === undefined || !Number.isFinite(soft)) return configured;
  return Math.max(8, Math.min(configured, soft - 128));
}

/**
 * Boots the broker (embedded or external), prepared by at most one core
 * (operator mode, for one): the step each binding may declare.
 */
async function startBroker(server: LanewayServerOptions["startup"]["server"], bindings: readonly CoreBinding[], log: Logger): ReturnType<typeof bootBroker> {
  const preparations = [];
  for (const binding of bindings) {
    // A failure is reported as the core's failure to open is: the step is the core's.
    const preparation = await binding.prepareBroker?.({ dataDir: server.dataDir, demo: server.demo, embedded: server.natsServers === undefined, log: log.child({ core: binding.name }) }).catch((error: unknown) => {
      throw startupFailure(binding, error);
    });
    if (preparation) preparations.push({ core: binding.name, preparation });
  }
  if (preparations.length > 1) throw new Error(`more than one core prepares the broker: ${preparations.map((p) => p.core).join(", ")}`);
  return bootBroker({
    dataDir: server.dataDir,
    servers: server.natsServers,
    credentialsFile: server.natsCredentialsFile,
    serverBin: server.natsServerBin,
    preparation: preparations[0]?.preparation,
    log,
  });
}

/** Who may call each service and whose errors it answers: the public services, then each binding's. */
function serviceAccess(bindings: readonly CoreBinding[]): Map<string, ServiceAccess> {
  const access = new Map<string, ServiceAccess>(publicServices.map((name) => [name, { principal: "none", errors: serverDomain }]));
  for (const binding of bindings) {
    for (const { service, principal } of binding.services) access.set(service.typeName, { principal, errors: binding.errors });
  }
  return access;
}

/** Every service the open cores implement, as their bindings list them, then health and reflection. */
function serviceRoutes(router: ConnectRouter, bindings: readonly CoreBinding[], cores: readonly { name: string; core: OpenCore }[], health: HealthStatus): void {
  for (const { name, core } of cores) {
    const binding = bindings.find((b) => b.name === name)!;
    for (const { service } of binding.services) {
      const implementation = core.implementations.find((i) => i.service === service);
      if (implementation === undefined) throw new Error(`the ${name} core does not implement ${service.typeName}`);
      router.service(service, implementation.impl);
    }
  }
  healthRoutes(router, health);
  const served = bindings.flatMap((b) => b.services.map((s) => s.service));
  reflectionRoutes(router, [...served, Health], { files: [file_laneway_errors_v1_errors] });
}
