import { setMaxListeners } from "node:events";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";

/**
 * The one way a call's cancellation reaches a core.
 *
 * Connect aborts a handler's `ctx.signal` for four causes: the deadline
 * passed (reason: a ConnectError `deadline_exceeded`), the client went away,
 * the server is shutting down (a ConnectError `unavailable`), and — after
 * every call, successful or not — the call ended (a bare `AbortError`). A
 * core knows no Connect type, so the signal it receives is aborted with a
 * `TimeoutError` for the deadline and an `AbortError` for every other cause,
 * which is what `AbortSignal.timeout` and `AbortController.abort()` give a
 * library. A service that ends with the server's drain (a follow, a watch)
 * passes the drain signal too.
 *
 * The common path is cheap: every call ends with an abort, so the reasons
 * are built once, not per call, and no DOMException is constructed when a
 * call ends normally.
 */
export function callSignal(ctx: HandlerContext, drain?: AbortSignal): AbortSignal {
  const controller = new AbortController();
  const derived = controller.signal;
  // A batch waits on up to 128 records at once, each adding its own abort
  // listener for the length of one broker operation: not a leak.
  setMaxListeners(0, derived);
  const source = ctx.signal;
  if (source.aborted) {
    controller.abort(coreReason(source.reason));
    return derived;
  }
  if (drain?.aborted) {
    controller.abort(CANCELED);
    return derived;
  }
  // Every call's signal aborts when the call ends, which releases its
  // listener; the drain outlives calls, so its listener is removed then.
  const onDrain = drain && (() => controller.abort(CANCELED));
  source.addEventListener(
    "abort",
    () => {
      if (onDrain) drain.removeEventListener("abort", onDrain);
      controller.abort(coreReason(source.reason));
    },
    { once: true },
  );
  if (onDrain) drain.addEventListener("abort", onDrain, { once: true });
  return derived;
}

/** The reason a core sees for a call aborted with `reason`. */
function coreReason(reason: unknown): DOMException {
  return reason instanceof ConnectError && reason.code === Code.DeadlineExceeded ? DEADLINE : CANCELED;
}

// Shared reasons: an abort reason is a value a core compares by name, never
// a place that records a stack, so one instance of each serves every call.
const CANCELED = new DOMException("the call was canceled", "AbortError");
const DEADLINE = new DOMException("the deadline passed", "TimeoutError");
