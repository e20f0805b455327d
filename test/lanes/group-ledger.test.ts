import { describe, expect, test } from "vitest";
import {
  emptyLedger,
  encodeLedger,
  LedgerDraft,
  MAX_LEDGER_BYTES,
  MAX_RECOVERIES,
  receiptHash,
  recoveryBodyHash,
  retryDelayMs,
  slotLimit,
  worstCaseLedgerBytes,
  type ClaimCandidates,
  type Ledger,
  type RecoveryRequest,
} from "../../src/lanes/group-ledger.js";
import { LaneError } from "../../src/lanes/index.js";
import type { LaneBounds } from "../../src/lanes/index.js";

/**
 * The group ledger's state machine on its own, with an explicit clock:
 * leases and receipts, renew/ack/nack, the specification's fairness rules,
 * slots and pruning, and explicit recovery. (The same rules against real
 * JetStream, with CAS between processes, are in the other lanes tests.)
 */

const bounds: LaneBounds = {
  leaseMs: 30_000,
  maxPending: 4,
  maxLedger: 16,
  retryDelayMs: 1_000,
  maxRetryDelayMs: 8_000,
  ackRetentionMs: 60_000,
  retentionMs: 3_600_000,
  duplicateWindowMs: 60_000,
  maxRecords: 1_000,
  maxBytes: 1_048_576,
  maxPayload: 1_024,
  operationTimeoutMs: 5_000,
  ledgerBytes: 16_777_216,
};

function candidates(fresh: number[], options: Partial<ClaimCandidates> = {}): ClaimCandidates {
  return { fresh, freshComplete: true, firstRetained: 1, lastSequence: Math.max(0, ...fresh), retained: () => true, ...options };
}

function reasonOf(action: () => unknown): string | undefined {
  try {
    action();
  } catch (error) {
    return error instanceof LaneError ? error.reason : String(error);
  }
  return undefined;
}

/** Applies `change` to a draft at `now` and returns the resulting ledger and what `change` returned. */
function step<T>(ledger: Ledger, now: number, change: (draft: LedgerDraft) => T): { ledger: Ledger; value: T } {
  const draft = new LedgerDraft(ledger, bounds, now);
  const value = change(draft);
  return { ledger: draft.toLedger(), value };
}

describe("claims, receipts and leases", () => {
  test("fresh work is leased in sequence order, attempt 1, each with its own 64-hex receipt and a lease", () => {
    const { ledger, value } = step(emptyLedger(4), 1_000, (d) => d.claim("beacon", 3, candidates([2, 5, 9])));
    expect(value.leased.map((l) => [l.sequence, l.attempt, l.leaseExpiresAt])).toEqual([
      [2, 1, 31_000],
      [5, 1, 31_000],
      [9, 1, 31_000],
    ]);
    for (const leased of value.leased) expect(leased.receipt).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(value.leased.map((l) => l.receipt)).size).toBe(3);
    expect(ledger.cursor).toBe(9);
    // The ledger keeps hashes only.
    expect(JSON.stringify(ledger)).not.toContain(value.leased[0]!.receipt);
  });

  test("max_pending live leases stop a claim; an expired lease no longer counts", () => {
    const { ledger, value } = step(emptyLedger(8), 0, (d) => d.claim("beacon", 8, candidates([1, 2, 3, 4, 5, 6])));
    expect(value.leased).toHaveLength(4);
    const later = step(ledger, 10_000, (d) => d.claim("beacon", 8, candidates([5, 6])));
    expect(later.value.leased).toHaveLength(0);
    const expired = step(ledger, 31_000, (d) => d.claim("beacon", 1, candidates([5, 6])));
    expect(expired.value.leased.map((l) => l.sequence)).toHaveLength(1);
  });

  test("fresh work beyond the slots asks for a slot; after growth it is leased", () => {
    const full = step(emptyLedger(2), 0, (d) => d.claim("beacon", 3, candidates([1, 2, 3])));
    expect(full.value.leased.map((l) => l.sequence)).toEqual([1, 2]);
    expect(full.value.needsSlot).toBe(true);
    const grown = step(full.ledger, 0, (d) => {
      d.growTo(3);
      return d.claim("beacon", 1, candidates([3]));
    });
    expect(grown.value.leased.map((l) => l.sequence)).toEqual([3]);
    expect(grown.ledger.slots).toBe(3);
  });

  test("a claim meets an expired gap after its cursor with lane_cursor", () => {
    expect(reasonOf(() => new LedgerDraft(emptyLedger(1), bounds, 0).claim("beacon", 1, candidates([7], { firstRetained: 5, lastSequence: 9 })))).toBe("lane_cursor");
  });
});

describe("renew, ack and nack", () => {
  const claimed = step(emptyLedger(4), 0, (d) => d.claim("beacon", 1, candidates([3])));
  const { receipt, sequence } = claimed.value.leased[0]!;

  test("renew extends a live lease; after it ended, renew is stale", () => {
    const renewed = step(claimed.ledger, 10_000, (d) => d.renew("beacon", sequence, receipt));
    expect(renewed.value.leaseExpiresAt).toBe(40_000);
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, 30_001).renew("beacon", sequence, receipt))).toBe("lane_stale");
  });

  test("ack completes, a repeat is a duplicate with the first time, and another receipt or project is stale", () => {
    const acked = step(claimed.ledger, 5_000, (d) => d.ack("beacon", sequence, receipt));
    expect(acked.value).toEqual({ ackedAt: 5_000, duplicate: false });
    expect(step(acked.ledger, 9_000, (d) => d.ack("beacon", sequence, receipt)).value).toEqual({ ackedAt: 5_000, duplicate: true });
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, 1).ack("beacon", sequence, "f".repeat(64)))).toBe("lane_stale");
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, 1).ack("atlas", sequence, receipt))).toBe("lane_stale");
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, 1).ack("beacon", sequence + 1, receipt))).toBe("lane_stale");
  });

  test("after an expired lease was claimed again, the old receipt can neither ack, nack nor renew", () => {
    const again = step(claimed.ledger, 31_000, (d) => d.claim("beacon", 1, candidates([])));
    expect(again.value.leased.map((l) => [l.sequence, l.attempt])).toEqual([[sequence, 2]]);
    for (const action of ["ack", "nack", "renew"] as const) {
      expect(reasonOf(() => new LedgerDraft(again.ledger, bounds, 31_500)[action]("beacon", sequence, receipt))).toBe("lane_stale");
    }
    expect(step(again.ledger, 31_500, (d) => d.ack("beacon", sequence, again.value.leased[0]!.receipt)).value.duplicate).toBe(false);
  });

  test("nack schedules retry_delay doubled per attempt and capped; a repeated nack keeps its deadline", () => {
    expect([1, 2, 3, 4, 5, 10].map((a) => retryDelayMs(bounds, a))).toEqual([1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
    const nacked = step(claimed.ledger, 2_000, (d) => d.nack("beacon", sequence, receipt));
    expect(nacked.value).toEqual({ retryAt: 3_000, attempt: 1, duplicate: false });
    expect(step(nacked.ledger, 2_900, (d) => d.nack("beacon", sequence, receipt)).value).toEqual({ retryAt: 3_000, attempt: 1, duplicate: true });
    // A nacked delivery cannot be acked with its old receipt.
    expect(reasonOf(() => new LedgerDraft(nacked.ledger, bounds, 2_100).ack("beacon", sequence, receipt))).toBe("lane_stale");
    // Not eligible before its retry time, eligible after.
    expect(step(nacked.ledger, 2_999, (d) => d.claim("beacon", 1, candidates([]))).value.leased).toHaveLength(0);
    expect(step(nacked.ledger, 3_000, (d) => d.claim("beacon", 1, candidates([]))).value.leased.map((l) => l.attempt)).toEqual([2]);
  });

  test("acks leave the ledger after ack_retention, their slots stay, and an old ack is then stale", () => {
    const acked = step(claimed.ledger, 5_000, (d) => d.ack("beacon", sequence, receipt)).ledger;
    const pruned = step(acked, 5_000 + bounds.ackRetentionMs + 1, () => undefined).ledger;
    expect(pruned.d).toEqual([]);
    expect(pruned.slots).toBe(acked.slots);
    expect(reasonOf(() => new LedgerDraft(acked, bounds, 5_000 + bounds.ackRetentionMs + 1).ack("beacon", sequence, receipt))).toBe("lane_stale");
  });
});

describe("fairness", () => {
  test("retries and fresh work alternate by a persisted turn", () => {
    let ledger = step(emptyLedger(8), 0, (d) => d.claim("beacon", 2, candidates([1, 2]))).ledger;
    // Both leases expire; fresh work 3, 4, 5 waits.
    const order: number[] = [];
    for (let i = 0; i < 4; i++) {
      const next = step(ledger, 40_000 + i, (d) => d.claim("beacon", 1, candidates([3, 4, 5].filter((s) => s > d.cursor))));
      order.push(next.value.leased[0]!.sequence);
      ledger = next.ledger;
    }
    expect(order).toEqual([1, 3, 2, 4]);
  });

  test("an always-ready low-sequence item cannot starve higher-sequence expired work (rotation)", () => {
    let ledger = step(emptyLedger(8), 0, (d) => d.claim("beacon", 3, candidates([2, 7, 9]))).ledger;
    const seen: number[] = [];
    let now = 40_000;
    for (let i = 0; i < 6; i++) {
      const next = step(ledger, now, (d) => d.claim("beacon", 1, candidates([])));
      const leased = next.value.leased[0]!;
      seen.push(leased.sequence);
      // The item fails at once every time: nack it, and let its retry fall due.
      ledger = step(next.ledger, now, (d) => d.nack("beacon", leased.sequence, leased.receipt)).ledger;
      now += 100_000;
    }
    expect(seen).toEqual([2, 7, 9, 2, 7, 9]);
  });

  test("when fresh work needs a slot and retries wait, the retry is leased first", () => {
    const full = step(emptyLedger(1), 0, (d) => d.claim("beacon", 1, candidates([1]))).ledger;
    const next = step({ ...full, turn: "fresh" }, 40_000, (d) => d.claim("beacon", 1, candidates([2])));
    expect(next.value.leased.map((l) => l.sequence)).toEqual([1]);
    expect(next.value.needsSlot).toBe(true);
  });

  test("polling slower than the retry delay still reaches fresh work", () => {
    let ledger = step(emptyLedger(8), 0, (d) => d.claim("beacon", 1, candidates([1]))).ledger;
    const order: number[] = [];
    let now = 0;
    let receipt = "";
    // The rejected item is nacked every time; each poll comes long after its retry delay.
    ledger = step(emptyLedger(8), 0, (d) => {
      const leased = d.claim("beacon", 1, candidates([1])).leased[0]!;
      receipt = leased.receipt;
      return leased;
    }).ledger;
    for (let i = 0; i < 4; i++) {
      ledger = step(ledger, now, (d) => d.nack("beacon", 1, receipt)).ledger;
      now += 60_000;
      const next = step(ledger, now, (d) => d.claim("beacon", 1, candidates([2, 3, 4].filter((s) => s > d.cursor))));
      const leased = next.value.leased[0]!;
      order.push(leased.sequence);
      ledger = next.ledger;
      if (leased.sequence === 1) receipt = leased.receipt;
      else ledger = step(ledger, now, (d) => d.ack("beacon", leased.sequence, leased.receipt)).ledger;
    }
    expect(order.filter((s) => s !== 1).length).toBeGreaterThanOrEqual(2);
  });
});

describe("explicit recovery", () => {
  const request = (over: Partial<RecoveryRequest> = {}): RecoveryRequest => {
    const base = { id: "accept-gap", project: "beacon", revision: 7, cursorThrough: 0, expired: [], missing: [], ...over };
    return { ...base, bodyHash: recoveryBodyHash(base) };
  };
  // Deliveries 2 (leased by beacon) and 3 (leased by atlas), both expired; the stream now keeps 10..20.
  const claimed = step(emptyLedger(4), 0, (d) => ({ b: d.claim("beacon", 1, candidates([2])).leased[0]!, a: d.claim("atlas", 1, candidates([3])).leased[0]! }));
  const now = 100_000;

  test("a gap is accepted only at first_retained - 1; without one, only at the current cursor", () => {
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, now).recover(request({ cursorThrough: 5 }), 10, 20))).toBe("lane_invalid");
    const ok = new LedgerDraft(claimed.ledger, bounds, now).recover(request({ cursorThrough: 9, missing: [2, 3] }), 10, 20);
    expect(ok).toMatchObject({ ct: 9, mt: 9, p: "beacon", rev: 7 });
    expect(ok.x).toEqual([
      { p: "beacon", s: 2, a: 1 },
      { p: "atlas", s: 3, a: 1 },
    ]);
    const noGap = new LedgerDraft({ ...claimed.ledger, cursor: 3 }, bounds, now);
    expect(reasonOf(() => noGap.recover(request({ cursorThrough: 4 }), 1, 20))).toBe("lane_invalid");
  });

  test("expired needs the original receipt; missing needs none; live, retained or acknowledged deliveries cannot be retired", () => {
    const draft = () => new LedgerDraft(claimed.ledger, bounds, now);
    expect(reasonOf(() => draft().recover(request({ cursorThrough: 9, expired: [{ sequence: 2, receipt: "e".repeat(64) }] }), 10, 20))).toBe("lane_stale");
    expect(draft().recover(request({ cursorThrough: 9, expired: [{ sequence: 2, receipt: claimed.value.b.receipt }] }), 10, 20).x).toEqual([{ p: "beacon", s: 2, a: 1 }]);
    expect(reasonOf(() => new LedgerDraft(claimed.ledger, bounds, 1_000).recover(request({ cursorThrough: 9, missing: [2] }), 10, 20))).toBe("lane_invalid");
    expect(reasonOf(() => draft().recover(request({ cursorThrough: 3, missing: [2] }), 1, 20))).toBe("lane_invalid");
    const acked = step(claimed.ledger, 1_000, (d) => d.ack("beacon", 2, claimed.value.b.receipt)).ledger;
    expect(reasonOf(() => new LedgerDraft(acked, bounds, now).recover(request({ cursorThrough: 9, missing: [2] }), 10, 20))).toBe("lane_invalid");
    expect(reasonOf(() => draft().recover(request({ cursorThrough: 9, missing: [2, 2] }), 10, 20))).toBe("lane_invalid");
    expect(reasonOf(() => draft().recover(request({ cursorThrough: 9, missing: Array.from({ length: 17 }, (_, i) => i + 1) }), 10, 20))).toBe("lane_invalid");
  });

  test("retired deliveries free their slots and their receipts can no longer ack", () => {
    const draft = new LedgerDraft(claimed.ledger, bounds, now);
    draft.recover(request({ cursorThrough: 9, missing: [2, 3] }), 10, 20);
    const after = draft.toLedger();
    expect(after.d).toEqual([]);
    expect(after.slots).toBe(claimed.ledger.slots);
    expect(reasonOf(() => new LedgerDraft(after, bounds, now).ack("beacon", 2, claimed.value.b.receipt))).toBe("lane_stale");
  });

  test("at most 64 recovery records within ack_retention: the next is lane_capacity", () => {
    const full: Ledger = {
      ...claimed.ledger,
      rec: Array.from({ length: MAX_RECOVERIES }, (_, i) => ({ id: `r${i}`, p: "beacon", h: "h", at: now - 1, rev: 1, ct: 0, mt: 0, x: [] })),
    };
    expect(reasonOf(() => new LedgerDraft(full, bounds, now).recover(request({ cursorThrough: 9, missing: [2] }), 10, 20))).toBe("lane_capacity");
    // Once ack_retention passed, the records are pruned and recovery works again.
    expect(new LedgerDraft(full, bounds, now + bounds.ackRetentionMs).recover(request({ cursorThrough: 9, missing: [2] }), 10, 20).x).toHaveLength(1);
  });
});

describe("sizes", () => {
  test("a ledger at its widest never serializes beyond the worst case of its slots", () => {
    const wide: Ledger = {
      f: 3,
      cursor: Number.MAX_SAFE_INTEGER,
      rotation: Number.MAX_SAFE_INTEGER,
      turn: "fresh",
      missing: Number.MAX_SAFE_INTEGER,
      slots: 8,
      d: Array.from({ length: 8 }, (_, i) => ({ s: Number.MAX_SAFE_INTEGER - i, p: "p".repeat(64), a: Number.MAX_SAFE_INTEGER, st: "leased" as const, le: 9_999_999_999_999, ra: 9_999_999_999_999, aa: 9_999_999_999_999, r: receiptHash("x") })),
      rec: Array.from({ length: MAX_RECOVERIES }, () => ({
        id: "i".repeat(64),
        p: "p".repeat(64),
        h: "h".repeat(43),
        at: 9_999_999_999_999,
        rev: Number.MAX_SAFE_INTEGER,
        ct: Number.MAX_SAFE_INTEGER,
        mt: Number.MAX_SAFE_INTEGER,
        x: Array.from({ length: 16 }, () => ({ p: "p".repeat(64), s: Number.MAX_SAFE_INTEGER, a: Number.MAX_SAFE_INTEGER })),
      })),
    };
    expect(encodeLedger(wide).byteLength).toBeLessThanOrEqual(worstCaseLedgerBytes(8));
  });

  test("the slot limit keeps the worst case within 512 KiB and within max_ledger", () => {
    expect(slotLimit({ maxLedger: 16 })).toBe(16);
    const limit = slotLimit({ maxLedger: 512 });
    expect(limit).toBeLessThanOrEqual(512);
    expect(worstCaseLedgerBytes(limit)).toBeLessThanOrEqual(MAX_LEDGER_BYTES);
  });
});
