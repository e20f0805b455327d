import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { coreReaders, installCoreEventSink } from "../../../observe/core-events.js";
import type { BrokerConnection, BrokerStateChange } from "../../../nats/index.js";

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
 * Per-group figures come from what the lanes core holds in memory for the
 * work it already did; the lanes' last sequences are read from the broker
 * (one stream-info request per lane, never per group) at most once per
 * refresh interval however often Prometheus scrapes.
 */

/** Latency buckets (seconds): 0.5 ms to 30 s, for unary calls and long claims alike. */
const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Kmap submission-to-outcome buckets (seconds). */
const APPLY_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** How often the lanes' last sequences may be read from the broker; `LANEWAY_METRICS_REFRESH_MS`, default 5 s. */
export function metricsRefreshMs(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env.LANEWAY_METRICS_REFRESH_MS);
  return Number.isFinite(value) && value >= 0 ? value : 5_000;
}

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
  readonly published: Counter<"lane" | "kind">;
  readonly publishRefusals: Counter<"reason">;
  readonly leased: Counter<"lane" | "group">;
  readonly receipts: Counter<"lane" | "group" | "operation">;
  readonly receiptRefusals: Counter<"operation" | "reason">;
  readonly recoveries: Counter<"lane" | "group">;
  readonly kmapSubmitted: Counter<"existing">;
  readonly kmapRefusals: Counter<"reason">;
  readonly kmapCommitted: Counter;
  readonly kmapFailed: Counter<"code">;
  readonly kmapApply: Histogram<"outcome">;
  readonly minted: Counter<"kind">;
  readonly mintRefusals: Counter<"reason">;
  readonly revocations: Counter;
  readonly invites: Counter;
  readonly natsReconnects: Counter;
  readonly natsDisconnects: Counter<"reason">;
  readonly natsSlowConsumers: Counter;
  /** The highest sequence this process's publications reached per lane (read between broker refreshes). */
  readonly #publishedThrough = new Map<string, number>();
  #lastSequences: { at: number; values: ReadonlyMap<string, number>; pending?: Promise<ReadonlyMap<string, number>> } | undefined;
  readonly #refreshMs: number;
  readonly #uninstall: () => void;
  readonly #unsubscribe: (() => void) | undefined;
  readonly #now: () => number;

  constructor(options: { broker?: BrokerConnection; refreshMs?: number; now?: () => number } = {}) {
    const registers = [this.registry];
    this.#refreshMs = options.refreshMs ?? metricsRefreshMs();
    this.#now = options.now ?? Date.now;
    collectDefaultMetrics({ register: this.registry });
    const rpc = this.#rpc.metrics();
    this.registry.registerMetric(rpc.calls as never);
    this.registry.registerMetric(rpc.duration as never);
    this.published = new Counter({ name: "laneway_lane_records_published_total", help: "Records stored by Publish and PublishBatch (duplicates not counted), by lane and kind.", labelNames: ["lane", "kind"], registers });
    this.publishRefusals = new Counter({ name: "laneway_lane_publish_refusals_total", help: "Publications refused, by reason (lane_capacity when a lane is full).", labelNames: ["reason"], registers });
    this.leased = new Counter({ name: "laneway_group_deliveries_leased_total", help: "Deliveries leased by Claim and ClaimBatch, by lane and group.", labelNames: ["lane", "group"], registers });
    this.receipts = new Counter({ name: "laneway_group_receipts_total", help: "Receipts accepted, by lane, group and operation (ack, nack, renew).", labelNames: ["lane", "group", "operation"], registers });
    this.receiptRefusals = new Counter({
      name: "laneway_group_receipt_refusals_total",
      help: "Receipt operations and claims refused, by operation (claim, ack, nack, renew) and reason (stale, lane_capacity, ...).",
      labelNames: ["operation", "reason"],
      registers,
    });
    this.recoveries = new Counter({ name: "laneway_group_recoveries_total", help: "Recoveries recorded by RecoverGroup, by lane and group.", labelNames: ["lane", "group"], registers });
    this.kmapSubmitted = new Counter({ name: "laneway_kmap_commands_submitted_total", help: "Kmap commands accepted by SubmitCommand; existing=true for an identical earlier submission returned.", labelNames: ["existing"], registers });
    this.kmapRefusals = new Counter({ name: "laneway_kmap_submit_refusals_total", help: "SubmitCommand calls refused, by reason (backlog_full, conflict, ...).", labelNames: ["reason"], registers });
    this.kmapCommitted = new Counter({ name: "laneway_kmap_commands_committed_total", help: "Kmap commands committed by the command runtime.", registers });
    this.kmapFailed = new Counter({ name: "laneway_kmap_commands_failed_total", help: "Kmap commands that failed for good, by rejection code.", labelNames: ["code"], registers });
    this.kmapApply = new Histogram({
      name: "laneway_kmap_apply_latency_seconds",
      help: "Time from a Kmap command's submission to its outcome (committed or failed).",
      labelNames: ["outcome"],
      buckets: APPLY_BUCKETS,
      registers,
    });
    new Gauge({
      name: "laneway_kmap_backlog",
      help: "Unfinished (Queued or Applying) Kmap commands.",
      registers,
      collect() {
        const kmap = coreReaders().kmap?.();
        if (kmap !== undefined) this.set(kmap.pending);
      },
    });
    new Gauge({
      name: "laneway_kmap_backlog_max",
      help: "The most unfinished Kmap commands the lane accepts (--kmap-max-pending).",
      registers,
      collect() {
        const kmap = coreReaders().kmap?.();
        if (kmap !== undefined) this.set(kmap.maxPending);
      },
    });
    this.minted = new Counter({ name: "laneway_hive_credentials_minted_total", help: "Hive member credentials minted, by kind (join, refresh).", labelNames: ["kind"], registers });
    this.mintRefusals = new Counter({ name: "laneway_hive_credential_refusals_total", help: "Join and Refresh calls refused, by reason.", labelNames: ["reason"], registers });
    this.revocations = new Counter({ name: "laneway_hive_revocations_total", help: "Hive members retired (their credentials revoked) by RetireMember.", registers });
    this.invites = new Counter({ name: "laneway_hive_invites_total", help: "Hive member invites issued.", registers });

    const metrics = this;
    const groupGauge = (name: string, help: string, value: (g: GroupFigures) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["lane", "group"],
        registers,
        async collect() {
          this.reset();
          for (const g of await metrics.#groupFigures()) this.set({ lane: g.lane, group: g.group }, value(g));
        },
      });
    groupGauge("laneway_group_leases", "Live leases of a work group, as this process last saw its ledger.", (g) => g.leases);
    groupGauge("laneway_group_retries_waiting", "Deliveries of a work group waiting for a retry (nacked or lease expired).", (g) => g.retriesWaiting);
    groupGauge("laneway_group_backlog", "A work group's backlog: records after its cursor plus its unfinished deliveries (an upper bound of its work: events after the cursor count too).", (g) => g.backlog);
    groupGauge(
      "laneway_group_oldest_unfinished_age_seconds",
      "Age of the oldest unfinished delivery whose record this process read (0 when none is unfinished).",
      (g) => g.oldestAgeSeconds,
    );
    new Gauge({
      name: "laneway_lane_last_sequence",
      help: "A lane's last stream sequence (read from the broker at most once per refresh interval, or this process's last publication if later).",
      labelNames: ["lane"],
      registers,
      async collect() {
        this.reset();
        for (const [lane, last] of await metrics.#laneLast()) this.set({ lane }, last);
      },
    });

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
    for (const state of ["join", "refresh"]) this.minted.inc({ kind: state }, 0);
    this.kmapCommitted.inc(0);
    this.revocations.inc(0);
    this.invites.inc(0);
    this.natsReconnects.inc(0);
    this.natsSlowConsumers.inc(0);

    this.#uninstall = installCoreEventSink({
      kmapCommitted: (latencies) => {
        this.kmapCommitted.inc(latencies.length);
        for (const ms of latencies) this.kmapApply.observe({ outcome: "committed" }, Math.max(0, ms) / 1000);
      },
      kmapFailed: (code, ms) => {
        this.kmapFailed.inc({ code });
        this.kmapApply.observe({ outcome: "failed" }, Math.max(0, ms) / 1000);
      },
    });
  }

  /** The per-RPC entry of one (service, method, code); callers may keep it. */
  rpcEntry(service: string, method: string, code: string): RpcEntry {
    return this.#rpc.entry(service, method, code);
  }

  /** Counts one call of an entry, with its reason and duration. */
  recordCall(entry: RpcEntry, reason: string, seconds: number): void {
    this.#rpc.record(entry, reason, seconds);
  }

  /** Notes a sequence this process's publication reached. */
  publishedThrough(lane: string, sequence: number): void {
    if (sequence > (this.#publishedThrough.get(lane) ?? 0)) this.#publishedThrough.set(lane, sequence);
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
    this.#uninstall();
    this.#unsubscribe?.();
  }

  /** Each lane's last sequence: the broker's, read at most once per refresh interval, or a later publication of this process. */
  async #laneLast(): Promise<Map<string, number>> {
    const reader = coreReaders().laneLastSequences;
    const now = this.#now();
    let cached = this.#lastSequences;
    if (reader !== undefined && (cached === undefined || now - cached.at >= this.#refreshMs)) {
      // Concurrent scrapes share one read.
      const pending = cached?.pending ?? reader();
      this.#lastSequences = { at: cached?.at ?? 0, values: cached?.values ?? new Map(), pending };
      try {
        cached = this.#lastSequences = { at: this.#now(), values: await pending };
      } catch {
        cached = this.#lastSequences = { at: this.#now(), values: cached?.values ?? new Map() };
      }
    }
    const last = new Map(cached?.values ?? []);
    for (const [lane, sequence] of this.#publishedThrough) if (sequence > (last.get(lane) ?? 0)) last.set(lane, sequence);
    return last;
  }

  async #groupFigures(): Promise<GroupFigures[]> {
    const groups = coreReaders().groups?.() ?? [];
    if (groups.length === 0) return [];
    const last = await this.#laneLast();
    const now = this.#now();
    return groups.map((g) => ({
      lane: g.lane,
      group: g.group,
      leases: g.leases,
      retriesWaiting: g.retriesWaiting,
      backlog: Math.max(0, (last.get(g.lane) ?? g.cursor) - g.cursor) + g.unfinished,
      oldestAgeSeconds: g.unfinished === 0 || g.oldestUnfinishedStoredAt === undefined ? 0 : Math.max(0, now - g.oldestUnfinishedStoredAt) / 1000,
    }));
  }
}

interface GroupFigures {
  readonly lane: string;
  readonly group: string;
  readonly leases: number;
  readonly retriesWaiting: number;
  readonly backlog: number;
  readonly oldestAgeSeconds: number;
}
