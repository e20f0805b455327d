/**
 * The fixed limits of lanes, from the specification ("Bounds and failure
 * behavior"), and the table of configurable delivery bounds with their
 * defaults and ranges.
 */
import { HOUR, MILLISECOND, MINUTE, SECOND } from "../config/duration.js";

/** Fixed limits from the lanes specification ("Bounds and failure behavior"). */
export const LANES_LIMITS = Object.freeze({
  /** The configuration file, in bytes (1 MiB). */
  maxFileBytes: 1_048_576,
  /** The serialized registry (`serializeRegistry`), in bytes (512 KiB). */
  maxRegistryBytes: 524_288,
  maxPrincipals: 64,
  maxLanes: 64,
  maxGroupsPerLane: 64,
  /** Per capability list (publishers, subscribers) and per group (members, recoverers). */
  maxMembers: 64,
  /** Identifiers (namespace, project, lane, group), in characters. */
  maxIdentifierLength: 64,
});

/** Lane, project, group and namespace ids: plain identifiers, as in the specification. */
export const IDENTIFIER_PATTERN = /^[a-z][a-z0-9_-]*$/;
export const IDENTIFIER_RULE = "^[a-z][a-z0-9_-]*$";

export type BoundKey =
  | "lease"
  | "max_pending"
  | "max_ledger"
  | "retry_delay"
  | "max_retry_delay"
  | "ack_retention"
  | "retention"
  | "duplicate_window"
  | "max_records"
  | "max_bytes"
  | "max_payload"
  | "operation_timeout"
  | "ledger_bytes";

export interface DurationBound {
  readonly kind: "duration";
  readonly fallback: bigint;
  readonly min: bigint;
  readonly max: bigint;
}
export interface IntegerBound {
  readonly kind: "integer";
  readonly fallback: number;
  readonly min: number;
  readonly max: number;
}

/**
 * The bound table from the brief, in nanoseconds for durations. Dependent
 * defaults (max_pending, max_retry_delay, duplicate_window) are adjusted in
 * `readBounds` so that an omitted field never conflicts with a configured one.
 */
export const LANE_BOUND_RULES: Readonly<Record<BoundKey, DurationBound | IntegerBound>> = Object.freeze({
  lease: { kind: "duration", fallback: 30n * SECOND, min: SECOND, max: HOUR },
  max_pending: { kind: "integer", fallback: 64, min: 1, max: 512 },
  max_ledger: { kind: "integer", fallback: 256, min: 1, max: 512 },
  retry_delay: { kind: "duration", fallback: SECOND, min: MILLISECOND, max: HOUR },
  max_retry_delay: { kind: "duration", fallback: 5n * MINUTE, min: MILLISECOND, max: 24n * HOUR },
  ack_retention: { kind: "duration", fallback: 24n * HOUR, min: SECOND, max: 720n * HOUR },
  retention: { kind: "duration", fallback: 168n * HOUR, min: SECOND, max: 8760n * HOUR },
  duplicate_window: { kind: "duration", fallback: 2n * MINUTE, min: SECOND, max: 24n * HOUR },
  max_records: { kind: "integer", fallback: 1_000_000, min: 1, max: 1_000_000_000 },
  max_bytes: { kind: "integer", fallback: 1_073_741_824, min: 1_048_576, max: 1_099_511_627_776 },
  max_payload: { kind: "integer", fallback: 65_536, min: 1, max: 1_048_576 },
  operation_timeout: { kind: "duration", fallback: 10n * SECOND, min: 10n * MILLISECOND, max: 5n * MINUTE },
  ledger_bytes: { kind: "integer", fallback: 268_435_456, min: 262_144, max: 1_099_511_627_776 },
});
