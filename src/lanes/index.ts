/**
 * Durable lanes on NATS JetStream: the public surface of the lanes core.
 *
 * This version provides the configuration and the registry; publishing,
 * replay, work groups and recovery answer `unimplemented` in the server.
 */
export { laneCapabilities, projectCapabilities, type LaneCapabilities } from "./capabilities.js";
export { loadLanesConfig, parseLanesConfig, type LanesConfigOptions } from "./config.js";
export { LaneError, LanesConfigError, type LaneReason } from "./errors.js";
export { EXAMPLE_LANES_CONFIG, exampleLanesConfig } from "./example-config.js";
export { IDENTIFIER_PATTERN, LANE_BOUND_RULES, LANES_LIMITS } from "./limits.js";
export { LaneRegistry, type LaneAccessView, type RegistryView } from "./registry.js";
export { REGISTRY_FORMAT_VERSION, registryDocument, serializeRegistry } from "./registry-document.js";
export type { LaneBounds, LaneDefinition, LanePrincipal, LanesBroker, LanesConfig } from "./types.js";
