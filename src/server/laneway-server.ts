import { setMaxListeners } from "node:events";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { file_laneway_errors_v1_errors } from "../../gen/laneway/errors/v1/errors_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import type { StartupConfig } from "../config/index.js";
import { openKmapCore, type KmapCore, type PausePoints } from "../kmap/index.js";
import { LaneRegistry } from "../lanes/index.js";
import { contractValidator } from "../validation/contract-validator.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import { BrokerConnection } from "../nats/broker-connection.js";
import { EmbeddedNatsServer } from "../nats/embedded-server.js";
import { Authenticator } from "./auth.js";
import { errorMappingInterceptor } from "./error-mapping.js";
import { HealthStatus, healthRoutes } from "./health.js";
import { DualProtocolListener } from "./listener.js";
import { reflectionRoutes } from "./reflection.js";
import { hiveHubServiceImpl, hiveMemberServiceImpl } from "./services/hive-services.js";
import { kmapCommandServiceImpl } from "./services/kmap-command-service.js";
import { kmapReadServiceImpl } from "./services/kmap-read-service.js";
import { laneServiceImpl } from "./services/lane-service.js";

/**
 * The Laneway server: one port serving every service over the Connect
 * protocol (JSON and binary), gRPC and gRPC-Web, on HTTP/1.1 and h2c.
 *
 * This module only composes: it starts or connects to NATS, builds the cores
 * from configuration, registers the thin service adapters, and owns the
 * order of shutdown. Business rules live in the cores.
 */

/** The name health reports for the NATS connection. */
export const NATS_HEALTH_NAME = "laneway.nats";

/** Every Laneway service, in the order they are registered and advertised. */
export const lanewayServices: readonly DescService[] = [
  LaneService,
  HiveHubService,
  HiveMemberService,
  KmapCommandService,
  KmapReadService,
];

export interface LanewayServerOptions {
  readonly startup: StartupConfig;
  readonly logger: Logger;
  /** Fault-injection pause points of the Kmap runtime (tests only; see pause-points.ts). */
  readonly kmapPausePoints?: PausePoints;
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
  /** Whether the embedded nats-server applies `sync_interval: always` (undefined with an external server). */
  readonly natsSyncAlways: boolean | undefined;
  /**
   * Settles with the error that ended a core the server cannot run without
   * (the Kmap command runtime); the owner should close the server and exit
   * non-zero so that a supervisor restarts it and the restart recovers.
   */
  readonly fatal: Promise<Error>;

  readonly #listener: DualProtocolListener;
  readonly #broker: BrokerConnection;
  readonly #embedded: EmbeddedNatsServer | undefined;
  readonly #kmap: KmapCore;
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
    embedded: EmbeddedNatsServer | undefined;
    kmap: KmapCore;
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
    this.#listener = init.listener;
    this.#broker = init.broker;
    this.#embedded = init.embedded;
    this.#kmap = init.kmap;
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
    await mkdir(server.dataDir, { recursive: true, mode: 0o700 });

    const started: { close(): Promise<unknown> }[] = [];
    try {
      let embedded: EmbeddedNatsServer | undefined;
      let servers = server.natsServers;
      if (servers === undefined) {
        embedded = await EmbeddedNatsServer.start({ storeDir: join(server.dataDir, "nats"), binary: server.natsServerBin });
        started.push({ close: () => embedded!.stop() });
        servers = [embedded.url];
        if (!embedded.syncAlways) {
          log.warn("the installed nats-server acknowledges JetStream writes before fsync; a power failure can lose acknowledged records", {
            natsServerVersion: embedded.serverVersion,
          });
        }
      }
      const broker = await BrokerConnection.open({
        servers,
        ...(server.natsCredentialsFile ? { credentialsFile: server.natsCredentialsFile } : {}),
        name: "laneway",
        // The embedded server is ours and already up; an external one may
        // come later, and health reports it meanwhile.
        initialConnect: embedded ? "fail" : "retry",
      });
      started.push({ close: () => broker.close() });

      const kmap = await openKmapCore({
        directory: join(server.dataDir, "kmap"),
        logger: log.child({ core: "kmap" }),
        ...(options.kmapPausePoints ? { pausePoints: options.kmapPausePoints } : {}),
      });
      started.push({ close: () => kmap.close() });

      const health = new HealthStatus();
      const registry = startup.lanes ? new LaneRegistry(startup.lanes) : undefined;
      let kmapRunning = true;
      const refreshHealth = () => {
        const brokerServing = broker.state === "connected";
        const status = (ok: boolean) => (ok ? "SERVING" : "NOT_SERVING");
        health.set(NATS_HEALTH_NAME, status(brokerServing));
        health.set(LaneService.typeName, status(registry !== undefined && brokerServing));
        health.set(KmapCommandService.typeName, status(kmapRunning));
        health.set(KmapReadService.typeName, status(kmapRunning));
        health.set(HiveHubService.typeName, "NOT_SERVING");
        health.set(HiveMemberService.typeName, "NOT_SERVING");
        health.set("", status(brokerServing && kmapRunning));
      };
      broker.onStateChange(() => {
        if (broker.state === "connected") log.info("NATS connection is available", { generation: broker.generation });
        else if (broker.state === "closed") log.info("NATS connection closed");
        else log.warn("NATS connection is not available", { state: broker.state });
        refreshHealth();
      });
      refreshHealth();

      // The Kmap runtime is the future the server supervises: if SQLite or
      // the Kweb manager fails, the core stops serving and the process must
      // exit so that a restart recovers.
      let reportFatal!: (error: Error) => void;
      const fatal = new Promise<Error>((resolve) => (reportFatal = resolve));
      kmap.runtime.run().catch((error: unknown) => {
        kmapRunning = false;
        refreshHealth();
        log.error("the Kmap command runtime failed; Laneway must be restarted to recover", safeErrorFields(error));
        reportFatal(error instanceof Error ? error : new Error("the Kmap command runtime failed"));
      });

      const authenticator = new Authenticator({
        projectTokens: startup.lanes?.tokens ?? new Map(),
        operatorToken: server.adminToken,
      });
      const shutdown = new AbortController();
      // Every in-flight call links its own signal to this one.
      setMaxListeners(0, shutdown.signal);
      // Aborted first on shutdown: server streams end cleanly.
      const drain = new AbortController();
      setMaxListeners(0, drain.signal);
      const routes = (router: ConnectRouter) => {
        router.service(LaneService, laneServiceImpl(registry));
        router.service(HiveHubService, hiveHubServiceImpl);
        router.service(HiveMemberService, hiveMemberServiceImpl);
        router.service(KmapCommandService, kmapCommandServiceImpl(kmap.lane, drain.signal));
        router.service(KmapReadService, kmapReadServiceImpl(kmap.reader));
        healthRoutes(router, health);
        reflectionRoutes(router, [...lanewayServices, Health], { files: [file_laneway_errors_v1_errors] });
      };
      const handler = connectNodeAdapter({
        routes,
        interceptors: [errorMappingInterceptor(log), createValidateInterceptor({ validator: contractValidator })],
        requestGate: authenticator.gate,
        shutdownSignal: shutdown.signal,
      });

      const listener = new DualProtocolListener(handler);
      const address = await listener.listen(server.listen.host, server.listen.port);
      const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
      return new LanewayServer({
        url: `http://${host}:${address.port}`,
        port: address.port,
        health,
        listener,
        broker,
        embedded,
        kmap,
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
   * Graceful shutdown: report NOT_SERVING and end health and command
   * watches, stop accepting connections, let in-flight calls finish until
   * the shutdown timeout (then cancel them), stop the Kmap runtime after the
   * command it is applying and close SQLite, close NATS, stop the embedded
   * nats-server.
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
    await run("stop the Kmap runtime and close its databases", () => this.#kmap.close());
    await run("close NATS connection", async () => (await this.#broker.close()).drained);
    if (this.#embedded) {
      const embedded = this.#embedded;
      await run("stop embedded nats-server", async () => !(await embedded.stop()).forced);
    }
    return { ok: steps.every((s) => s.ok), steps };
  }
}
