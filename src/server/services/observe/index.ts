import type { ObserveSettings } from "../../../config/index.js";
import type { Logger } from "../../../log/logger.js";
import type { BrokerConnection } from "../../../nats/index.js";
import type { CoreBinding } from "../../core-binding.js";
import { CallObserver, noteCallWire } from "./call-observer.js";
import { withHttpRoutes } from "./http-routes.js";
import { LanewayMetrics } from "./metrics.js";

/**
 * What the server needs to be observed: the metrics, the call observer
 * (an interceptor and a gate wrapper), the adapter's request hook and the
 * /metrics and /console/ routes. One per server; see docs/operations.md.
 */
export interface Observation {
  readonly metrics: LanewayMetrics;
  readonly calls: CallObserver;
  readonly noteRequest: typeof noteCallWire;
  routes<H extends Parameters<typeof withHttpRoutes>[0]>(rpc: H): H;
  close(): void;
}

/**
 * `cores`: every binding the server knows (served or not: /metrics lists
 * the same families on every process); `settings`: the server's log and
 * metrics settings.
 */
export function openObservation(options: { broker: BrokerConnection; log: Logger; cores: readonly CoreBinding[]; settings: ObserveSettings }): Observation {
  const { settings } = options;
  const metrics = new LanewayMetrics({ broker: options.broker, cores: options.cores, refreshMs: settings.metricsRefreshMs });
  const calls = new CallObserver({ metrics, log: options.log, sampleSuccesses: settings.callsSample, debugEnabled: settings.logLevel === "debug" });
  let closed = false;
  return {
    metrics,
    calls,
    noteRequest: noteCallWire,
    routes: (rpc) => withHttpRoutes(rpc, { metrics, log: options.log, metricsToken: settings.metricsToken?.reveal() }) as typeof rpc,
    close() {
      if (closed) return;
      closed = true;
      metrics.close();
    },
  };
}
