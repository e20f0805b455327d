import type { Logger } from "../../../log/logger.js";
import type { BrokerConnection } from "../../../nats/index.js";
import type { CoreBinding } from "../../core-binding.js";
import { CallObserver, callSampleFromEnv, noteCallWire } from "./call-observer.js";
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

/** `cores`: every binding the server knows (served or not: /metrics lists the same families on every process). */
export function openObservation(options: { broker: BrokerConnection; log: Logger; cores: readonly CoreBinding[]; env?: NodeJS.ProcessEnv }): Observation {
  const env = options.env ?? process.env;
  const metrics = new LanewayMetrics({ broker: options.broker, cores: options.cores });
  const calls = new CallObserver({ metrics, log: options.log, sampleSuccesses: callSampleFromEnv(env), debugEnabled: env.LANEWAY_LOG_LEVEL === "debug" });
  let closed = false;
  return {
    metrics,
    calls,
    noteRequest: noteCallWire,
    routes: (rpc) => withHttpRoutes(rpc, { metrics, log: options.log, metricsToken: env.LANEWAY_METRICS_TOKEN || undefined }) as typeof rpc,
    close() {
      if (closed) return;
      closed = true;
      metrics.close();
    },
  };
}
