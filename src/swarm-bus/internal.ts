/**
 * What the hub (src/swarm/) needs of the swarm bus beyond a member's
 * surface (index.ts): provisioning the per-swarm streams (streams.ts), the
 * crash-safe migration of legacy data and its marks (migration.ts,
 * migration-mark.ts, names.ts), the durable fan-in of events (fan-in.ts),
 * the lines it writes into invites and hive.env (member-env.ts), and the
 * responder's side of the slot protocol (slot-protocol.ts). Tests and
 * fault injection use it too; a member never needs it.
 */
export { isProvisioning } from "./config.js";
export { LegacyStateOwnershipError, ownStateCommand } from "./errors.js";
export type { ProvisionedSwarm } from "./scoped-bus.js";
export { missingStreamText, swarmStreamConfig } from "./streams.js";
export { MAX_MIGRATION_KEYS, MIGRATION_PAUSE_POINTS, type MigrationOptions, type MigrationProgress, type MigrationResult } from "./migration.js";
export { adoptLegacyMark } from "./migration-mark.js";
export {
  BUS_HEADERS,
  deadMarkSubject,
  isMarkSubject,
  kvKeySubject,
  LEGACY_DEAD_SUBJECTS,
  legacyDeadSubject,
  legacyMarkSubjectOf,
  legacyQueueConsumerName,
  legacyQueueStreamName,
  MARK_TOKEN,
  queueMarkSubject,
  stateMarkSubject,
} from "./names.js";
export {
  BusConfiguredConsumerError,
  EventFanIn,
  isSwarmEventsStream,
  LEGACY_ORIGINAL_EVENT_SUBJECT,
  LEGACY_PREFIXED_EVENT_SUBJECT,
  type FanInOptions,
  type FanInSource,
  type FannedInEvent,
} from "./fan-in.js";
export { hiveEnvLines, inviteEnvLines } from "./member-env.js";
export { encodeSlotAnswer, isSlotAccountName, loggableHive, namedInRequest, parseSlotRequest, parseSlotSubject, type SlotRequest } from "./slot-protocol.js";
export { HUB_SLOT_BUCKETS, HUB_SLOTS_QUEUE_GROUP } from "./stream-names.js";
