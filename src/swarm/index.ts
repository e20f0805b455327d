/**
 * Swarm membership, the hub's side: the public surface of the swarm core.
 * What a member holds (the scoped bus, its files, the slot client, the
 * stream names) is the swarm bus, src/swarm-bus/.
 *
 * - The hive's trust (hive-trust.ts): `laneway hive init` creates the
 *   operator, the system, hive and Laneway accounts and the nats-server
 *   settings of decentralized JWT auth; hive-broker.ts is what the embedded
 *   server needs from it.
 * - The signer record (signer-record.ts, signer-store.ts): the signing key
 *   and the member_swarms field, reread on every join and refresh.
 * - Grants (member-grant.ts) and minting (credential-minter.ts): what each
 *   credential may do, and the credential a join or refresh hands out.
 * - The hub (hive-hub.ts, open-hive-hub.ts) with its state (hub-state.ts)
 *   and storage (hub-store.ts): invite, scope, join and refresh, retire.
 * - Account slots (slots/): the hub answers `slots.<swarm>.<hive>` requests
 *   from the `hub-slots` queue group.
 * - The hub's bus (hub-bus.ts): provisioning, event fan-in and migration;
 *   the migration marks its snapshots report (migration-marks.ts).
 * - The NATS service users the hub signs and retires (service-users.ts,
 *   service-user-files.ts: `hive nats-trust`).
 */
export { SwarmError, type QueuePolicy, type SwarmReason } from "../swarm-bus/index.js";
export type { MigrationProgress, MigrationResult } from "../swarm-bus/internal.js";
export {
  controllerGrant,
  renderMemberGrant,
  CONTROLLER_USER,
  covers,
  HIVE_USER,
  SPOKE_EXECUTION_SUBJECT,
  scopedPublishDeny,
  streamApiSubjects,
  type GrantDecision,
} from "./member-grant.js";
export { parseRecordObject } from "./signer-record.js";
export { openSignerStore } from "./signer-store.js";
export { mintMemberCredential, userClaims } from "./credential-minter.js";
export { hiveDirOf, initHive, loadHiveTrust, type HiveTrust } from "./hive-trust.js";
export { hiveBrokerSetup } from "./hive-broker.js";
export {
  HiveHub,
  type SwarmsListing,
  type HubModeChange,
  type MemberCredentialOutcome,
  type MemberListing,
  type MembersListing,
  type RetiredListing,
} from "./hive-hub.js";
export { hubSettingsFromEnv, openHiveHub, type HubSettings } from "./open-hive-hub.js";
export { deleteServiceCreds, heldServiceKey, saveServiceCreds, serviceCredsPath } from "./service-user-files.js";
export { EVENT_ONLY_STREAM_DESCRIPTION, HUB_PAUSE_POINTS, HubBus, type MigrationParams } from "./hub-bus.js";
export { type ServiceUserOutcome } from "./service-users.js";
export { DEFAULT_SLOT_POLICY, slotPolicyFromEnv } from "./slots/slot-policy.js";
export { SlotResponder } from "./slots/slot-responder.js";
export { hubMigrationMarks, type MigrationMarkSummary, type MigrationMarksReader } from "./migration-marks.js";
