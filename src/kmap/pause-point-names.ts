/**
 * The Kmap runtime's fault-injection pause points (see
 * src/fault-injection/pause-points.ts):
 *
 * - `after-applying`: the record is durably Applying, Kweb not yet called;
 * - `after-kweb-commit`: Kweb committed the transaction, the queue has not
 *   recorded it yet;
 * - `between-records`: a record is terminal, the next not yet taken.
 */
export const KMAP_PAUSE_POINTS = ["after-applying", "after-kweb-commit", "between-records"] as const;

export type KmapPausePoint = (typeof KMAP_PAUSE_POINTS)[number];
