/**
 * Swarm membership: the public surface of the swarm core.
 *
 * - The hive's trust (hive-trust.ts): `laneway hive init` creates the
 *   operator, the system, hive and Laneway accounts and the nats-server
 *   settings of decentralized JWT auth; hive-broker.ts is what the embedded
 *   server needs from it.
 * - The signer record (signer-record.ts, signer-store.ts): the signing key
 *   and the member_swarms field, reread on every join and refresh.
 * - Grants and names (member-grant.ts, stream-names.ts): what each
 *   credential may do, and the per-swarm stream, subject and consumer names.
 * - The hub (hive-hub.ts, open-hive-hub.ts) with its state (hub-state.ts)
 *   and storage (hub-store.ts): invite, scope, join and refresh, retire.
 * - A member's side (member-files.ts, member-env.ts): the invite, the
 *   downgrade refusal, hive.creds and hive.env.
 * - The grant check against an antoncore checkout (grant-check/).
 * - Account slots (slots/): the hub answers `slots.<swarm>.<hive>` requests
 *   from the `hub-slots` queue group; members use the SlotClient.
 * - The hive as a lane participant (hive-lanes*.ts): snapshot requests and
 *   mode-change events on a lane, with HIVE_LANES_* set.
 * - The hub's bus (hub-bus.ts): provisioning, event fan-in and migration.
 * - The NATS service users the hub signs and retires (service-users.ts,
 *   service-user-files.ts: `hive nats-trust`).
 */
export { noDowngradeError, noMemberSwarmsError, SWARM_OWN_TEXTS, SWARM_TEXTS, SwarmError, type SwarmReason } from "./errors.js";
export { isMemberId, isSwarmName, MAX_SWARM_NAME_BYTES, swarmNameProblem } from "./swarm-names.js";
export {
  consumerName,
  deadLetterSubject,
  deadStream,
  digestComponent,
  eventsStream,
  GLOBAL_STREAMS,
  HUB_SLOT_BUCKETS,
  HUB_SLOTS_QUEUE_GROUP,
  LEGACY_EVENT_SUBJECTS,
  legacyKvStream,
  legacyMarkSubjectPatterns,
  MIGRATION_MARK_PREFIX,
  migrationMarkSubject,
  queueStream,
  queueWorkSubject,
  slotRequestSubject,
  stateKeySubject,
  stateStream,
  STATE_REVISIONS_PER_KEY,
  SWARM_LANES,
  SWARM_STATE_BUCKETS,
  swarmHex,
  swarmOfStream,
  swarmStreams,
  swarmSubjectPrefix,
  type SwarmLane,
  type SwarmStream,
  type SwarmStreamKind,
} from "./stream-names.js";
export {
  controllerGrant,
  decideGrant,
  inboxPrefixOf,
  legacySubjectsOfSwarm,
  renderMemberGrant,
  scopedPublishDeny,
  streamApiSubjects,
  type GrantDecision,
  type NatsGrant,
} from "./member-grant.js";
export { parseMemberSwarms, parseRecordObject, RECORD_KEYS, type MemberSwarms, type RecordDocument, type SignerRecord } from "./signer-record.js";
export { DEFAULT_SIGNER, openSignerStore, SIGNER_ENV, type SignerRecordStore } from "./signer-store.js";
export { DEFAULT_CREDENTIAL_LIFETIME_MS, mintMemberCredential, userClaims, type MintedCredential, type MintRequest } from "./credential-minter.js";
export { hiveDirOf, initHive, loadHiveTrust, operatorModeConfig, type HiveTrust, type InitHiveOptions, type InitHiveResult } from "./hive-trust.js";
export { hiveBrokerSetup, type HiveBrokerSetup } from "./hive-broker.js";
export {
  HiveHub,
  MAX_INVITE_SECRET_BYTES,
  type GrantView,
  type NamedSwarmListing,
  type StoreSwarms,
  type SwarmsListing,
  type UnnamedSwarmListing,
  type HubModeChange,
  type HubModeChangeListener,
  type InviteOutcome,
  type MemberCredentialOutcome,
  type MemberListing,
  type MembersListing,
  type RetiredListing,
  type RetireOutcome,
  type ScopeOutcome,
} from "./hive-hub.js";
export { openHiveHub, swarmsInStore, type OpenedHive, type OpenHiveHubOptions } from "./open-hive-hub.js";
export { REDIS_URL_ENV, RedisAccounts } from "./redis-accounts.js";
export { HIVE_CREDS_FILE, HIVE_ENV, HIVE_ENV_FILE, hiveEnvLines, inviteEnvLines } from "./member-env.js";
export { acceptCredential, readHiveEnv, readInvite, saveHiveFiles, writeInviteFile, type MemberInvite, type SavedHiveFiles } from "./member-files.js";
export { checkGrants, covers, noSharedHiveUser, CONTROLLER_USER, HIVE_USER, SPOKE_EXECUTION_SUBJECT, type GrantCheckResult } from "./grant-check/grant-check.js";
export { deleteServiceCreds, heldServiceKey, saveServiceCreds, serviceCredsPath } from "./service-user-files.js";
export { ANTONCORE_FILES, readAntoncoreNats, type AntoncoreNats, type AntoncoreUser } from "./grant-check/antoncore-users.js";
export { parseYamlSubset, YamlSubsetError } from "./grant-check/yaml-subset.js";
export { NativeKeyPair, type NkeyRole } from "./native-keys.js";
export * from "./bus/index.js";
export {
  EVENT_ONLY_STREAM_DESCRIPTION,
  HUB_BUS_REFRESH_MS,
  HUB_FAN_IN_DURABLE,
  HUB_PAUSE_POINTS,
  HubBus,
  type HubBusOptions,
  type HubBusStatus,
  type HubMigrationOptions,
  type HubMigrator,
  type HubProvisioner,
} from "./hub-bus.js";
export {
  applyTrustRequest,
  checkTrustRequest,
  grantDigest,
  isUserPublicKey,
  MAX_SERVICE_USERS,
  type RetiredServiceUser,
  type ServiceUserAction,
  type ServiceUserGrant,
  type ServiceUserOutcome,
  type TrustOutcome,
  type TrustRequest,
} from "./service-users.js";
export {
  decodeSlotAnswer,
  encodeSlotRequest,
  formatSlotId,
  MAX_SLOT_REQUEST_BYTES,
  parseSlotId,
  SLOT_LEASE,
  SLOT_OPERATIONS,
  SlotError,
  type AccountSlot,
  type SlotAnswer,
  type SlotId,
  type SlotOperation,
  type SlotReason,
} from "./slots/slot-protocol.js";
export { DEFAULT_SLOT_POLICY, SLOT_ACCOUNTS_ENV, SLOT_POLICY_LIMITS, slotPolicyFromEnv, SLOTS_PER_HIVE_ENV, type SlotPolicy } from "./slots/slot-policy.js";
export { SLOT_REQUESTS_SUBJECT, SlotResponder, type SlotResponderOptions } from "./slots/slot-responder.js";
export { requestSlotRaw, SlotClient, type SlotClientOptions, type TakeSlotOptions } from "./slots/slot-client.js";
export { HIVE_LANES_ENV, hiveLanesSettingsFromEnv, MAX_SNAPSHOT_PROJECTS, type HiveLanesSettings } from "./hive-lanes-settings.js";
export { HIVE_SCHEMAS, snapshotEvent, type HubSnapshotState, type MigrationMarkSummary, type SnapshotRequestRef } from "./hive-lanes-events.js";
export { HiveLanes, hubMigrationMarks, noMigrationMarks, type HiveLanesOptions, type LaneClient, type MigrationMarksReader } from "./hive-lanes.js";
