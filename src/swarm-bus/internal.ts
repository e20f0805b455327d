/**
 * What the hub (src/swarm/) needs of the swarm bus beyond a member's
 * surface (index.ts): the migration's pause points, progress and refusals
 * (migration.ts, errors.ts) and the subjects of its marks (names.ts), the
 * durable fan-in of events (fan-in.ts), the lines it writes into invites
 * and hive.env (member-env.ts), and the responder's side of the slot
 * protocol with the hub's slot buckets and slot ids (slot-protocol.ts,
 * stream-names.ts), the names of the legacy streams a migration reads and
 * a grant lists (stream-names.ts), the bus mode of the hub's environment
 * (config.ts), a mark as the hub reads it (migration-mark.ts), and the
 * checks of a swarm name and a member id (swarm-names.ts).
 * The hub provisions streams and runs migrations through the root bus that
 * `openBus` opens with provisioning. Tests and benchmarks use this entry
 * too; a member never needs it.
 */
export { LegacyStateOwnershipError, ownStateCommand } from "./errors.js";
export {
  MIGRATION_PAUSE_POINTS,
  type MigrateDeadParams,
  type MigrateQueueParams,
  type MigrateStateParams,
  type MigrationParams,
  type MigrationProgress,
  type MigrationResult,
} from "./migration.js";
export { BUS_HEADERS, deadMarkSubject, legacyQueueStreamName, queueMarkSubject, stateMarkSubject } from "./names.js";
export { EventFanIn, type FanInSource, type FannedInEvent } from "./fan-in.js";
export { hiveEnvLines, inviteEnvLines } from "./member-env.js";
export {
  encodeSlotAnswer,
  formatSlotId,
  isSlotAccountName,
  loggableHive,
  namedInRequest,
  parseSlotRequest,
  parseSlotSubject,
  type SlotAnswer,
  type SlotId,
  type SlotOperation,
  type SlotRequest,
} from "./slot-protocol.js";
export {
  HUB_SLOT_BUCKETS,
  HUB_SLOTS_QUEUE_GROUP,
  LEGACY_EVENT_SUBJECTS,
  legacyKvStream,
  legacyMarkSubjectPatterns,
  slotRequestSubject,
  SWARM_LANES,
  swarmSubjectPrefix,
} from "./stream-names.js";
export { busModeFromEnv } from "./config.js";
export { readMark } from "./migration-mark.js";
export { isMemberId, isSwarmName } from "./swarm-names.js";
