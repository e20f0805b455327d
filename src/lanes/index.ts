/**
 * Durable lanes on NATS JetStream: the public surface of the lanes core.
 *
 * Publication with reservations, batch publication, replay and follow;
 * work groups with fenced leases, batch claims and acknowledgements,
 * explicit recovery.
 */
export { laneCapabilities, projectCapabilities } from "./capabilities.js";
export { loadLanesConfig, parseLanesConfig } from "./config.js";
export { LaneError, LanesConfigError, type LaneReason } from "./errors.js";
export { EXAMPLE_LANES_CONFIG, exampleLanesConfig } from "./example-config.js";
export { MAX_FOLLOWERS_PER_PROJECT, openLanesCore, type LanesCore } from "./lanes-core.js";
export { IDENTIFIER_PATTERN } from "./limits.js";
export { PUBLISH_PAUSE_POINTS, type PublishOutcome } from "./publisher.js";
export { LaneRegistry, type RegistryView } from "./registry.js";
export { serializeRegistry } from "./registry-document.js";
export { MAX_EVENTS, MAX_EXAMINED } from "./replay.js";
export { StoredLaneRecord } from "./envelope.js";
export { retryDelayMs, type InspectedState } from "./group-ledger.js";
export type { Acked, GroupObservation, Receipt, ReceiptOutcome, RecoveryResult, WorkDelivery } from "./work-groups.js";
export type { LaneBounds, LaneRecord, LanesConfig, RecordKind } from "./types.js";
export { lanesBrokerPermissions } from "./broker-permissions.js";
export { metaBucket, reservationBucket, streamName } from "./names.js";
