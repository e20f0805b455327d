import type { DescService } from "@bufbuild/protobuf";
import type { Code, ServiceImpl } from "@connectrpc/connect";
import type { Registry } from "prom-client";
import type { ErrorDomain } from "../errors/core-error.js";
import type { PausePoints } from "../fault-injection/pause-points.js";
import type { Logger } from "../log/logger.js";
import type { BrokerConnection, BrokerPreparation } from "../nats/index.js";
import type { CoreSettings, StartupConfig } from "../startup/index.js";
import type { PartHealth } from "./health.js";

/**
 * The contract between the server and a core.
 *
 * Each core is a library in its own folder that knows
 * nothing of Connect or HTTP. A binding, one file per core in
 * src/server/cores/, says what the server needs to serve it: the services it
 * offers and the principal each requires, its error domain, and how to open
 * it. Authentication, error mapping, health, reflection and shutdown loop
 * over the list of bindings (src/server/cores/index.ts), so adding a core is
 * its folder, its binding and one entry in that list — the way connect-es
 * keeps its protocols in one list of handler factories.
 */

/**
 * Who may call a service: `operator` (the server's own principal, the
 * operator token), a kind a core's binding declares in `principals` and
 * recognizes in `authenticate` (`project`, `member`), or — for health and
 * reflection only, which are not a core's — anyone.
 */
export type PrincipalKind = string;

/**
 * Who is calling. The bearer token alone decides it: never a header other
 * than Authorization, a request field or a URI. `id` names who it is (a
 * project, a member; empty for the operator).
 */
export interface Principal {
  readonly kind: PrincipalKind;
  readonly id: string;
}

/**
 * Recognizes a bearer token as one of the core's principals, or not. It
 * compares secrets in constant time, and never logs or echoes the token.
 */
export type Authenticate = (token: string) => Principal | undefined | Promise<Principal | undefined>;

/** One service a core offers and the principal every call must present. */
export interface ServiceRequirement {
  readonly service: DescService;
  readonly principal: PrincipalKind;
}

/**
 * A core's error domain: the name sent in `ErrorDetail.domain`; every reason
 * the core gives its failures with the Connect code it answers (one row per
 * reason: DESIGN.md's status table); and the reasons the core's
 * specification uses for failures that do not come from the core itself (a
 * request that breaks the contract, a cancellation, a deadline, the server
 * shutting down). A failure without its own reason in the domain gets the
 * server's shared one (`invalid_argument`, `canceled`, …).
 */
export interface ErrorDomainSpec {
  readonly domain: ErrorDomain;
  readonly reasons: Readonly<Record<string, Code>>;
  readonly fallbackReasons: Partial<Record<FallbackKind, string>>;
}

/** The kinds of failure a domain may give its own reason. */
export type FallbackKind = "invalid" | "canceled" | "timeout" | "unavailable" | "capacity";

/** How a core reports health (see `PartHealth` in health.ts). */
export interface HealthReporter {
  set(name: string, state: PartHealth): void;
}

/** What a core may use to prepare the broker, before Laneway connects to it. */
export interface BrokerPreparationContext {
  readonly dataDir: string;
  /** Demo mode: a core may create what its demo needs. */
  readonly demo: boolean;
  /** Whether Laneway starts the embedded nats-server (no --nats-url). */
  readonly embedded: boolean;
  readonly log: Logger;
}

/** What a core may use while it opens. */
export interface CoreContext {
  readonly startup: StartupConfig;
  /** What the binding's `settings.resolve` returned (undefined without settings). */
  readonly settings: unknown;
  /** A logger whose lines carry `core: <name>`. */
  readonly log: Logger;
  /** Laneway's NATS connection (embedded or external). */
  readonly broker: BrokerConnection;
  /** Aborted when shutdown begins: server streams (watches, follows) end cleanly. */
  readonly drain: AbortSignal;
  readonly health: HealthReporter;
  /** Fault-injection pause points (tests only; see src/fault-injection). */
  readonly pausePoints: PausePoints;
}

/** A successful call's messages: its request (unless a client stream) and, for a unary call, its response. */
export interface CallOutcome {
  readonly request: unknown;
  readonly response: unknown;
}

/**
 * What feeds a core's domain metrics from the calls to its services (the
 * call observer, src/server/services/observe, runs them for the services
 * the binding declares and for no other). Label values must stay bounded:
 * identifiers from the core's configuration, taken from calls that
 * succeeded, and reason codes; never a token, payload or free text.
 */
export interface CoreCallMetrics {
  /** A call to one of the core's services succeeded. */
  succeeded?(service: string, method: string, outcome: CallOutcome): void;
  /** A call to one of the core's services failed with `reason` (`unknown` when it carried none). */
  refused?(service: string, method: string, reason: string): void;
  /** Removes what the metrics installed (hooks the core calls); the registry stays readable. */
  close?(): void;
}

/** A field of a call's message, as a core's metrics read it (undefined when absent). */
export function messageField<T>(message: unknown, name: string): T | undefined {
  return (message as Record<string, unknown> | undefined)?.[name] as T | undefined;
}

/** What a core's metrics may use besides the registry. */
export interface CoreMetricsContext {
  /** How often figures read from the broker may be read again (`LANEWAY_METRICS_REFRESH_MS`). */
  readonly refreshMs: number;
  readonly now: () => number;
}

/** A service's handlers, type-checked against its descriptor by `implement`. */
export interface ServiceImplementation {
  readonly service: DescService;
  readonly impl: Partial<ServiceImpl<DescService>>;
}

/** Pairs a service descriptor with its handlers. */
export function implement<S extends DescService>(service: S, impl: ServiceImpl<S>): ServiceImplementation {
  return { service, impl: impl as unknown as Partial<ServiceImpl<DescService>> };
}

/** An opened core, as the server runs it. */
export interface OpenCore {
  /** Handlers for every service the binding declares. */
  readonly implementations: readonly ServiceImplementation[];
  /**
   * Settles with the error that ended the core at run time (a command runtime
   * failing, for example); the server then stops and exits non-zero so that
   * a supervisor restarts it and recovery runs.
   */
  readonly fatal?: Promise<Error>;
  /**
   * Recognizes the bearer tokens of the principals the binding declares.
   * Asked on every call to a service that needs a credential, whichever
   * core the service belongs to.
   */
  readonly authenticate?: Authenticate;
  /**
   * Called once the listener accepts calls: work that may call this very
   * server (a participant of this server's own services, for one) starts here, not in `open`.
   */
  listening?(): void;
  /** Releases everything the core holds; called once, after in-flight calls ended. */
  close(): Promise<void>;
}

/** A core as the server knows it before and after opening it. */
export interface CoreBinding {
  /** Short name for logs and shutdown steps (also its folder under src/). */
  readonly name: string;
  /**
   * The core's other folders under src/, below its own (default none):
   * libraries its folder builds on, such as the member-side half of a
   * core. Only its own folder may use their internal.ts, and its uses of
   * their index do not count as uses from outside the core.
   */
  readonly folders?: readonly string[];
  /** How a startup failure names the core: `<title> cannot start: <the core's message>`. */
  readonly title: string;
  readonly errors: ErrorDomainSpec;
  readonly services: readonly ServiceRequirement[];
  /**
   * The principal kinds this core's `authenticate` recognizes, each with
   * how a message names its credential (`project`: "a project token").
   */
  readonly principals?: Readonly<Record<PrincipalKind, string>>;
  /** Fault-injection pause point names the core may reach (tests only). */
  readonly pausePoints?: readonly string[];
  /**
   * True when any number of Laneway processes may serve the core on the same
   * data (it keeps no state the broker does not hold): a replica may serve
   * it with `--cores`. Otherwise the core has one writer, and the process
   * serving it holds the data directory's owner lock.
   */
  readonly replicable?: boolean;
  /**
   * The core's flags and variables and how they become its configuration
   * (resolved before anything starts; `serve --help` and
   * docs/operations.md list them). Its result is `CoreContext.settings`.
   */
  readonly settings?: CoreSettings;
  /**
   * Registers the core's own metrics in the server's registry (once per
   * server, whether or not the core is enabled, so that /metrics lists the
   * same families) and returns what feeds them from its calls.
   */
  metrics?(registry: Registry, context: CoreMetricsContext): CoreCallMetrics;
  /** One line for `laneway serve`'s startup banner: what the core serves with its settings. */
  summary?(settings: unknown): string;
  /**
   * Prepares the broker before Laneway starts or connects to it (at most one
   * core may): the embedded server's settings and listen address, and the
   * credentials Laneway connects with. Undefined leaves the broker as it is.
   */
  prepareBroker?(context: BrokerPreparationContext): Promise<BrokerPreparation | undefined>;
  /**
   * Opens the core. A failure is reported one way for every core: a
   * CoreStartupError (kept as it is), or a CoreError, which the server turns
   * into one (`unavailable` when its reason's code is, `state_conflict`
   * otherwise); `laneway serve` prints its message and exits 1 or 2.
   */
  open(context: CoreContext): Promise<OpenCore>;
}
