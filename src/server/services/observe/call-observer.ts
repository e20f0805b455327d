import type * as http from "node:http";
import type * as http2 from "node:http2";
import { performance } from "node:perf_hooks";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, type ContextValues, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../../../gen/laneway/errors/v1/errors_pb.js";
import type { Logger } from "../../../log/logger.js";
import { parsedMessagesKey } from "../../wire/request-body.js";
import { principalKey, type Principal } from "../../auth.js";
import type { CallOutcome } from "../../core-binding.js";
import type { LanewayMetrics, RpcEntry } from "./metrics.js";

/**
 * Observes every RPC once: its metrics (src/server/services/observe/metrics.ts),
 * the domain metrics its core's binding declares (CoreBinding.metrics), and
 * one structured log line.
 *
 * A call refused by the request gate (no or unknown token, wrong
 * principal, shutting down) never reaches the interceptors, so the gate is
 * wrapped too; every other call is seen by the interceptor registered
 * outermost after the adapter's own, outside error mapping, so it sees the
 * ConnectError the client receives. A server stream is observed when it
 * ends.
 *
 * The log line (`msg: "rpc"`) carries the method, Connect code, the
 * ErrorDetail reason, the duration, the principal's kind and id (a project
 * name, a member id, `operator`; never a token), the peer's address and
 * the request body's size as sent (bytes read, or its Content-Length when
 * the body was not read, as for a call refused before it).
 * Errors are logged at info, successes at debug (`LANEWAY_LOG_LEVEL=debug`
 * shows them), or every `LANEWAY_LOG_CALLS_SAMPLE`-th success at info.
 * No message text, request field, header or payload is logged.
 */

/** What the adapter knows of a call before Connect runs: the peer and the request's size. */
export interface CallWire {
  readonly peer: string | undefined;
  readonly requestBytes: number | undefined;
}

export const callWireKey = createContextKey<CallWire | undefined>(undefined, { description: "peer and request size" });

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;

/** Records the call's peer address and request size in its context values (the adapter's hook). */
export function noteCallWire(req: NodeRequest, values: ContextValues): void {
  const length = req.headers["content-length"];
  const bytes = typeof length === "string" && /^\d+$/.test(length) ? Number(length) : undefined;
  values.set(callWireKey, { peer: req.socket?.remoteAddress, requestBytes: bytes });
}

/** Connect codes as their snake_case names (`invalid_argument`), as the metrics and the log use them. */
const codeNames: Record<number, string> = Object.fromEntries(
  Object.entries(Code)
    .filter(([, value]) => typeof value === "number")
    .map(([name, value]) => [value, name.replace(/[A-Z]/g, (c, i: number) => (i === 0 ? c.toLowerCase() : `_${c.toLowerCase()}`))]),
);

export function codeName(code: Code | undefined): string {
  return code === undefined ? "ok" : (codeNames[code] ?? "unknown");
}

export interface CallObserverOptions {
  readonly metrics: LanewayMetrics;
  readonly log: Logger;
  /** Log every n-th successful call at info (0: successes only at debug). `LANEWAY_LOG_CALLS_SAMPLE`. */
  readonly sampleSuccesses?: number;
  /** Whether the logger writes debug lines (`LANEWAY_LOG_LEVEL=debug`); when not, a success's line is not even built. Default true. */
  readonly debugEnabled?: boolean;
}



export class CallObserver {
  readonly #metrics: LanewayMetrics;
  readonly #log: Logger;
  readonly #sample: number;
  readonly #debug: boolean;
  #successes = 0;
  /** Each method's per-code metrics entries, found without building a key. */
  readonly #entries = new WeakMap<DescMethod, Map<string, RpcEntry>>();

  constructor(options: CallObserverOptions) {
    this.#metrics = options.metrics;
    this.#log = options.log;
    this.#sample = options.sampleSuccesses ?? 0;
    this.#debug = options.debugEnabled ?? true;
  }

  /** The interceptor: outermost of the router's own (inside the adapter's request interceptor). */
  readonly interceptor: Interceptor = (next) => async (req) => {
    const started = performance.now();
    const values = req.contextValues;
    let res;
    try {
      res = await next(req);
    } catch (error) {
      this.#finish(req.service, req.method, values, started, error, undefined);
      throw error;
    }
    if (!res.stream) {
      this.#finish(req.service, req.method, values, started, undefined, { request: req.stream ? undefined : req.message, response: res.message });
      return res;
    }
    const source = res.message;
    const finish = (error: unknown) => this.#finish(req.service, req.method, values, started, error, error === undefined ? { request: req.stream ? undefined : req.message, response: undefined } : undefined);
    return {
      ...res,
      message: (async function* () {
        let failed: unknown;
        let ended = false;
        try {
          yield* source;
          ended = true;
        } catch (error) {
          failed = error;
          throw error;
        } finally {
          // A stream the client left ends without an error of its own: canceled.
          finish(failed ?? (ended ? undefined : new ConnectError("the client went away", Code.Canceled)));
        }
      })(),
    };
  };

  /** Wraps the request gate so that the calls it refuses are observed too. */
  gate(inner: (ctx: HandlerContext) => Promise<void>): (ctx: HandlerContext) => Promise<void> {
    return async (ctx) => {
      const started = performance.now();
      try {
        await inner(ctx);
      } catch (error) {
        this.#finish(ctx.service, ctx.method, ctx.values, started, error, undefined);
        throw error;
      }
    };
  }

  #finish(service: DescService, method: DescMethod, values: ContextValues, started: number, error: unknown, outcome: CallOutcome | undefined): void {
    const seconds = (performance.now() - started) / 1000;
    let code = "ok";
    let reason = "";
    if (error !== undefined) {
      const connectError = ConnectError.from(error);
      code = codeName(connectError.code);
      reason = connectError.findDetails(ErrorDetailSchema)[0]?.reason ?? "";
    }
    let codes = this.#entries.get(method);
    if (codes === undefined) this.#entries.set(method, (codes = new Map()));
    let entry = codes.get(code);
    if (entry === undefined) codes.set(code, (entry = this.#metrics.rpcEntry(service.typeName, method.name, code)));
    this.#metrics.recordCall(entry, reason, seconds);
    // The domain metrics of the core whose service this is, as its binding declares them.
    const feed = this.#metrics.feedOf(service.typeName);
    if (feed !== undefined) {
      try {
        if (outcome !== undefined) feed.succeeded?.(service.typeName, method.name, outcome);
        else feed.refused?.(service.typeName, method.name, reason === "" ? "unknown" : reason);
      } catch {
        // A message of an unexpected shape must not fail the call; it is only not counted.
      }
    }
    const sampled = error === undefined && this.#sample > 0 && ++this.#successes % this.#sample === 0;
    const level = error !== undefined || sampled ? "info" : "debug";
    if (level === "debug" && !this.#debug) return;
    const principal: Principal | undefined = values.get(principalKey);
    const wire = values.get(callWireKey);
    this.#log[level]("rpc", {
      method: `${service.typeName}/${method.name}`,
      code,
      reason: reason === "" ? undefined : reason,
      durationMs: Math.round(seconds * 1e6) / 1e3,
      principal: principal?.kind ?? "none",
      principalId: principal === undefined ? undefined : principal.kind === "operator" ? "operator" : principal.id,
      peer: wire?.peer,
      requestBytes: values.get(parsedMessagesKey)?.receivedBytes || wire?.requestBytes,
    });
  }
}
