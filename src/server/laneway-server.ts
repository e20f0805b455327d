import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { file_laneway_errors_v1_errors } from "../../gen/laneway/errors/v1/errors_pb.js";
import { noPausePoints, type PausePoints } from "../fault-injection/pause-points.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import {
  adoptGlobalAccountStore,
  enforceBrokerVersion,
  BrokerConnection,
  loadOrCreateServiceCredential,
  logBrokerState,
  serviceAuthorization,
  SupervisedNatsServer,
  type SupervisedNatsServerOptions,
} from "../nats/index.js";
import { hiveBrokerSetup } from "../swarm/index.js";
import type { StartupConfig } from "../startup/index.js";
import { contractValidator } from "../validation/contract-validator.js";
import { Authenticator, type ServiceAccess } from "./auth.js";
import type { CoreBinding, MemberSecretResolver, OpenCore } from "./core-binding.js";
import { coreBindings } from "./cores/index.js";
import { errorMappingInterceptor, invalidReason, lanewayError, serverDomain } from "./error-mapping.js";
import { HealthStatus, healthRoutes } from "./health.js";
import { DualProtocolListener } from "./listener.js";
import { reflectionRoutes } from "./reflection.js";
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
   * (the Kmap command runtime), or with the embedded nats-server's when it
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
  }

  /** Starts NATS (or connects to it), the cores and the listener. */
  static async start(options: LanewayServerOptions): Promise<LanewayServer> {
    const { startup, logger: log } = options;
    const { server } = startup;
    const bindings = options.cores ?? coreBindings;
    await mkdir(server.dataDir, { recursive: true, mode: 0o700 });

    const started: { close(): Promise<unknown> }[] = [];
    try {
      let embedded: SupervisedNatsServer | undefined;
      let servers = server.natsServers;
      let credentialsFile = server.natsCredentialsFile;
      // With the hive enabled (`laneway hive init`; demo mode enables it),
      // NATS runs in operator mode and Laneway connects as a service user
      // of its own account, which no hive member can reach.
      const hive = await hiveBrokerSetup(server.dataDir, { initialize: server.demo && servers === undefined });
      if (servers !== undefined && credentialsFile === undefined && hive) credentialsFile = hive.lanewayCredentialsFile;
      if (servers === undefined) {
        const storeDir = join(server.dataDir, "nats");
        await mkdir(storeDir, { recursive: true, mode: 0o700 });
        let supervision: Omit<SupervisedNatsServerOptions, "log">;
        if (hive) {
          if (await adoptGlobalAccountStore(storeDir, hive.lanewayAccount)) log.info("the JetStream store moved into Laneway's own account for the hive's operator mode");
          credentialsFile = hive.lanewayCredentialsFile;
          const resolverDir = join(storeDir, "jwt");
          supervision = {
            server: { storeDir, binary: server.natsServerBin, host: hive.listen.host, port: hive.listen.port, extraConfig: await hive.config(resolverDir) },
            // A restart preloads the accounts as they are then (revocations included).
            refresh: async () => ({ extraConfig: await hive.config(resolverDir) }),
          };
        } else {
          // Only Laneway may reach its embedded broker: it admits one nkey
          // user, whose seed Laneway keeps in the data directory (mode 0600).
          const credential = await loadOrCreateServiceCredential(join(storeDir, "laneway-service.nk"));
          credentialsFile = credential.seedPath;
          supervision = { server: { storeDir, binary: server.natsServerBin, extraConfig: { authorization: serviceAuthorization(credential) } } };
        }
        // Both modes: restarted on the same store and port if it exits.
        embedded = await SupervisedNatsServer.start({ ...supervision, log: log.child({ component: "embedded-nats" }) });
        started.push({ close: () => embedded!.stop() });
        servers = [embedded.url];
      }
      if (embedded !== undefined) {
        if (!embedded.syncAlways) {
          log.warn("the installed nats-server acknowledges JetStream writes before fsync; a power failure can lose acknowledged records", {
            natsServerVersion: embedded.serverVersion,
          });
        }
      }
      const broker = await BrokerConnection.open({
        servers,
        ...(credentialsFile ? { credentialsFile } : {}),
        name: "laneway",
        // The embedded server is ours and already up; an external one may
        // come later, and health reports it meanwhile.
        initialConnect: embedded ? "fail" : "retry",
        ...(embedded ? { explainDisconnect: (clientId: number | undefined) => embedded!.disconnectReason(clientId) } : {}),
      });
      started.push({ close: () => broker.close() });
      // Replicated lanes only on a broker without the known defects, or with the operator's explicit override.
      if (embedded === undefined) await enforceBrokerVersion(broker, { replicas: server.replicas, allowUnsafe: server.allowUnsafeBroker, log });

      const health = new HealthStatus();
      const coreHealth = new Map<string, "serving" | "not_serving" | "off">();
      const refreshOverall = () => {
        const counted = [...coreHealth.values()].filter((state) => state !== "off");
        const serving = broker.state === "connected" && counted.every((state) => state === "serving");
        health.set("", serving ? "SERVING" : "NOT_SERVING");
      };
      const reporter = {
        set(name: string, state: "serving" | "not_serving" | "off") {
          coreHealth.set(name, state);
          health.set(name, state === "serving" ? "SERVING" : "NOT_SERVING");
          refreshOverall();
        },
      };
      const refreshBroker = () => {
        health.set(NATS_HEALTH_NAME, broker.state === "connected" ? "SERVING" : "NOT_SERVING");
        refreshOverall();
      };
      logBrokerState(broker, log);
      broker.onStateChange(refreshBroker);
      refreshBroker();

      const shutdown = new AbortController();
      // Every in-flight call links its own signal to this one.
      setMaxListeners(0, shutdown.signal);
      // Aborted first on shutdown: server streams end cleanly.
      const drain = new AbortController();
      setMaxListeners(0, drain.signal);

      const cores: { name: string; core: OpenCore }[] = [];
      for (const binding of bindings) {
        const core = await binding.open({
          startup,
          log: log.child({ core: binding.name }),
          broker,
          drain: drain.signal,
          health: reporter,
          pausePoints: options.pausePoints ?? noPausePoints,
        });
        cores.push({ name: binding.name, core });
        started.push({ close: () => core.close() });
      }

      const access = new Map<string, ServiceAccess>(publicServices.map((name) => [name, { principal: "none", errors: serverDomain }]));
      for (const binding of bindings) {
        for (const { service, principal } of binding.services) access.set(service.typeName, { principal, errors: binding.errors });
      }
      const projectTokens = new Map(cores.flatMap(({ core }) => [...(core.projectTokens ?? new Map())]));
      const members: MemberSecretResolver | undefined = cores.find(({ core }) => core.members)?.core.members;
      const authenticator = new Authenticator({ projectTokens, operatorToken: server.adminToken, members, access });

      // The first core to fail at run time, or an embedded broker that
      // cannot be restarted, ends the server.
      const fatal = Promise.race(
        cores
          .flatMap(({ core }) => (core.fatal ? [core.fatal] : []))
          .concat(embedded ? [embedded.fatal] : [])
          .concat(new Promise<Error>(() => {})),
      );

      const routes = (router: ConnectRouter) => {
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
      };
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
        interceptors: [errorMappingInterceptor(log, domainOf), createValidateInterceptor({ validator: contractValidator })],
        requestGate: gate,
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
      const listener = new DualProtocolListener(handler, { ...server.wire, maxConnections });
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
   * reverse order (the Kmap runtime stops after the command it is applying
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
    return { ok: steps.every((s) => s.ok), steps };
  }
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
