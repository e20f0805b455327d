/**
 * The scoped bus: the library hive members and the hub use to reach a
 * swarm's queues, events, dead letters and state on NATS JetStream (the
 * specification's `scripts.events.nats`).
 *
 * - config.ts: {@link BusConfig} from options or the `hive.env` variables.
 * - subject-map.ts: the subject and queue tables, and the refusals that keep
 *   a scoped bus inside its swarm.
 * - scoped-bus.ts: {@link openBus}, the root {@link Bus} and its
 *   {@link SwarmBus} views.
 * - queue.ts, events.ts, dead-letters.ts, state.ts: the operations.
 * - streams.ts: which stream serves a resource (legacy names while present)
 *   and provisioning.
 * - migration.ts, migration-mark.ts: moving legacy data, crash-safely, with
 *   a pending mark members can read.
 * - fan-in.ts: the hub's durable readers over the legacy and per-swarm
 *   events streams.
 */
export {
  busConfigFromEnv,
  busModeFromEnv,
  checkBusConfig,
  DEFAULT_QUEUE_POLICY,
  isProvisioning,
  type BusConfig,
  type QueuePolicy,
} from "./config.js";
export {
  BUS_OWN_TEXTS,
  BUS_TEXTS,
  BusConfigError,
  BusPermissionError,
  BusRefusedError,
  BusResourceMissingError,
  LegacyStateOwnershipError,
  MigrationIncompleteError,
  ownStateCommand,
  MigrationRefusedError,
  StateRevisionConflictError,
} from "./errors.js";
export {
  checkEventSwarm,
  decodeEvent,
  encodeEvent,
  logicalSubject,
  LOGICAL_RULES,
  matchPattern,
  QUEUE_PATTERN,
  routeQueue,
  routeSubject,
  SUBJECT_RULES,
  type BusEvent,
  type BusMode,
  type QueueRoute,
  type SubjectRoute,
  type SubjectRule,
} from "./subject-map.js";
export { Bus, inboxPrefixOfCredential, openBus, SwarmBus, type OpenBusOptions, type ProvisionedSwarm } from "./scoped-bus.js";
export { WorkItem, WorkQueue, type OfferAck, type OfferOptions, type TakeOptions, type WorkStream } from "./queue.js";
export { type BusMessage, type Published, type ReadOptions, type ReadPage } from "./events.js";
export { type DeadLetterOptions } from "./dead-letters.js";
export { isStateKey, StateBucket, type PutOptions, type StateEntry } from "./state.js";
export { MAX_MIGRATION_KEYS, MIGRATION_PAUSE_POINTS, type MigrationOptions, type MigrationProgress, type MigrationResult } from "./migration.js";
export { adoptLegacyMark, readMark, type MigrationMark } from "./migration-mark.js";
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
export { missingStreamText, swarmStreamConfig } from "./streams.js";
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
