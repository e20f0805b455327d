import { describe, expect, test } from "vitest";
import { BUCKET_SPANS, contentBytes, findCompletion, HistoryDraft, MAX_BUCKETS } from "../../src/lanes/completion-history.js";
import {
  emptyLedger,
  historyBudget,
  inspectedState,
  LedgerDraft,
  MAX_LEDGER_BYTES,
  MAX_RECOVERIES,
  recoveryBody,
  retryDelayMs,
  type ClaimCandidates,
  type Ledger,
  type RecoveryRequest,
} from "../../src/lanes/group-ledger.js";
import { decodeAdmissions, decodeLedger, encodeAdmissions, encodeLedger } from "../../src/lanes/group-state-codec.js";
import { slotLimit, widestLedger, worstCaseLedgerBytes } from "../../src/lanes/ledger-capacity.js";
import { GroupReceipts } from "../../src/lanes/receipts.js";
import { LaneError } from "../../src/lanes/index.js";
import type { LaneBounds } from "../../src/lanes/index.js";

/**
 * The group state machine on its own, with an explicit clock: leases and
 * receipts (HMACs, never stored), renew/ack/nack, completions that leave
 * their slot at once into a bounded completion history, duplicates and
 * stale receipts, the specification's fairness rules, slots, explicit
 * recovery, the stored format and its worst case. (The same rules against
 * real JetStream, with CAS between processes, are in the other lanes tests.)
 */

const bounds: LaneBounds = {
  leaseMs: 30_000,
  maxPending: 4,
  maxLedger: 16,
  retryDelayMs: 1_000,
  maxRetryDelayMs: 8_000,
  ackRetentionMs: 160_000,
  retentionMs: 3_600_000,
  duplicateWindowMs: 60_000,
  maxRecords: 1_000,
  maxBytes: 1_048_576,
  maxPayload: 1_024,
  operationTimeoutMs: 5_000,
  ledgerBytes: 16_777_216,
};
const secret = new Uint8Array(32).fill(7);
const receipts = new GroupReceipts(secret, "jobs", "workers");
const start = emptyLedger(4, secret);

function candidates(fresh: number[], options: Partial<ClaimCandidates> = {}): ClaimCandidates {
  return { fresh, firstRetained: 1, lastSequence: Math.max(0, ...fresh), retained: () => true, ...options };
}

function draftOf(ledger: Ledger, now: number, over: Partial<LaneBounds> = {}): LedgerDraft {
  return new LedgerDraft(ledger, { bounds: { ...bounds, ...over }, now, receipts, gapAdvice: "recover it" });
}

function reasonOf(action: () => unknown): string | undefined {
  try {
    action();
  } catch (error) {
    return error instanceof LaneError ? error.reason : String(error);
  }
  return undefined;
}

/** Applies `change` to a draft at `now` and returns the resulting ledger (through the stored format) and what `change` returned. */
function step<T>(ledger: Ledger, now: number, change: (draft: LedgerDraft) => T, over: Partial<LaneBounds> = {}): { ledger: Ledger; value: T } {
  const draft = draftOf(ledger, now, over);
  const value = change(draft);
  return { ledger: decodeLedger(encodeLedger(draft.toLedger())), value };
}

describe("claims, receipts and leases", () => {
  test("fresh work is leased in sequence order, attempt 1, each with its own 64-hex receipt and a lease; the stored state holds no receipt", () => {
    const { ledger, value } = step(start, 1_000, (d) => d.claim("beacon", 3, candidates([2, 5, 9])));
    expect(value.leased.map((l) => [l.sequence, l.attempt, l.leaseExpiresAt])).toEqual([
      [2, 1, 31_000],
      [5, 1, 31_000],
      [9, 1, 31_000],
    ]);
    for (const leased of value.leased) expect(leased.receipt).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(value.leased.map((l) => l.receipt)).size).toBe(3);
    expect(ledger.cursor).toBe(9);
    const stored = Buffer.from(encodeLedger(ledger));
    for (const leased of value.leased) {
      expect(stored.includes(Buffer.from(leased.receipt, "hex"))).toBe(false);
      expect(stored.includes(Buffer.from(leased.receipt))).toBe(false);
    }
  });

  test("a receipt is the MAC of lane, group, holder, sequence and attempt: any other tuple or secret gives another", () => {
    const base = receipts.receipt("beacon", 3, 1);
    const others = [
      receipts.receipt("atlas", 3, 1),
      receipts.receipt("beacon", 4, 1),
      receipts.receipt("beacon", 3, 2),
      new GroupReceipts(secret, "jobs", "other").receipt("beacon", 3, 1),
      new GroupReceipts(secret, "other", "workers").receipt("beacon", 3, 1),
      new GroupReceipts(new Uint8Array(32).fill(8), "jobs", "workers").receipt("beacon", 3, 1),
      // Length prefixes keep concatenations apart.
      new GroupReceipts(secret, "jobsw", "orkers").receipt("beacon", 3, 1),
    ];
    expect(new Set([base, ...others]).size).toBe(others.length + 1);
    expect(receipts.verify(base, "beacon", 3, 1)).toBe(true);
    expect(receipts.verify(base.toUpperCase(), "beacon", 3, 1)).toBe(false);
    expect(receipts.verify(base.slice(1), "beacon", 3, 1)).toBe(false);
  });

  test("max_pending live leases stop a claim; an expired lease no longer counts", () => {
    const { ledger, value } = step(emptyLedger(8, secret), 0, (d) => d.claim("beacon", 8, candidates([1, 2, 3, 4, 5, 6])));
    expect(value.leased).toHaveLength(4);
    expect(step(ledger, 10_000, (d) => d.claim("beacon", 8, candidates([5, 6]))).value.leased).toHaveLength(0);
    expect(step(ledger, 31_000, (d) => d.claim("beacon", 1, candidates([5, 6]))).value.leased).toHaveLength(1);
  });

  test("fresh work beyond the slots asks for slots; after growth it is leased", () => {
    const full = step(emptyLedger(2, secret), 0, (d) => d.claim("beacon", 3, candidates([1, 2, 3])));
    expect(full.value.leased.map((l) => l.sequence)).toEqual([1, 2]);
    expect(full.value.blocked).toBe("slots");
    expect(draftOf(full.ledger, 0).slotsFor(1)).toBe(3);
    const grown = step(full.ledger, 0, (d) => {
      d.growTo(3);
      return d.claim("beacon", 1, candidates([3]));
    });
    expect(grown.value.leased.map((l) => l.sequence)).toEqual([3]);
    expect(grown.ledger.slots).toBe(3);
  });

  test("a claim meets an expired gap after its cursor with lane_cursor, also when the lane retains nothing (first retained = last + 1)", () => {
    expect(reasonOf(() => draftOf(emptyLedger(1, secret), 0).claim("beacon", 1, candidates([7], { firstRetained: 5, lastSequence: 9 })))).toBe("lane_cursor");
    expect(reasonOf(() => draftOf(emptyLedger(1, secret), 0).claim("beacon", 1, candidates([], { firstRetained: 10, lastSequence: 9 })))).toBe("lane_cursor");
    // Nothing retained and nothing after the cursor: no gap.
    expect(draftOf({ ...emptyLedger(1, secret), cursor: 9 }, 0).claim("beacon", 1, candidates([], { firstRetained: 10, lastSequence: 9 })).leased).toEqual([]);
  });
});

describe("renew, ack and nack", () => {
  const claimed = step(start, 0, (d) => d.claim("beacon", 1, candidates([3])));
  const { receipt, sequence } = claimed.value.leased[0]!;

  test("renew extends a live lease; after it ended, renew is stale", () => {
    expect(step(claimed.ledger, 10_000, (d) => d.renew("beacon", sequence, receipt)).value.leaseExpiresAt).toBe(40_000);
    expect(reasonOf(() => draftOf(claimed.ledger, 30_001).renew("beacon", sequence, receipt))).toBe("lane_stale");
  });

  test("an ack frees the delivery's slot at once; a repeat is a duplicate; another receipt, project or sequence is stale", () => {
    const acked = step(claimed.ledger, 5_000, (d) => d.ack("beacon", sequence, receipt));
    expect(acked.value).toEqual({ ackedAt: 5_000, duplicate: false });
    expect(acked.ledger.deliveries).toEqual([]);
    expect(acked.ledger.slots).toBe(claimed.ledger.slots);
    expect(step(acked.ledger, 9_000, (d) => d.ack("beacon", sequence, receipt)).value).toEqual({ ackedAt: 5_000, duplicate: true });
    for (const ledger of [claimed.ledger, acked.ledger]) {
      expect(reasonOf(() => draftOf(ledger, 6_000).ack("beacon", sequence, "f".repeat(64)))).toBe("lane_stale");
      expect(reasonOf(() => draftOf(ledger, 6_000).ack("atlas", sequence, receipt))).toBe("lane_stale");
      expect(reasonOf(() => draftOf(ledger, 6_000).ack("beacon", sequence + 1, receipt))).toBe("lane_stale");
    }
    // After completion, renew and nack are stale.
    expect(reasonOf(() => draftOf(acked.ledger, 6_000).renew("beacon", sequence, receipt))).toBe("lane_stale");
    expect(reasonOf(() => draftOf(acked.ledger, 6_000).nack("beacon", sequence, receipt))).toBe("lane_stale");
  });

  test("a receipt of another group or lane (another secret or name) is stale, as a live lease and as a completion", () => {
    const foreign = [new GroupReceipts(secret, "jobs", "archivers"), new GroupReceipts(secret, "other", "workers"), new GroupReceipts(new Uint8Array(32), "jobs", "workers")];
    const acked = step(claimed.ledger, 5_000, (d) => d.ack("beacon", sequence, receipt)).ledger;
    for (const other of foreign) {
      const forged = other.receipt("beacon", sequence, 1);
      expect(reasonOf(() => draftOf(claimed.ledger, 6_000).ack("beacon", sequence, forged))).toBe("lane_stale");
      expect(reasonOf(() => draftOf(acked, 6_000).ack("beacon", sequence, forged))).toBe("lane_stale");
    }
  });

  test("a duplicate answers its history bucket's last acknowledgement time: never before the original, at most ack_retention/16 after", () => {
    const two = step(start, 0, (d) => d.claim("beacon", 2, candidates([3, 4])));
    const [a, b] = two.value.leased;
    const first = step(two.ledger, 1_000, (d) => d.ack("beacon", a!.sequence, a!.receipt));
    const second = step(first.ledger, 4_000, (d) => d.ack("beacon", b!.sequence, b!.receipt));
    const repeat = step(second.ledger, 5_000, (d) => d.ack("beacon", a!.sequence, a!.receipt)).value;
    expect(repeat).toEqual({ ackedAt: 4_000, duplicate: true });
    expect(repeat.ackedAt - 1_000).toBeLessThanOrEqual(bounds.ackRetentionMs / BUCKET_SPANS);
  });

  test("the completion stays a duplicate for at least ack_retention; once its bucket is pruned, the ack is stale", () => {
    const acked = step(claimed.ledger, 5_000, (d) => d.ack("beacon", sequence, receipt)).ledger;
    expect(step(acked, 5_000 + bounds.ackRetentionMs - 1, (d) => d.ack("beacon", sequence, receipt)).value.duplicate).toBe(true);
    const later = 5_000 + bounds.ackRetentionMs;
    expect(reasonOf(() => draftOf(acked, later).ack("beacon", sequence, receipt))).toBe("lane_stale");
    expect(step(acked, later, () => undefined).ledger.completions).toEqual([]);
  });

  test("after an expired lease was claimed again, the old receipt can neither ack, nack nor renew; once the new attempt completed, the old receipt is still stale and the new one a duplicate", () => {
    const again = step(claimed.ledger, 31_000, (d) => d.claim("beacon", 1, candidates([])));
    const second = again.value.leased[0]!;
    expect([second.sequence, second.attempt]).toEqual([sequence, 2]);
    for (const action of ["ack", "nack", "renew"] as const) {
      expect(reasonOf(() => draftOf(again.ledger, 31_500)[action]("beacon", sequence, receipt))).toBe("lane_stale");
    }
    const done = step(again.ledger, 31_500, (d) => d.ack("beacon", sequence, second.receipt));
    expect(done.value.duplicate).toBe(false);
    expect(findCompletion(done.ledger.completions, sequence)?.attempt).toBe(2);
    expect(reasonOf(() => draftOf(done.ledger, 32_000).ack("beacon", sequence, receipt))).toBe("lane_stale");
    expect(step(done.ledger, 32_000, (d) => d.ack("beacon", sequence, second.receipt)).value).toEqual({ ackedAt: 31_500, duplicate: true });
  });

  test("nack schedules retry_delay doubled per attempt and capped; a repeated nack keeps its deadline", () => {
    expect([1, 2, 3, 4, 5, 10].map((a) => retryDelayMs(bounds, a))).toEqual([1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
    const nacked = step(claimed.ledger, 2_000, (d) => d.nack("beacon", sequence, receipt));
    expect(nacked.value).toEqual({ retryAt: 3_000, attempt: 1, duplicate: false });
    expect(step(nacked.ledger, 2_900, (d) => d.nack("beacon", sequence, receipt)).value).toEqual({ retryAt: 3_000, attempt: 1, duplicate: true });
    expect(reasonOf(() => draftOf(nacked.ledger, 2_100).ack("beacon", sequence, receipt))).toBe("lane_stale");
    expect(inspectedState(nacked.ledger.deliveries[0]!, 2_999)).toBe("retry_scheduled");
    expect(inspectedState(nacked.ledger.deliveries[0]!, 3_000)).toBe("released");
    expect(step(nacked.ledger, 2_999, (d) => d.claim("beacon", 1, candidates([]))).value.leased).toHaveLength(0);
    expect(step(nacked.ledger, 3_000, (d) => d.claim("beacon", 1, candidates([]))).value.leased.map((l) => l.attempt)).toEqual([2]);
  });

  test("the inspected states: leased while live, released once the lease ended", () => {
    const d = claimed.ledger.deliveries[0]!;
    expect([inspectedState(d, 29_999), inspectedState(d, 30_000)]).toEqual(["leased", "released"]);
  });
});

describe("completions leave their slots", () => {
  test("a group of one slot completes 5,000 items in a row, none refused; its history stays one range per bucket", () => {
    let ledger = emptyLedger(1, secret);
    let now = 0;
    for (let s = 1; s <= 5_000; s++) {
      // Every third record is an event the claim passes.
      if (s % 3 === 0) continue;
      const claimed = step(ledger, now, (d) => d.claim("beacon", 1, candidates([s], { lastSequence: s })));
      expect(claimed.value.leased.map((l) => l.sequence)).toEqual([s]);
      const leased = claimed.value.leased[0]!;
      ledger = step(claimed.ledger, now, (d) => d.ack("beacon", s, leased.receipt)).ledger;
      now += 50;
    }
    expect(ledger.slots).toBe(1);
    expect(ledger.deliveries).toEqual([]);
    // 250 s of completions with ack_retention 160 s: at most 17 buckets, each a single range.
    expect(ledger.completions.length).toBeLessThanOrEqual(MAX_BUCKETS);
    for (const bucket of ledger.completions) expect(bucket.ranges.length).toBe(2);
    expect(ledger.completions.reduce((n, b) => n + contentBytes(b), 0)).toBeLessThan(17 * 6);
    expect(encodeLedger(ledger).byteLength).toBeLessThan(1_024);
  });

  test("completions out of order merge once the holes complete; retried completions are listed with their attempt", () => {
    const claimed = step(emptyLedger(8, secret), 0, (d) => d.claim("beacon", 4, candidates([1, 2, 3, 4])));
    const [w1, w2, w3, w4] = claimed.value.leased;
    let ledger = step(claimed.ledger, 10, (d) => [d.ack("beacon", 4, w4!.receipt), d.ack("beacon", 2, w2!.receipt)]).ledger;
    expect(ledger.completions[0]!.ranges).toEqual([2, 2, 4, 4]);
    // 3 fails once and completes at attempt 2.
    ledger = step(ledger, 20, (d) => d.nack("beacon", 3, w3!.receipt)).ledger;
    const retried = step(ledger, 1_100, (d) => d.claim("beacon", 1, candidates([]))).ledger;
    const again = step(ledger, 1_100, (d) => d.claim("beacon", 1, candidates([]))).value.leased[0]!;
    ledger = step(retried, 1_200, (d) => [d.ack("beacon", 3, again.receipt), d.ack("beacon", 1, w1!.receipt)]).ledger;
    expect(ledger.completions[0]!.ranges).toEqual([1, 4]);
    expect([ledger.completions[0]!.retried, ledger.completions[0]!.attempts, ledger.completions[0]!.completed]).toEqual([[3], [2], 4]);
    expect([1, 2, 3, 4].map((s) => findCompletion(ledger.completions, s)?.attempt)).toEqual([1, 1, 2, 1]);
  });

  test("the history budget: a claim of fresh work is admitted only while every unfinished delivery's completion has room; more slots bring more budget", () => {
    // A history filled with retried completions (each a few bytes) until one more delivery's completion would not fit the budget of 4 slots.
    const history = new HistoryDraft([], bounds.ackRetentionMs);
    let sequence = 1;
    const bytes = () => (history.buckets[0] === undefined ? 0 : contentBytes(history.buckets[0]));
    while (bytes() <= historyBudget(4) - 29) {
      for (let i = 0; i < 64; i++) {
        history.record({ from: sequence, sequence, attempt: 2, now: 0 });
        sequence += 2;
      }
    }
    const full: Ledger = { ...emptyLedger(4, secret), cursor: sequence, freshThrough: sequence, completions: history.buckets };
    const outcome = step(full, 0, (d) => d.claim("beacon", 1, candidates([sequence + 1])));
    expect(outcome.value).toEqual({ leased: [], blocked: "history" });
    const draft = draftOf(full, 0);
    const wanted = draft.slotsFor(1);
    expect(wanted).toBeGreaterThan(4);
    draft.growTo(wanted);
    expect(draft.claim("beacon", 1, candidates([sequence + 1])).leased).toHaveLength(1);
  });
});

describe("fairness", () => {
  test("retries and fresh work alternate by a persisted turn", () => {
    let ledger = step(emptyLedger(8, secret), 0, (d) => d.claim("beacon", 2, candidates([1, 2]))).ledger;
    const order: number[] = [];
    for (let i = 0; i < 4; i++) {
      const next = step(ledger, 40_000 + i, (d) => d.claim("beacon", 1, candidates([3, 4, 5].filter((s) => s > d.cursor))));
      order.push(next.value.leased[0]!.sequence);
      ledger = next.ledger;
    }
    expect(order).toEqual([1, 3, 2, 4]);
  });

  test("an always-ready low-sequence item cannot starve higher-sequence expired work (rotation)", () => {
    let ledger = step(emptyLedger(8, secret), 0, (d) => d.claim("beacon", 3, candidates([2, 7, 9]))).ledger;
    const seen: number[] = [];
    let now = 40_000;
    for (let i = 0; i < 6; i++) {
      const next = step(ledger, now, (d) => d.claim("beacon", 1, candidates([])));
      const leased = next.value.leased[0]!;
      seen.push(leased.sequence);
      ledger = step(next.ledger, now, (d) => d.nack("beacon", leased.sequence, leased.receipt)).ledger;
      now += 100_000;
    }
    expect(seen).toEqual([2, 7, 9, 2, 7, 9]);
  });

  test("when fresh work needs a slot and retries wait, the retry is leased first", () => {
    const full = step(emptyLedger(1, secret), 0, (d) => d.claim("beacon", 1, candidates([1]))).ledger;
    const next = step({ ...full, turn: "fresh" }, 40_000, (d) => d.claim("beacon", 1, candidates([2])));
    expect(next.value.leased.map((l) => l.sequence)).toEqual([1]);
    expect(next.value.blocked).toBe("slots");
  });

  test("polling slower than the retry delay still reaches fresh work", () => {
    let receipt = "";
    let ledger = step(emptyLedger(8, secret), 0, (d) => {
      const leased = d.claim("beacon", 1, candidates([1])).leased[0]!;
      receipt = leased.receipt;
      return leased;
    }).ledger;
    const order: number[] = [];
    let now = 0;
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
  const request = (over: Partial<RecoveryRequest> = {}): RecoveryRequest => ({ id: "accept-gap", project: "beacon", revision: 7, cursorThrough: 0, expired: [], missing: [], ...over });
  const digest = (r: RecoveryRequest) => receipts.recoveryDigest(recoveryBody(r));
  const recover = (draft: LedgerDraft, r: RecoveryRequest, firstRetained: number) => draft.recover(r, digest(r), firstRetained);
  // Deliveries 2 (leased by beacon) and 3 (leased by atlas), both expired; the stream now keeps 10..20.
  const claimed = step(start, 0, (d) => ({ b: d.claim("beacon", 1, candidates([2])).leased[0]!, a: d.claim("atlas", 1, candidates([3])).leased[0]! }));
  const now = 100_000;

  test("a gap is accepted only at first_retained - 1; without one, only at the current cursor", () => {
    const wrong = reasonOf(() => recover(draftOf(claimed.ledger, now), request({ cursorThrough: 5 }), 10));
    expect(wrong).toBe("lane_invalid");
    try {
      recover(draftOf(claimed.ledger, now), request({ cursorThrough: 5 }), 10);
    } catch (error) {
      expect((error as Error).message).toContain("cursor_through must be 9, the expired prefix boundary (first_retained 10 - 1)");
    }
    const ok = recover(draftOf(claimed.ledger, now), request({ cursorThrough: 9, missing: [2, 3] }), 10);
    expect(ok).toMatchObject({ cursorThrough: 9, missingThrough: 9, recoverer: "beacon", revision: 7 });
    expect(ok.expirations).toEqual([
      { project: "beacon", sequence: 2, attempt: 1 },
      { project: "atlas", sequence: 3, attempt: 1 },
    ]);
    expect(reasonOf(() => recover(draftOf({ ...claimed.ledger, cursor: 3 }, now), request({ cursorThrough: 4 }), 1))).toBe("lane_invalid");
    // A lane that retains nothing (first retained = last + 1 = 21): the boundary is its last sequence.
    expect(recover(draftOf(claimed.ledger, now), request({ cursorThrough: 20, missing: [2] }), 21).cursorThrough).toBe(20);
  });

  test("expired needs the caller's own original receipt; missing needs none; live, retained or acknowledged deliveries cannot be retired", () => {
    const draft = () => draftOf(claimed.ledger, now);
    expect(reasonOf(() => recover(draft(), request({ cursorThrough: 9, expired: [{ sequence: 2, receipt: "e".repeat(64) }] }), 10))).toBe("lane_stale");
    // atlas's receipt presented by beacon: the MAC binds the holder.
    expect(reasonOf(() => recover(draft(), request({ cursorThrough: 9, expired: [{ sequence: 3, receipt: claimed.value.a.receipt }] }), 10))).toBe("lane_stale");
    expect(recover(draft(), request({ cursorThrough: 9, expired: [{ sequence: 2, receipt: claimed.value.b.receipt }] }), 10).expirations).toEqual([{ project: "beacon", sequence: 2, attempt: 1 }]);
    expect(reasonOf(() => recover(draftOf(claimed.ledger, 1_000), request({ cursorThrough: 9, missing: [2] }), 10))).toBe("lane_invalid");
    expect(reasonOf(() => recover(draft(), request({ cursorThrough: 3, missing: [2] }), 1))).toBe("lane_invalid");
    const acked = step(claimed.ledger, 1_000, (d) => d.ack("beacon", 2, claimed.value.b.receipt)).ledger;
    expect(reasonOf(() => recover(draftOf(acked, now), request({ cursorThrough: 9, missing: [2] }), 10))).toBe("lane_invalid");
    expect(reasonOf(() => recover(draft(), request({ cursorThrough: 9, missing: [2, 2] }), 10))).toBe("lane_invalid");
    expect(reasonOf(() => recover(draft(), request({ cursorThrough: 9, missing: Array.from({ length: 17 }, (_, i) => i + 1) }), 10))).toBe("lane_invalid");
  });

  test("retired deliveries free their slots and their receipts can no longer ack", () => {
    const draft = draftOf(claimed.ledger, now);
    recover(draft, request({ cursorThrough: 9, missing: [2, 3] }), 10);
    const after = draft.toLedger();
    expect(after.deliveries).toEqual([]);
    expect(after.slots).toBe(claimed.ledger.slots);
    expect(reasonOf(() => draftOf(after, now).ack("beacon", 2, claimed.value.b.receipt))).toBe("lane_stale");
  });

  test("at most 64 recovery records within ack_retention: the next is lane_capacity", () => {
    const full: Ledger = {
      ...claimed.ledger,
      recoveries: Array.from({ length: MAX_RECOVERIES }, (_, i) => ({
        id: `r${i}`,
        recoverer: "beacon",
        bodyDigest: new Uint8Array(32),
        recordedAt: now - 1,
        revision: 1,
        cursorThrough: 0,
        missingThrough: 0,
        expirations: [],
      })),
    };
    expect(reasonOf(() => recover(draftOf(full, now), request({ cursorThrough: 9, missing: [2] }), 10))).toBe("lane_capacity");
    expect(recover(draftOf(full, now + bounds.ackRetentionMs), request({ cursorThrough: 9, missing: [2] }), 10).expirations).toHaveLength(1);
  });
});

describe("the completion history", () => {
  test("a new bucket starts when the newest is ack_retention/16 old; buckets leave once their last ack is ack_retention old; at most 17 live", () => {
    const span = bounds.ackRetentionMs / BUCKET_SPANS;
    const history = new HistoryDraft([], bounds.ackRetentionMs);
    let live = 0;
    for (let i = 0; i < 100; i++) {
      const now = i * (span / 4);
      history.prune(now);
      history.record({ from: i + 1, sequence: i + 1, attempt: 1, now });
      live = Math.max(live, history.buckets.length);
    }
    expect(live).toBeLessThanOrEqual(MAX_BUCKETS);
    for (const b of history.buckets) expect(b.lastAt - b.firstAt).toBeLessThan(span);
  });

  test("a completion whose fresh lease passed events covers them: work in order stays one range", () => {
    const history = new HistoryDraft([], bounds.ackRetentionMs);
    history.record({ from: 1, sequence: 3, attempt: 1, now: 0 });
    history.record({ from: 4, sequence: 4, attempt: 1, now: 0 });
    history.record({ from: 5, sequence: 9, attempt: 3, now: 0 });
    expect(history.buckets[0]!.ranges).toEqual([1, 9]);
    expect(findCompletion(history.buckets, 9)?.attempt).toBe(3);
    expect(findCompletion(history.buckets, 10)).toBeUndefined();
  });
});

describe("the stored format", () => {
  test("a state decodes to exactly what was encoded, through the typed message", () => {
    const claimed = step(emptyLedger(4, secret), 0, (d) => d.claim("beacon", 3, candidates([1, 2, 3])));
    const [a, b] = claimed.value.leased;
    const draft = draftOf(claimed.ledger, 10);
    draft.ack("beacon", 1, a!.receipt);
    draft.nack("beacon", 2, b!.receipt);
    draft.recover({ id: "r", project: "beacon", revision: 1, cursorThrough: 3, expired: [], missing: [] }, new Uint8Array(32).fill(1), 1);
    const ledger = draft.toLedger();
    expect(decodeLedger(encodeLedger(ledger))).toEqual(ledger);
  });

  test("an older JSON ledger is refused with lane_conflict naming its format; a garbled value is lane_unavailable", () => {
    const refusal = (bytes: Uint8Array) => {
      try {
        decodeLedger(bytes);
      } catch (error) {
        return [(error as LaneError).reason, (error as LaneError).message];
      }
      return undefined;
    };
    expect(refusal(Buffer.from(JSON.stringify({ f: 3, cursor: 1, d: [] })))).toEqual([
      "lane_conflict",
      "a group ledger was written in state format 3; this Laneway reads format 4",
    ]);
    expect(refusal(Buffer.from("{not a ledger"))?.[0]).toBe("lane_unavailable");
    expect(refusal(new Uint8Array([0xff, 0xff, 0xff]))?.[0]).toBe("lane_unavailable");
    // The schema check: a valid message that breaks the format's rules.
    const bad = encodeLedger({ ...emptyLedger(1, secret), deliveries: [{ sequence: 5, holder: "beacon", attempt: 1, status: "leased", dueAt: 1, passed: 0 }] });
    expect(refusal(bad)?.[0]).toBe("lane_unavailable");
    expect(refusal(encodeLedger({ ...emptyLedger(1, new Uint8Array(3)) }))?.[0]).toBe("lane_unavailable");
  });

  test("the admissions record round-trips; an older JSON one is refused naming its format", () => {
    expect(decodeAdmissions(encodeAdmissions({ "jobs.workers": 3, "jobs.other": 1 }))).toEqual({ "jobs.workers": 3, "jobs.other": 1 });
    expect(() => decodeAdmissions(Buffer.from(JSON.stringify({ f: 3, g: { "jobs.workers": 1 } })))).toThrow("the group admissions record was written in state format 3; this Laneway reads format 4");
  });
});

describe("sizes", () => {
  test("a state at its widest never encodes beyond the worst case of its slots, history budget filled", () => {
    for (const slots of [1, 8, 512]) {
      const widest = widestLedger(slots);
      // Fill the history with the widest entries the budget allows, in 17 buckets.
      const perBucket = Math.floor(historyBudget(slots) / MAX_BUCKETS / 29);
      const completions = widest.completions.map((b, i) => ({
        ...b,
        ranges: Array.from({ length: perBucket * 2 }, (_, k) => (i * 1e14 + k * 1e12) % Number.MAX_SAFE_INTEGER),
        retried: Array.from({ length: perBucket }, (_, k) => i * 1e14 + k * 2e12 + 1),
        attempts: Array.from({ length: perBucket }, () => 0xffff_ffff),
      }));
      const bytes = encodeLedger({ ...widest, completions }).byteLength;
      expect(bytes).toBeLessThanOrEqual(worstCaseLedgerBytes(slots) - 1_024);
    }
  });

  test("the worst case does not depend on completions, and at the largest max_ledger stays within 512 KiB", () => {
    expect(slotLimit({ maxLedger: 16 })).toBe(16);
    expect(slotLimit({ maxLedger: 512 })).toBe(512);
    expect(worstCaseLedgerBytes(512)).toBeLessThanOrEqual(MAX_LEDGER_BYTES);
    console.log(`[sizes] worst-case group state: ${worstCaseLedgerBytes(1)} bytes at 1 slot, ${worstCaseLedgerBytes(256)} at 256, ${worstCaseLedgerBytes(512)} at 512`);
  });
});
