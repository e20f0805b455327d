/**
 * Durable lanes on NATS JetStream: the public surface of the lanes core.
 * This version provides the registry; publishing, replay, work groups and
 * recovery are answered as not yet available by the server.
 */
export { LaneError, type LaneErrorCode } from "./errors.js";
export { LaneRegistry, type LaneAccessView, type RegistryView } from "./registry.js";
