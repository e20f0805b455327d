import { setMaxListeners } from "node:events";

import { LaneError } from "./errors.js";

/**
 * The bound every lane call keeps whatever the broker does.
 *
 * Each broker request of a call has its own timeout, but one call makes
 * several of them in a row (a reservation, the append, a read back), waits
 * in a group's queue, or pulls page after page: the sum can outlive the
 * namespace's `operation_timeout`, and a request on a connection to a node
 * cut off from its peers can sit unanswered for its whole timeout. So the
 * whole call is raced against one timer: when `operation_timeout` (plus the
 * time a claim was asked to wait) passes, or the caller's own signal aborts
 * (its deadline or a cancellation), the call answers at once with
 * `lane_timeout` or `lane_canceled`, and the work still running is told to
 * stop through the signal it was given. What it may still complete at the
 * broker is what a retry with the same id (or the lease's expiry) resolves.
 * When the timer fires late because the process itself did not run
 * (SIGSTOP, a starved event loop), the work gets one grace of a second
 * once the process runs again, so that it answers with what it found.
 */

/** How late a deadline timer may fire before the process counts as having been stopped. */
const LATE_MS = 500;
/** The grace a call's work gets after the process was stopped past its deadline. */
const GRACE_MS = 1_000;

/** What a bounded call is doing, for the message (fixed text, never input). */
export type BoundedAction = string;

/**
 * Runs `operation` with a signal that aborts when `timeoutMs` passes or
 * `callerSignal` aborts, and settles no later than that moment (give or
 * take the event loop's own delay), whether or not the operation listens.
 */
export function withinDeadline<T>(
  timeoutMs: number,
  action: BoundedAction,
  callerSignal: AbortSignal | undefined,
  operation: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController();
  // A batch waits on many records at once, each adding its own listener.
  setMaxListeners(0, controller.signal);
  const fail = (reason: "timeout" | "canceled" | "caller_timeout"): LaneError =>
    reason === "canceled"
      ? new LaneError("lane_canceled", `the call was canceled while ${action}`)
      : reason === "caller_timeout"
        ? new LaneError("lane_timeout", `the deadline passed while ${action}`)
        : new LaneError("lane_timeout", `operation_timeout passed while ${action}; retry with the same id`);

  if (callerSignal?.aborted) return Promise.reject(fail(isTimeoutReason(callerSignal.reason) ? "caller_timeout" : "canceled"));

  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const finish = () => {
      settled = true;
      clearTimeout(timer);
      callerSignal?.removeEventListener("abort", onCaller);
    };
    const stop = (reason: "timeout" | "canceled" | "caller_timeout") => {
      if (settled) return;
      finish();
      const error = fail(reason);
      controller.abort(new DOMException(error.message, reason === "canceled" ? "AbortError" : "TimeoutError"));
      reject(error);
    };
    const onCaller = () => stop(isTimeoutReason(callerSignal!.reason) ? "caller_timeout" : "canceled");
    const due = performance.now() + Math.max(0, timeoutMs);
    let graced = false;
    const onTimer = () => {
      // A timer that fires late means this process did not run (stopped,
      // or its event loop starved), not that the broker was slow: the work,
      // runnable again, gets one short grace to settle with its own answer.
      if (!graced && performance.now() - due > LATE_MS) {
        graced = true;
        timer = setTimeout(onTimer, GRACE_MS);
        return;
      }
      stop("timeout");
    };
    let timer = setTimeout(onTimer, Math.max(0, timeoutMs));
    callerSignal?.addEventListener("abort", onCaller, { once: true });
    let running: Promise<T>;
    try {
      running = operation(controller.signal);
    } catch (error) {
      running = Promise.reject(error);
    }
    running.then(
      (value) => {
        if (settled) return;
        finish();
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        finish();
        reject(error);
      },
    );
  });
}

/** A signal aborted because a deadline passed carries a `TimeoutError` (AbortSignal.timeout, or the server's adapter). */
function isTimeoutReason(reason: unknown): boolean {
  return reason instanceof Error && reason.name === "TimeoutError";
}
