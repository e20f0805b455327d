import { slotLimit, worstCaseLedgerBytes } from "./group-ledger.js";
import { groupKey } from "./names.js";
import type { LanesConfig } from "./types.js";

/**
 * The bytes the shared group-ledger bucket must always keep free: the
 * largest single ledger write (a group at its slot limit) plus the largest
 * admissions record (every configured group at its limit). JetStream refuses
 * even a same-size overwrite of a KV value when the bucket is full, so this
 * headroom is what lets acknowledgements, nacks, renewals and recoveries
 * never fail for capacity.
 */
export function admissionHeadroom(config: Pick<LanesConfig, "lanes" | "bounds">): number {
  const limit = slotLimit(config.bounds);
  const everyGroup: Record<string, number> = {};
  for (const lane of config.lanes) for (const group of lane.groups.keys()) everyGroup[groupKey(lane.id, group)] = limit;
  const admissionsMax = Buffer.byteLength(JSON.stringify({ f: 3, g: everyGroup })) + 1_024;
  return Math.max(worstCaseLedgerBytes(limit), admissionsMax) + admissionsMax;
}

/** The smallest ledger_bytes that can admit one group of one slot. */
export function minimumLedgerBytes(config: Pick<LanesConfig, "lanes" | "bounds">): number {
  return admissionHeadroom(config) + worstCaseLedgerBytes(1);
}
