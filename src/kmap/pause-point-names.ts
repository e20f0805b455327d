/**
 * The Kmap runtime's fault-injection pause points (see
 * src/fault-injection/pause-points.ts). The id printed is the idempotency id
 * of the command named below.
 *
 * - `after-applying`: the record is Applying, Kweb not yet called — whether
 *   it was taken alone or in the shared transaction of the point below;
 * - `after-kweb-commit`: Kweb committed the record's transaction, the lane
 *   has not recorded it yet;
 * - `between-records`: the record is terminal (Committed or Failed); after a
 *   Failed outcome, or a Committed one with no successor due, the next
 *   record is not taken yet;
 * - `after-commit-and-applying`: one transaction recorded the previous
 *   record Committed and marked this one Applying (the lane's "N committed,
 *   N+1 applying" boundary); Kweb not yet called for this one;
 * - `after-queued`: a group of submissions is durable and none of them has
 *   been answered yet (the id is the group's first).
 */
export const KMAP_PAUSE_POINTS = ["after-applying", "after-kweb-commit", "between-records", "after-commit-and-applying", "after-queued"] as const;

export type KmapPausePoint = (typeof KMAP_PAUSE_POINTS)[number];
