import { collectDefaultMetrics, Counter, Gauge, Registry } from "prom-client";
import { SERVER_DEFAULTS } from "../../../config/index.js";
import type { BrokerConnection, BrokerStateChange } from "../../../nats/index.js";
import type { CoreBinding, CoreCallMetrics } from "../../core-binding.js";

/**
 * Laneway's Prometheus metrics (`GET /metrics`, text exposition 0.0.4),
 * built on prom-client. docs/operations.md lists every metric.
 *
 * Label values are bounded: service and method names from the contract,
 * Connect codes, reason codes from the error domains, lane and group
 * identifiers from the lanes configuration (only ever taken from a call
 * that succeeded, so an unknown name a caller sends never becomes a label),
 * record kinds, broker states. Never a token, receipt, payload, record id
 * or free text.
 *
 * The per-call path costs a map lookup and two increments: each
 * (method, code) pair's counter and histogram children are cached.
 *
 * This registry holds the server's own metrics (per RPC, the NATS
 * connection, prom-client's process metrics); each core's binding
 * registers its own in it (CoreBinding.metrics) and the call observer
 * feeds them from the calls to that core's services.
 */

/** Latency buckets (seconds): 0.5 ms to 30 s, for unary calls and long claims alike. */
const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];


/** One (method, code)'s latency histogram and its calls by reason, counted in plain numbers. */
export interface RpcEntry {
  /** Non-cumulative bucket counts, one per bound of DURATION_BUCKETS and one for +Inf. */
  readonly buckets: Float64Array;
  sum: number;
  count: number;
  /** Calls by ErrorDetail reason ("" for ok). */
  readonly reasons: Map<string, number>;
}

/**
 * The per-RPC counter and histogram. prom-client's own children hash
 * their label set on every increment (3-5 µs a call on a busy machine):
 * here each call costs two map lookups and a few additions, and the values
 * are handed to prom-client's registry, which writes the exposition, only
 * when /metrics is scraped.
 */
class RpcStats {
  readonly #byMethod = new Map<string, Map<string, RpcEntry>>();

  entry(service: string, method: string, code: string): RpcEntry {
    const key = service + "/" + method;
    let codes = this.#byMethod.get(key);
    if (codes === undefined) this.#byMethod.set(key, (codes = new Map()));
    let entry = codes.get(code);
    if (entry === undefined) codes.set(code, (entry = { buckets: new Float64Array(DURATION_BUCKETS.length + 1), sum: 0, count: 0, reasons: new Map() }));
    return entry;
  }

  /** Records one call. */
  record(entry: RpcEntry, reason: string, seconds: number): void {
    entry.reasons.set(reason, (entry.reasons.get(reason) ?? 0) + 1);
    let i = 0;
    while (i < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[i]!) i++;
    entry.buckets[i]! += 1;
    entry.sum += seconds;
    entry.count += 1;
  }

  /** The two metrics as prom-client's registry reads them. */
  metrics(): { calls: PromMetric; duration: PromMetric } {
    const stats = this;
    const each = function* () {
      for (const [key, codes] of stats.#byMethod) {
        const slash = key.lastIndexOf("/");
        for (const [code, entry] of codes) yield { service: key.slice(0, slash), method: key.slice(slash + 1), code, entry };
      }
    };
    const base = { aggregator: "sum" as const, reset() {}, labelNames: [] as string[] };
    const callsHelp = "RPC calls by service, method, Connect code and the ErrorDetail reason (empty for ok).";
    const durationHelp = "RPC call duration from the request's arrival at the interceptors to its answer (a server stream: to its end).";
    return {
      calls: {
        ...base,
        name: "laneway_rpc_calls_total",
        help: callsHelp,
        type: "counter",
        get: () => {
          const values: PromValue[] = [];
          for (const { service, method, code, entry } of each()) for (const [reason, value] of entry.reasons) values.push({ labels: { service, method, code, reason }, value });
          return { name: "laneway_rpc_calls_total", help: callsHelp, type: "counter", aggregator: "sum", values };
        },
      },
      duration: {
        ...base,
        name: "laneway_rpc_duration_seconds",
        help: durationHelp,
        type: "histogram",
        get: () => {
          const values: PromValue[] = [];
          for (const { service, method, code, entry } of each()) {
            let cumulative = 0;
            for (let i = 0; i <= DURATION_BUCKETS.length; i++) {
              cumulative += entry.buckets[i]!;
              values.push({ metricName: "laneway_rpc_duration_seconds_bucket", labels: { service, method, code, le: i < DURATION_BUCKETS.length ? DURATION_BUCKETS[i]! : "+Inf" }, value: cumulative });
            }
            values.push({ metricName: "laneway_rpc_duration_seconds_sum", labels: { service, method, code }, value: entry.sum });
            values.push({ metricName: "laneway_rpc_duration_seconds_count", labels: { service, method, code }, value: entry.count });
          }
          return { name: "laneway_rpc_duration_seconds", help: durationHelp, type: "histogram", aggregator: "sum", values };
        },
      },
    };
  }
}

interface PromValue {
  labels: Record<string, string | number>;
  value: number;
  metricName?: string;
}

/** What prom-client's registry needs of a metric it did not make. */
interface PromMetric {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly aggregator: "sum";
  readonly labelNames: string[];
  get(): { name: string; help: string; type: string; aggregator: "sum"; values: PromValue[] };
  reset(): void;
}

export class LanewayMetrics {
  readonly registry = new Registry();
  readonly #rpc = new RpcStats();
  /** Each core service's domain metrics, by service type name (from its binding). */
  readonly #feeds = new Map<string, CoreCallMetrics>();
  readonly #cores: CoreCallMetrics[] = [];
  readonly natsReconnects: Counter;
  readonly natsDisconnects: Counter<"reason">;
  readonly natsSlowConsumers: Counter;
  readonly #unsubscribe: (() => void) | undefined;

  /**
   * `cores`: the bindings whose metrics this registry holds (each registers
   * its own, in the order given; see CoreBinding.metrics).
   */
  constructor(options: { broker?: BrokerConnection; refreshMs?: number; now?: () => number; cores?: readonly Pick<CoreBinding, "services" | "metrics">[] } = {}) {
    const registers = [this.registry];
    const context = { refreshMs: options.refreshMs ?? SERVER_DEFAULTS.metricsRefreshMs, now: options.now ?? Date.now };
    collectDefaultMetrics({ register: this.registry });
    const rpc = this.#rpc.metrics();
    this.registry.registerMetric(rpc.calls as never);
    this.registry.registerMetric(rpc.duration as never);
    for (const binding of options.cores ?? []) {
      const feed = binding.metrics?.(this.registry, context);
      if (feed === undefined) continue;
      this.#cores.push(feed);
      for (const { service } of binding.services) this.#feeds.set(service.typeName, feed);
    }

    this.natsReconnects = new Counter({ name: "laneway_nats_reconnects_total", help: "Times Laneway's NATS connection was established again after being lost.", registers });
    this.natsDisconnects = new Counter({ name: "laneway_nats_disconnects_total", help: "Times Laneway's NATS connection was lost, by reason.", labelNames: ["reason"], registers });
    this.natsSlowConsumers = new Counter({ name: "laneway_nats_slow_consumer_total", help: "Times the broker cut Laneway's connection as a slow consumer.", registers });
    const broker = options.broker;
    new Gauge({
      name: "laneway_nats_connected",
      help: "1 while Laneway's NATS connection is connected, 0 otherwise.",
      registers,
      collect() {
        this.set(broker?.state === "connected" ? 1 : 0);
      },
    });
    new Gauge({
      name: "laneway_nats_state",
      help: "Laneway's NATS connection state: 1 for the current state, 0 for the others.",
      labelNames: ["state"],
      registers,
      collect() {
        for (const state of ["connecting", "connected", "disconnected", "closed"]) this.set({ state }, broker?.state === state ? 1 : 0);
      },
    });
    this.#unsubscribe = broker?.onStateChange((change: BrokerStateChange) => {
      if (change.state === "connected" && change.generation > 1) this.natsReconnects.inc();
      if (change.state === "disconnected") {
        const reason = change.disconnect ?? "unknown";
        this.natsDisconnects.inc({ reason });
        if (reason === "slow_consumer") this.natsSlowConsumers.inc();
      }
    });
    this.natsReconnects.inc(0);
    this.natsSlowConsumers.inc(0);
  }

  /** The domain metrics of the core that offers `service` (undefined for a service that is no core's, or whose core declares none). */
  feedOf(service: string): CoreCallMetrics | undefined {
    return this.#feeds.get(service);
  }

  /** The per-RPC entry of one (service, method, code); callers may keep it. */
  rpcEntry(service: string, method: string, code: string): RpcEntry {
    return this.#rpc.entry(service, method, code);
  }

  /** Counts one call of an entry, with its reason and duration. */
  recordCall(entry: RpcEntry, reason: string, seconds: number): void {
    this.#rpc.record(entry, reason, seconds);
  }

  /** The exposition. */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  close(): void {
    // The registry stays readable: a scrape during shutdown still answers.
    for (const core of this.#cores) core.close?.();
    this.#unsubscribe?.();
  }
}
