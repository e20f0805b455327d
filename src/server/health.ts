/**
 * gRPC health checking (`grpc.health.v1.Health`: Check, Watch, List) backed
 * by a small in-process registry of serving statuses.
 *
 * Why: load balancers, Kubernetes gRPC probes and `grpc_health_probe` speak
 * this protocol, and no npm package serves it on connect-node. Semantics follow
 * https://github.com/grpc/grpc/blob/master/doc/health-checking.md and grpc-go's
 * `health.Server`, which clients are tested against.
 *
 * The service needs no authentication: probes carry no credentials. The
 * request gate (src/server/auth.ts) lets `grpc.health.v1.Health` through;
 * nothing here depends on that.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import type { ConnectRouter } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";

/**
 * A service's status. `SERVICE_UNKNOWN` means "not registered": setting it
 * removes the entry, so Check answers NOT_FOUND and Watch reports
 * SERVICE_UNKNOWN, exactly as for a name never set.
 */
export type ServingStatus = "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN";

/** A registered status (what the registry stores). */
type KnownStatus = Exclude<ServingStatus, "SERVICE_UNKNOWN">;

/** One running `watch()` iterator, as seen by the registry. */
interface Watcher {
  readonly service: string;
  /** A new status for the watched service (only called on change). */
  changed(status: ServingStatus): void;
  /** The registry shut down: deliver what is pending, then finish. */
  end(): void;
}

/**
 * Serving status per service name; `""` is the server's overall status.
 *
 * Starts with `""` SERVING, like grpc-go: a process that answers health checks
 * at all is up unless someone says otherwise. Components mark their own
 * services with `set()`.
 */
export class HealthStatus {
  readonly #statuses = new Map<string, KnownStatus>([["", "SERVING"]]);
  readonly #watchers = new Set<Watcher>();
  #shutDown = false;

  /**
   * Set the status of `service` (`""` for the whole server) and notify its
   * watchers if it changed. Ignored after {@link shutdown}, so a component
   * cannot flip the server back to SERVING while it drains.
   */
  set(service: string, status: ServingStatus): void {
    if (this.#shutDown) return;
    this.#set(service, status);
  }

  /** The status of `service`; SERVICE_UNKNOWN if it is not registered. */
  get(service: string): ServingStatus {
    return this.#statuses.get(service) ?? "SERVICE_UNKNOWN";
  }

  /** A snapshot of every registered service (including `""`) and its status. */
  list(): ReadonlyMap<string, KnownStatus> {
    return new Map(this.#statuses);
  }

  /** Number of running `watch()` iterators (open Watch streams): for metrics and tests. */
  get watcherCount(): number {
    return this.#watchers.size;
  }

  /** True once {@link shutdown} has been called. */
  get isShutDown(): boolean {
    return this.#shutDown;
  }

  /**
   * The status of `service` now, then each change, until `signal` aborts or
   * the registry shuts down.
   *
   * Changes are coalesced: a slow consumer sees the latest status, never a
   * backlog, and never the same status twice in a row. That bounds memory per
   * watcher and matches grpc-go, which also drops intermediate updates.
   */
  async *watch(service: string, signal?: AbortSignal): AsyncGenerator<ServingStatus, void, undefined> {
    let pending: ServingStatus | undefined = this.get(service);
    let ended = this.#shutDown;
    let wake: (() => void) | undefined;
    const watcher: Watcher = {
      service,
      changed(status) {
        pending = status;
        wake?.();
      },
      end() {
        ended = true;
        wake?.();
      },
    };
    const onAbort = () => watcher.end();
    this.#watchers.add(watcher);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      let last: ServingStatus | undefined;
      for (;;) {
        if (signal?.aborted) return;
        if (pending !== undefined) {
          const next: ServingStatus = pending;
          pending = undefined;
          if (next !== last) {
            last = next;
            yield next;
          }
          continue;
        }
        if (ended) return;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      this.#watchers.delete(watcher);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * For graceful shutdown: mark every registered service NOT_SERVING (so
   * watchers learn it, and load balancers stop sending traffic), ignore later
   * `set()` calls, and end every watch, so that open Watch streams do not
   * hold the server open. Watches started afterwards get the current status
   * and end at once. Idempotent.
   */
  shutdown(): void {
    if (this.#shutDown) return;
    for (const service of this.#statuses.keys()) this.#set(service, "NOT_SERVING");
    this.#shutDown = true;
    for (const watcher of this.#watchers) watcher.end();
  }

  #set(service: string, status: ServingStatus): void {
    if (this.get(service) === status) return;
    if (status === "SERVICE_UNKNOWN") this.#statuses.delete(service);
    else this.#statuses.set(service, status);
    for (const watcher of this.#watchers) {
      if (watcher.service === service) watcher.changed(status);
    }
  }
}

/**
 * How a part of the server is doing, as a core (or the broker connection)
 * reports it. `serving` and `not_serving` count towards the server's overall
 * status (`""`); `off` reports NOT_SERVING for the name but leaves the
 * overall status alone (a core that is not enabled by configuration).
 */
export type PartHealth = "serving" | "not_serving" | "off";

/**
 * The roll-up of the parts' health into the registry: each part's name
 * gets its own status, and `""` is SERVING exactly when every part that is
 * not off serves.
 */
export class HealthRollup {
  readonly #parts = new Map<string, PartHealth>();

  constructor(readonly health: HealthStatus) {}

  set(name: string, state: PartHealth): void {
    this.#parts.set(name, state);
    this.health.set(name, state === "serving" ? "SERVING" : "NOT_SERVING");
    const counted = [...this.#parts.values()].filter((part) => part !== "off");
    this.health.set("", counted.every((part) => part === "serving") ? "SERVING" : "NOT_SERVING");
  }
}

/**
 * Register `grpc.health.v1.Health` on `router`, answering from `health`.
 *
 * Check of an unregistered name fails with NOT_FOUND, as the spec requires;
 * Watch of one reports SERVICE_UNKNOWN and keeps watching, so a client can
 * wait for a service that registers later.
 */
export function healthRoutes(router: ConnectRouter, health: HealthStatus): void {
  router.service(Health, {
    check(request) {
      const status = health.get(request.service);
      if (status === "SERVICE_UNKNOWN") {
        // The name is the caller's input: never echo more than a readable prefix of it.
        const name = request.service.length > 128 ? `${request.service.slice(0, 128)}…` : request.service;
        throw new ConnectError(`unknown service ${JSON.stringify(name)}`, Code.NotFound);
      }
      return { status: HealthCheckResponse_ServingStatus[status] };
    },
    async *watch(request, context) {
      for await (const status of health.watch(request.service, context.signal)) {
        yield { status: HealthCheckResponse_ServingStatus[status] };
      }
    },
    list() {
      const statuses: Record<string, { status: HealthCheckResponse_ServingStatus }> = {};
      for (const [service, status] of health.list()) {
        statuses[service] = { status: HealthCheckResponse_ServingStatus[status] };
      }
      return { statuses };
    },
  });
}
