/**
 * The swarm bus: what a hive member holds and uses, apart from the hub (the
 * specification's `scripts.events.nats` and the member's side of join and
 * refresh). The hub (src/swarm/) uses this module too (a root bus opened
 * with provisioning creates streams and runs migrations), and reaches what
 * only it needs (migration progress and marks, event fan-in, the slot
 * responder's side of the protocol) through internal.ts.
 *
 * - The scoped bus (scoped-bus.ts): {@link openBus} with a `BusConfig`
 *   (config.ts, from options or the `hive.env` variables), the root
 *   {@link Bus} and its {@link SwarmBus} views; the subject and queue
 *   tables and the refusals that keep a scoped bus inside its swarm
 *   (subject-map.ts); the operations (queue.ts, events.ts, dead-letters.ts,
 *   state.ts) and the pending mark of an import (migration-mark.ts).
 * - The member's files (member-files.ts, member-env.ts): the invite, the
 *   downgrade refusal, hive.creds and hive.env.
 * - Account slots (slot-client.ts over slot-protocol.ts): a member takes,
 *   renews and returns slots on `slots.<swarm>.<hive>`.
 * - Names (stream-names.ts, swarm-names.ts): the per-swarm stream, subject
 *   and consumer names, wire contracts spelled as the specification spells
 *   them, and what a swarm name and a member id are.
 * - Errors (errors.ts): {@link SwarmError}, the one class of every swarm
 *   failure, and the bus's refusals with the specification's texts.
 */
export {
  BUS_TEXTS,
  BusConfigError,
  BusPermissionError,
  BusRefusedError,
  BusResourceMissingError,
  MigrationIncompleteError,
  MigrationRefusedError,
  SlotError,
  StateRevisionConflictError,
  SwarmError,
  type SwarmReason,
} from "./errors.js";
export { busConfigFromEnv, checkBusConfig, type QueuePolicy } from "./config.js";
export { checkEventSwarm, logicalSubject, routeQueue, routeSubject, type BusEvent, type BusMode } from "./subject-map.js";
export { Bus, openBus, SwarmBus } from "./scoped-bus.js";
export { WorkItem, WorkQueue } from "./queue.js";
export { HIVE_ENV } from "./member-env.js";
export { acceptCredential, readHiveEnv, readInvite, saveHiveFiles, writeInviteFile, type MemberInvite } from "./member-files.js";
export { requestSlotRaw, SlotClient } from "./slot-client.js";
export { encodeSlotRequest, type AccountSlot } from "./slot-protocol.js";
export {
  consumerName,
  deadLetterSubject,
  deadStream,
  eventsStream,
  GLOBAL_STREAMS,
  queueStream,
  queueWorkSubject,
  stateKeySubject,
  stateStream,
  STATE_REVISIONS_PER_KEY,
  SWARM_STATE_BUCKETS,
  swarmHex,
  swarmOfStream,
  swarmStreams,
  type SwarmLane,
} from "./stream-names.js";
export { swarmNameProblem } from "./swarm-names.js";
