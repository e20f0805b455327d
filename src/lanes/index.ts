/**
 * Durable lanes on NATS JetStream: the public surface of the lanes core.
 *
 * Publication with reservations, batch publication, replay and follow;
 * work groups with fenced leases, batch claims and acknowledgements,
 * explicit recovery.
 */
export { laneCapabilities, projectCapabilities, type LaneCapabilities } from "./capabilities.js";
export { loadLanesConfig, parseLanesConfig, type LanesConfigOptions } from "./config.js";
export { LaneError, LanesConfigError, type LaneReason } from "./errors.js";
export { EXAMPLE_LANES_CONFIG, exampleLanesConfig } from "./example-config.js";
export { FOLLOW_HEARTBEAT_MS, MAX_FOLLOWERS_PER_PROJECT, openLanesCore, type FollowPage, type LanesCore, type LanesCoreOptions } from "./lanes-core.js";
export { IDENTIFIER_PATTERN, LANE_BOUND_RULES, LANES_LIMITS } from "./limits.js";
export { PUBLISH_PAUSE_POINTS, type BatchOutcome, type PublishOutcome } from "./publisher.js";
export { LaneRegistry, type LaneAccessView, type RegistryView } from "./registry.js";
export { REGISTRY_FORMAT_VERSION, registryDocument, serializeRegistry } from "./registry-document.js";
export { MAX_EVENTS, MAX_EXAMINED, type ReplayPage } from "./replay.js";
export { MAX_RECOVERIES, MAX_RETIREMENTS, retryDelayMs, type InspectedState } from "./group-ledger.js";
export type {
  ClaimParams,
  GroupInspection,
  GroupTarget,
  Receipt,
  ReceiptOutcome,
  ReceiptParams,
  RecoverParams,
  RecoveryResult,
  WorkDelivery,
} from "./work-groups.js";
export type { LaneBounds, LaneDefinition, LanePrincipal, LaneRecord, LanesBroker, LanesConfig, Publication, RecordKind } from "./types.js";
export { lanesBrokerPermissions } from "./broker-permissions.js";
export { metaBucket, recordSubject, reservationBucket, streamName } from "./names.js";
