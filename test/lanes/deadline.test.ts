/**
 * withinDeadline (src/lanes/deadline.ts): a lane call answers when its
 * operation_timeout passes or its caller gives up, whether or not the work
 * it started listens, and tells that work to stop.
 */
import { describe, expect, it } from "vitest";

import { withinDeadline } from "../../src/lanes/deadline.js";
import { LaneError } from "../../src/lanes/errors.js";

/** Work that never settles, recording the signal it was given. */
function forever(seen: AbortSignal[]): (signal: AbortSignal) => Promise<never> {
  return (signal) => {
    seen.push(signal);
    return new Promise<never>(() => {});
  };
}

describe("withinDeadline", () => {
  it("answers lane_timeout when operation_timeout passes and the work never settles, and aborts the work's signal", async () => {
    const seen: AbortSignal[] = [];
    const error = await withinDeadline(50, "publishing", undefined, forever(seen)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LaneError);
    expect((error as LaneError).reason).toBe("lane_timeout");
    expect((error as LaneError).message).toContain("operation_timeout passed while publishing");
    expect(seen[0]!.aborted).toBe(true);
  });

  it("answers at once when the caller's deadline passes (lane_timeout) or the caller cancels (lane_canceled)", async () => {
    const deadline = new AbortController();
    const seen: AbortSignal[] = [];
    const timing = withinDeadline(60_000, "claiming work", deadline.signal, forever(seen)).catch((e: unknown) => e);
    deadline.abort(new DOMException("the deadline passed", "TimeoutError"));
    const timedOut = (await timing) as LaneError;
    expect(timedOut.reason).toBe("lane_timeout");
    expect(seen[0]!.aborted).toBe(true);

    const cancel = new AbortController();
    const canceling = withinDeadline(60_000, "acknowledging work", cancel.signal, forever([])).catch((e: unknown) => e);
    cancel.abort(new DOMException("the call was canceled", "AbortError"));
    expect(((await canceling) as LaneError).reason).toBe("lane_canceled");

    // A caller that already gave up starts no work.
    const started: AbortSignal[] = [];
    const already = await withinDeadline(60_000, "reading a page", cancel.signal, forever(started)).catch((e: unknown) => e);
    expect((already as LaneError).reason).toBe("lane_canceled");
    expect(started).toEqual([]);
  });

  it("passes the work's own answer or failure through unchanged", async () => {
    await expect(withinDeadline(60_000, "publishing", undefined, async () => 42)).resolves.toBe(42);
    const own = new LaneError("lane_conflict", "id x is already published");
    await expect(withinDeadline(60_000, "publishing", undefined, async () => Promise.reject(own))).rejects.toBe(own);
  });
});
