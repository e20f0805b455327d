/**
 * A broker refusal a lane call does not handle itself is `lane_unavailable`
 * (Connect `unavailable`), never an internal error: at a partition's heal a
 * replicated stream can refuse a write (no leader yet, a peer not current),
 * and the retry with the same id succeeds.
 */
import { describe, expect, it } from "vitest";

import { LaneError } from "../../src/lanes/errors.js";
import { laneErrorOf } from "../../src/lanes/lane-store.js";
import { JetStreamErrorCode, JetStreamRejectedError } from "../../src/nats/index.js";

describe("broker refusals", () => {
  it("are lane_unavailable, and only a capacity refusal counts as the broker's definite no", () => {
    // 10008: JetStream cluster temporarily unavailable; 10014: a read's consumer not (yet) placed; 10074: any other refusal.
    for (const code of [10008, 10014, 10074]) {
      const translated = laneErrorOf(new JetStreamRejectedError(code, 503), "publishing a record");
      expect(translated).toBeInstanceOf(LaneError);
      expect((translated as LaneError).reason).toBe("lane_unavailable");
      expect((translated as LaneError).cause).not.toBeInstanceOf(JetStreamRejectedError);
    }
    const full = laneErrorOf(new JetStreamRejectedError(JetStreamErrorCode.StorageResourcesExceeded, 400), "publishing a record") as LaneError;
    expect(full.reason).toBe("lane_unavailable");
    expect(full.cause).toBeInstanceOf(JetStreamRejectedError);
  });
});
