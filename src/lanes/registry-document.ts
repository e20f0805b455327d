/**
 * The canonical serialized registry.
 *
 * The lanes core stores this text as the namespace generation and refuses
 * to start against a namespace whose stored registry differs, so it must
 * depend only on what the configuration *means*:
 * - principals, lanes, capability lists and groups are sorted, so
 *   reordering the file does not look like a new generation;
 * - object keys are sorted and the JSON is compact;
 * - tokens and token variable names are left out (a registry is returned
 *   to peers and must hold no credential; renaming a variable does not
 *   change who may do what);
 * - the broker location is left out (moving to another URL with the same
 *   streams is not a registry change, and URLs may carry secrets);
 * - durations are written as Go duration strings of the effective
 *   millisecond values, integers as JSON numbers.
 *
 * `version` identifies this serialization, so a future format change is
 * detectable instead of silently looking like a new generation.
 */
import { formatGoDuration, millisToNanos } from "../config/duration.js";
import type { LanesConfig } from "./types.js";
import { canonicalJson, type Json } from "../encoding/canonical-json.js";

export const REGISTRY_FORMAT_VERSION = 1;


const sorted = (values: Iterable<string>): string[] => [...values].sort();

function sortedMap(map: ReadonlyMap<string, readonly string[]>): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const key of sorted(map.keys())) out[key] = sorted(map.get(key) ?? []);
  return out;
}

/** The registry as a canonical JSON value (before stringification). */
export function registryDocument(config: Pick<LanesConfig, "namespace" | "principals" | "lanes" | "bounds">): Json {
  const b = config.bounds;
  const d = (ms: number): string => formatGoDuration(millisToNanos(ms));
  return {
    version: REGISTRY_FORMAT_VERSION,
    namespace: config.namespace,
    principals: sorted(config.principals.map((p) => p.project)).map((project) => ({ project })),
    lanes: [...config.lanes]
      .sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0))
      .map((lane) => ({
        id: lane.id,
        owner: lane.owner,
        publishers: sorted(lane.publishers),
        subscribers: sorted(lane.subscribers),
        groups: sortedMap(lane.groups),
        recoverers: sortedMap(lane.recoverers),
      })),
    bounds: {
      lease: d(b.leaseMs),
      max_pending: b.maxPending,
      max_ledger: b.maxLedger,
      retry_delay: d(b.retryDelayMs),
      max_retry_delay: d(b.maxRetryDelayMs),
      ack_retention: d(b.ackRetentionMs),
      retention: d(b.retentionMs),
      duplicate_window: d(b.duplicateWindowMs),
      max_records: b.maxRecords,
      max_bytes: b.maxBytes,
      max_payload: b.maxPayload,
      operation_timeout: d(b.operationTimeoutMs),
      ledger_bytes: b.ledgerBytes,
    },
  };
}

/**
 * The canonical registry text: namespace, principals (project ids only),
 * lanes and bounds. At most `LANES_LIMITS.maxRegistryBytes` for any
 * configuration `parseLanesConfig` accepts.
 */
export function serializeRegistry(config: Pick<LanesConfig, "namespace" | "principals" | "lanes" | "bounds">): string {
  return canonicalJson(registryDocument(config));
}
