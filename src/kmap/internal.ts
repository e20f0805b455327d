/**
 * What the server's fault injection, the tests and the benchmarks may use
 * beyond the Kmap core's public surface (index.ts): the pause point names,
 * the queue and store without the embedded Kweb around them, and the lane
 * hosted in the Kweb worker (which tests check they run on).
 */
export { KMAP_PAUSE_POINTS, type KmapPausePoint } from "./pause-point-names.js";
export { openCommandQueue, type OpenedCommandQueue, type OpenCommandQueueOptions } from "./open-command-queue.js";
export { CommandStore, CommandStoreError, type Durability, type LaneCounters } from "./command-store.js";
export { CommandReader } from "./command-reader.js";
export { ChangeFeed, commandOutcomes, type CommandOutcomes } from "./change-feed.js";
export type { LaneStatus } from "./command-queue.js";
export { DurableChanges } from "./durable-changes.js";
export { WorkerLane } from "./worker-lane.js";
export { type ApplyFaults } from "./worker-seams.js";
export { WriterUnavailableError } from "./kweb-manager.js";
