/**
 * `npm run bench call-signal`: what carrying a call's cancellation into a
 * core costs per call, as Connect runs it: a handler signal that is aborted
 * when every call ends. Baseline: the bare handler signal. Compared: the
 * former per-call translation (a new DOMException on every call's end),
 * `AbortSignal.any`, and `callSignal`, each with the server's drain signal.
 */
import { setMaxListeners } from "node:events";
import type { HandlerContext } from "@connectrpc/connect";
import { callSignal } from "../src/server/services/call-signal.js";

/** The translation the lanes service used before `callSignal`: a fresh reason on every abort. */
function perCallReason(ctx: { signal: AbortSignal }, drain: AbortSignal): AbortSignal {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  for (const signal of [ctx.signal, drain]) {
    signal.addEventListener("abort", () => controller.abort(new DOMException("the call was canceled", "AbortError")), { once: true, signal: controller.signal });
  }
  return controller.signal;
}

function timed(calls: number, derive: (ctx: { signal: AbortSignal }) => AbortSignal): number {
  const start = performance.now();
  for (let i = 0; i < calls; i++) {
    const call = new AbortController();
    derive({ signal: call.signal });
    call.abort();
  }
  return performance.now() - start;
}

export async function callSignalBench(): Promise<void> {
  const drain = new AbortController().signal;
  setMaxListeners(0, drain);
  const calls = 10_000;
  for (let round = 1; round <= 3; round++) {
    const bare = timed(calls, (ctx) => ctx.signal);
    const before = timed(calls, (ctx) => perCallReason(ctx, drain)) - bare;
    const any = timed(calls, (ctx) => AbortSignal.any([ctx.signal, drain])) - bare;
    const now = timed(calls, (ctx) => callSignal(ctx as HandlerContext, drain)) - bare;
    const us = (ms: number) => `${((ms / calls) * 1000).toFixed(2)} µs`;
    console.log(
      `[call-signal] round ${round}: per call over the bare signal: per-call reason ${us(before)}, AbortSignal.any ${us(any)}, callSignal ${us(now)}; ` +
        `per-call reason / callSignal = ${(before / now).toFixed(2)}`,
    );
  }
}
