/**
 * The validated lanes configuration: principals, lanes with their explicit
 * capability lists, delivery bounds and the optional separate broker.
 */
import type { Secret } from "../config/secret.js";

/** A project that can authenticate to lanes. Its token is in `LanesConfig.tokens`. */
export interface LanePrincipal {
  readonly project: string;
  /** Name of the environment variable the token was read from (not the token). */
  readonly tokenEnv: string;
}

/**
 * One lane and its explicit capability lists. Ownership alone grants
 * nothing: publishing, event subscription, work consumption (group
 * membership) and recovery are each granted only by their own list.
 *
 * `groups` and `recoverers` are Maps (group id → projects) so lookups need
 * no prototype-safety care; they keep the file's order and are frozen.
 */
export interface LaneDefinition {
  readonly id: string;
  readonly owner: string;
  readonly publishers: readonly string[];
  readonly subscribers: readonly string[];
  /** Work group id → member projects (who may claim, ack, nack and renew). */
  readonly groups: ReadonlyMap<string, readonly string[]>;
  /** Work group id → projects that may recover the group; each is also a member of it. */
  readonly recoverers: ReadonlyMap<string, readonly string[]>;
}

/**
 * Delivery and retention bounds. Durations are whole milliseconds: the
 * parsed nanoseconds are truncated toward zero (every bound's limits are
 * whole milliseconds, so truncation never moves a value out of range), and
 * `ms * 1e6` is exact in a double, for JetStream's nanosecond fields.
 */
export interface LaneBounds {
  /** Work lease length. */
  readonly leaseMs: number;
  /** Live leases per group. */
  readonly maxPending: number;
  /** Deliveries a group ledger tracks. */
  readonly maxLedger: number;
  /** First NACK retry delay; doubled per attempt. */
  readonly retryDelayMs: number;
  /** Cap of the doubled retry delay. */
  readonly maxRetryDelayMs: number;
  /** How long acknowledgements stay idempotent (and recovery history is kept). */
  readonly ackRetentionMs: number;
  /** Stream max_age; also bounds publish reservations. */
  readonly retentionMs: number;
  /** JetStream duplicate window. */
  readonly duplicateWindowMs: number;
  /** Per-lane stream max_msgs. */
  readonly maxRecords: number;
  /** Per-lane stream max_bytes. */
  readonly maxBytes: number;
  /** Largest publish payload, in bytes. */
  readonly maxPayload: number;
  /** Deadline of every broker operation. */
  readonly operationTimeoutMs: number;
  /** Bytes of the namespace's shared group-ledger bucket (admission keeps headroom for completions). */
  readonly ledgerBytes: number;
}

/** A separate broker for lanes (`url` in the file). */
export interface LanesBroker {
  /** Server URLs, validated: nats:// or tls://, no user info. */
  readonly servers: readonly string[];
  /** The variable that named the credentials file, if any. */
  readonly credentialsEnv: string | undefined;
  /** Absolute path of the NATS credentials file, if any; checked to exist and be readable. */
  readonly credentialsFile: string | undefined;
}

export interface LanesConfig {
  readonly namespace: string;
  /** A separate broker for lanes; `undefined` means lanes use Laneway's own NATS connection. */
  readonly broker: LanesBroker | undefined;
  readonly principals: readonly LanePrincipal[];
  readonly lanes: readonly LaneDefinition[];
  readonly bounds: LaneBounds;
  /** Project id → its bearer token. Never serialized into the registry. */
  readonly tokens: ReadonlyMap<string, Secret>;
}

/** Whether a record is an event for subscribers or work for groups. */
export type RecordKind = "event" | "work";

/** What a publisher sends: the fields of one record, without the lane. */
export interface Publication {
  /** The idempotency key within (lane, project). */
  readonly id: string;
  readonly kind: RecordKind;
  readonly schema: string;
  readonly payload: Uint8Array;
  /** Optional untrusted absolute URI; "" when not given. */
  readonly provenance: string;
}

/** One accepted record: the durable envelope and its stream sequence. */
export interface LaneRecord extends Publication {
  /** The stream sequence within the lane, from 1. */
  readonly sequence: number;
  readonly lane: string;
  /** The authenticated publisher. */
  readonly project: string;
  /** When the service accepted the publication, in epoch milliseconds. */
  readonly createdAt: number;
}
