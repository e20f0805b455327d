/**
 * The Kmap runtime's fault-injection pause points (see
 * src/fault-injection/pause-points.ts). The id printed is the idempotency id
 * of the command named below.
 *
 * - `after-applying`: the record is Applying, Kweb not yet called — whether
 *   it was taken alone or in the shared transaction of
 *   `after-commit-and-applying`. Only the first command of a group is ever
 *   Applying before its outcome is recorded;
 * - `group-kweb-commit`: the command's own Kweb transaction is committed,
 *   without its fsync yet (a group's one fsync follows its last command);
 *   the group's first command is Applying, the later ones (this one, when
 *   it is not the first) are still Queued in the lane. Reached once per
 *   command, in submission order, also by a group of one;
 * - `after-kweb-commit`: the Kweb transactions of the record — and of the
 *   rest of its group — are committed and fsync'd, the lane has not
 *   recorded them yet; the id is the group's first command (the one that
 *   is Applying);
 * - `between-records`: the record is terminal (Committed or Failed); after a
 *   Failed outcome, or a Committed one with no successor due, the next
 *   record is not taken yet; reached once per record;
 * - `after-commit-and-applying`: one transaction recorded the previous
 *   record — or the whole previous group — Committed and marked this one
 *   Applying (the lane's "N committed, N+1 applying" boundary); Kweb not
 *   yet called for this one;
 * - `after-queued`: a group of submissions is durable and none of them has
 *   been answered yet (the id is the group's first).
 */
export const KMAP_PAUSE_POINTS = [
  "after-applying",
  "group-kweb-commit",
  "after-kweb-commit",
  "between-records",
  "after-commit-and-applying",
  "after-queued",
] as const;

export type KmapPausePoint = (typeof KMAP_PAUSE_POINTS)[number];
