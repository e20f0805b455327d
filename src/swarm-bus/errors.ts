/**
 * The swarm domain's error class, and the scoped bus's failures.
 *
 * {@link SwarmError} is the one class of every swarm failure, the member's
 * and the hub's alike (the hub's own texts are beside the rules that raise them).
 *
 * Every refusal the specification quotes is reproduced exactly in
 * {@link BUS_TEXTS}: operators and members search for them. Each one is
 * raised before anything reaches the server. Broker failures become a
 * {@link SwarmError} with a fixed message (what the bus was doing) and the
 * classified broker error as `cause`: never a subject of another tenant, a
 * broker address, a credential or a raw backend text.
 *
 * | class | reason | when |
 * | --- | --- | --- |
 * | {@link BusRefusedError} | `swarm_invalid` | a subject, queue, event or swarm outside the bus's scope; a bad key |
 * | {@link BusPermissionError} | `swarm_forbidden` | state through the root bus; migration without provisioning; the server denied a call |
 * | {@link MigrationIncompleteError} | `swarm_migration_incomplete` | binding a queue or state stream whose import is pending |
 * | {@link MigrationRefusedError} | `swarm_conflict` | a migration the table refuses; a scoped state stream over non-empty legacy state |
 * | {@link StateRevisionConflictError} | `swarm_conflict` | a state write whose expected revision is not the key's |
 * | {@link BusResourceMissingError} | `swarm_not_found` | bind mode and the hub has not provisioned the stream or consumer |
 * | {@link BusConfigError} | `swarm_invalid` | the bus settings (options or `AGENTIHOOKS_BUS*` variables) |
 * | {@link BusConfiguredConsumerError} | `swarm_conflict` | a hub durable in a shape the fan-in cannot use, or missing in bind mode |
 * | {@link SlotError} | `slot_*` ({@link SlotReason}) | an account-slot request, on either side of the slot protocol |
 */
import { CoreError } from "../errors/core-error.js";
import { classifyNatsError, JetStreamErrorCode } from "../nats/index.js";

/**
 * The swarm core's reasons. Messages reproduce the specification's exact
 * texts (for example `the hub record lists no member swarms for hive member
 * <id>`), because operators search for them.
 *
 * - `swarm_invalid`: a request or a signer record that breaks a rule.
 * - `swarm_forbidden`: the hub refuses to mint (field present, member absent).
 * - `swarm_conflict`: state forbids it (the member exists, a `file:` signer
 *   record that is never written).
 * - `swarm_not_found`: no such member.
 * - `swarm_unavailable`: the signer record, the broker or Redis cannot be reached.
 * - `swarm_migration_incomplete`: a scoped resource whose import is pending.
 * - `swarm_unscoped`: a member refuses an unscoped credential for a scoped invite.
 */
export type SwarmReason =
  | "swarm_invalid"
  | "swarm_forbidden"
  | "swarm_conflict"
  | "swarm_not_found"
  | "swarm_unavailable"
  | "swarm_migration_incomplete"
  | "swarm_unscoped";

/** A failure of swarm membership (see CoreError for what its message and cause may hold). */
export class SwarmError extends CoreError<SwarmReason> {
  override readonly name = "SwarmError";
  readonly domain = "swarm" as const;
}

/** The specification's texts, reproduced exactly (names and subjects are quoted as given). */
export const BUS_TEXTS = Object.freeze({
  subjectNotOfSwarm: (subject: string, swarm: string) => `subject '${shown(subject)}' does not belong to swarm '${shown(swarm)}'`,
  eventSwarmMismatch: (eventSwarm: string, swarm: string) => `event swarm '${shown(eventSwarm)}' does not match bus swarm '${shown(swarm)}'`,
  selectSwarmForQueue: "select a swarm before opening a scoped queue",
  queueNotOfSwarm: (name: string, swarm: string) => `queue '${shown(name)}' does not belong to swarm '${shown(swarm)}'`,
  cannotChangeSwarm: "a scoped bus cannot change its swarm",
  selectSwarmForState: "select a swarm before opening scoped state",
  queueMigrationIncomplete: "scoped queue migration is incomplete",
  stateMigrationIncomplete: "scoped state migration is incomplete",
  legacyStateOwnership: "legacy state requires explicit key ownership",
  stateOwnershipChanged: "state migration ownership or source revisions changed",
  legacyStateChanged: "legacy state changed during migration",
  legacyQueueChanged: "legacy queue changed or contains work for another swarm",
  legacyQueueUndelivered: "legacy queue still has undelivered work",
  migrationNeedsProvisioning: "migration requires privileged provisioning",
  migrationNotEnabled: "scoped migration is not enabled",
  /** The member's side of join and refresh: a scoped invite answered with an unscoped credential. */
  unscopedOffered: "the hive offered an unscoped bus credential; ask its hub to list this member's swarms",
});

/**
 * Laneway's own texts, for cases the specification names without quoting
 * a message.
 */
export const BUS_OWN_TEXTS = Object.freeze({
  /** The table's "a retained copy that differs from its source" (migrate_dead). */
  deadCopyDiffers: (sourceSeq: number) => `a retained dead letter copy differs from its source (legacy sequence ${sourceSeq})`,
  /** The table's "a target that already has live writes" (migrate_state). */
  stateTargetHasLiveWrites: "the scoped state stream already has live writes",
  migrationRunning: "another migration of this resource changed its pending mark; run the migration again",
  subjectNamesNoSwarm: (subject: string) => `subject '${shown(subject)}' does not name a swarm`,
  selectSwarmForEvents: "select a swarm before reading scoped events",
  deadLetterNeedsSwarm: "a dead letter needs a swarm: give the event a swarm field or use forSwarm(<swarm>)",
  invalidSwarm: (problem: string) => `invalid swarm name (${problem})`,
  invalidKey: (key: string) => `state key '${shown(key)}' is not a valid key (letters, digits, '-', '_', '=', '/', inner '.')`,
  invalidBucket: (bucket: string) => `state bucket '${shown(bucket)}' is not a valid bucket name`,
  invalidQueueName: (name: string) => `queue '${shown(name)}' is not a valid queue name`,
  invalidSubject: (subject: string) => `subject '${shown(subject)}' is not a valid subject for this call`,
  tooManyKeys: (max: number) => `a state migration names at most ${max} keys`,
  legacyKeyMissing: (key: string, legacy: string) =>
    `legacy key '${shown(key)}' has no revision in ${shown(legacy)}; name keys the legacy bucket holds, or take ownership of the bucket with no legacy keys (laneway hive migrate state <swarm> <bucket> --no-legacy-keys)`,
  revisionConflict: (key: string) => `state key '${shown(key)}' is not at the expected revision`,
  notJson: "the event must be a JSON object",
  closed: "the bus is closed",
});

/** A call outside the bus's scope, refused before it reached the server. */
export class BusRefusedError extends SwarmError {
  constructor(message: string) {
    super("swarm_invalid", message);
  }
}

/** A call the bus (or the server, for the credential it holds) does not permit. The specification's PermissionError. */
export class BusPermissionError extends SwarmError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("swarm_forbidden", message, options);
  }
}

/** A scoped queue or state stream whose import from the legacy resources is still marked pending. */
export class MigrationIncompleteError extends SwarmError {
  constructor(readonly resource: "queue" | "state") {
    super("swarm_migration_incomplete", resource === "queue" ? BUS_TEXTS.queueMigrationIncomplete : BUS_TEXTS.stateMigrationIncomplete);
  }
}

/** A migration (or scoped state creation) the specification refuses. Nothing was lost; the pending mark, if any, stays. */
export class MigrationRefusedError extends SwarmError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("swarm_conflict", message, options);
  }
}

/** The command that gives a swarm ownership of a bucket's state: `laneway hive migrate state <swarm> <bucket> <keys or --no-legacy-keys>`. */
export function ownStateCommand(swarm: string, bucket: string, rest: string): string {
  return `laneway hive migrate state ${shown(swarm)} ${shown(bucket)} ${rest}`;
}

/**
 * A scoped state stream the hub does not create because the legacy
 * `KV_<bucket>` still holds entries: the specification's `legacy state
 * requires explicit key ownership`, with the swarm and bucket it concerns
 * (for the hub's log and the resolving command).
 */
export class LegacyStateOwnershipError extends MigrationRefusedError {
  /** Every bucket of the swarm whose state stream was not created for this reason (provisioning collects them). */
  readonly buckets: readonly string[];

  constructor(
    readonly swarm: string,
    readonly bucket: string,
    buckets: readonly string[] = [bucket],
  ) {
    super(BUS_TEXTS.legacyStateOwnership);
    this.buckets = Object.freeze([...buckets]);
  }
}

/** A state write whose expected revision is not the key's current one. */
export class StateRevisionConflictError extends SwarmError {
  constructor(
    readonly key: string,
    readonly expectedRevision: number,
    options?: { cause?: unknown },
  ) {
    super("swarm_conflict", BUS_OWN_TEXTS.revisionConflict(key), options);
  }
}

/** Bind mode found no stream or consumer where the hub should have provisioned one. */
export class BusResourceMissingError extends SwarmError {
  constructor(message: string) {
    super("swarm_not_found", message);
  }
}

/** The bus settings are incomplete or invalid. Messages never hold a URL or a credential. */
export class BusConfigError extends SwarmError {
  constructor(message: string) {
    super("swarm_invalid", message);
  }
}

/**
 * Turns a broker failure into a swarm error whose message says what the
 * bus was doing (`action`, a fixed phrase). Swarm errors pass unchanged.
 */
export function busFailure(error: unknown, action: string): SwarmError {
  if (error instanceof SwarmError) return error;
  const failure = classifyNatsError(error);
  switch (failure.kind) {
    case "permission":
      return new BusPermissionError(`the NATS server denied ${action}`, { cause: failure });
    case "unavailable":
    case "timeout":
      return new SwarmError("swarm_unavailable", `${failure.message} (${action})`, { cause: failure });
    case "jetstream":
      if (failure.code === JetStreamErrorCode.StreamNotFound || failure.code === JetStreamErrorCode.ConsumerNotFound) {
        return new SwarmError("swarm_not_found", `${failure.message} (${action})`, { cause: failure });
      }
      return new SwarmError("swarm_conflict", `${failure.message} (${action})`, { cause: failure });
    case "invalid":
      return new SwarmError("swarm_invalid", `${failure.message} (${action})`, { cause: failure });
    default:
      return new SwarmError("swarm_unavailable", `${failure.message} (${action})`, { cause: failure });
  }
}

/** The JetStream API error code behind `error`, if it is one. */
export function jetStreamCode(error: unknown): number | undefined {
  const failure = classifyNatsError(error);
  return failure.kind === "jetstream" ? failure.code : undefined;
}

/** A caller's name or subject as it may appear in a message: clipped, control characters escaped. */
function shown(text: string): string {
  const clipped = text.length > 256 ? `${text.slice(0, 256)}…` : text;
  return clipped.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A hub durable that exists in a shape the fan-in cannot use, or is missing in bind mode. */
export class BusConfiguredConsumerError extends SwarmError {
  constructor(message: string) {
    super("swarm_conflict", message);
  }
}

/**
 * Why a slot request failed:
 * - `slot_invalid`: the body or subject breaks the protocol (not JSON, an
 *   unknown op or account, a lease out of bounds, a malformed slot id);
 * - `slot_forbidden`: the body names another hive than the subject (the
 *   credential's hive), or the hive is not a member of this hub;
 * - `slot_exhausted`: no free slot on the accounts asked for, or the hive
 *   holds its most slots at once;
 * - `slot_lost`: a renewal of a slot the hive no longer holds (its lease
 *   ended, or it was returned or taken again);
 * - `slot_unavailable`: the hub's buckets cannot be reached, or no hub
 *   answers (member side).
 */
export type SlotReason = "slot_invalid" | "slot_forbidden" | "slot_exhausted" | "slot_lost" | "slot_unavailable";

/** A failed slot request; the message is written for the member and holds no secret. */
export class SlotError extends CoreError<SlotReason> {
  override readonly name = "SlotError";
  readonly domain = "swarm" as const;
}
