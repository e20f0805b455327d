import { Code, createClient } from "@connectrpc/connect";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { createLanewayTransport } from "../../client/transport.js";
import { ConfigError, type SettingDeclaration } from "../../config/index.js";
import {
  hiveBrokerSetup,
  HUB_PAUSE_POINTS,
  hubMigrationMarks,
  hubSettingsFromEnv,
  openHiveHub,
  SwarmError,
  type HiveHub,
  type HubSettings,
  type SwarmReason,
} from "../../swarm/index.js";
import { HiveLanes, hiveLanesSettingsFromEnv, type HiveLanesSettings, type LaneClient } from "../../client/hive-lanes/index.js";
import { Counter, type Registry } from "prom-client";
import { implement, type CoreBinding, type CoreCallMetrics, type ErrorDomainSpec } from "../core-binding.js";
import { hiveHubServiceImpl, hiveMemberServiceImpl } from "../services/hive-services.js";

/**
 * Swarm membership: the hive hub for the operator, join and refresh for
 * members holding an invite secret. The hub opens when `laneway hive init`
 * has created the hive in the data directory: it reads the signer record
 * (`AGENTIHOOKS_NATS_SIGNER`; a malformed or unreadable one stops startup),
 * its state, and connects to NATS with its own service user in the hive
 * account and a system account user. Without a hive, every call answers
 * `swarm_unavailable` and health reports both services as off.
 *
 * The hub answers account slot requests while it is open, and with
 * HIVE_LANES_* set it joins a lane as a participant (over the generated
 * client, like any project) once the server listens; it stops claiming as
 * soon as shutdown begins.
 */
/** Swarm membership's reasons (seed 003) and their codes. */
const reasons: Readonly<Record<SwarmReason, Code>> = {
  swarm_invalid: Code.InvalidArgument,
  swarm_forbidden: Code.PermissionDenied,
  swarm_conflict: Code.Aborted,
  swarm_not_found: Code.NotFound,
  swarm_unavailable: Code.Unavailable,
  swarm_migration_incomplete: Code.Aborted,
  swarm_unscoped: Code.PermissionDenied,
};

const errors: ErrorDomainSpec = { domain: "swarm", reasons, fallbackReasons: { invalid: "swarm_invalid", unavailable: "swarm_unavailable" } };

/** The hive's metrics (docs/operations.md lists them): credentials minted and refused, invites, retirements. */
function swarmMetrics(registry: Registry): CoreCallMetrics {
  const registers = [registry];
  const minted = new Counter({ name: "laneway_hive_credentials_minted_total", help: "Hive member credentials minted, by kind (join, refresh).", labelNames: ["kind"], registers });
  const mintRefusals = new Counter({ name: "laneway_hive_credential_refusals_total", help: "Join and Refresh calls refused, by reason.", labelNames: ["reason"], registers });
  const revocations = new Counter({ name: "laneway_hive_revocations_total", help: "Hive members retired (their credentials revoked) by RetireMember.", registers });
  const invites = new Counter({ name: "laneway_hive_invites_total", help: "Hive member invites issued.", registers });
  for (const kind of ["join", "refresh"]) minted.inc({ kind }, 0);
  revocations.inc(0);
  invites.inc(0);
  return {
    succeeded(service, method) {
      if (service === HiveMemberService.typeName) {
        if (method === "Join" || method === "Refresh") minted.inc({ kind: method.toLowerCase() });
      } else if (method === "RetireMember") revocations.inc();
      else if (method === "Invite") invites.inc();
    },
    refused(service, method, reason) {
      if (service === HiveMemberService.typeName && (method === "Join" || method === "Refresh")) mintRefusals.inc({ reason });
    },
  };
}

/** The hub's variables (only these: the hub reads nothing else of the environment). */
const declarations: readonly SettingDeclaration[] = [
  { env: "AGENTIHOOKS_NATS_SIGNER", type: "string", value: "", help: "where the signer record lives (file:<folder>, hub:<name>)" },
  { env: "LANEWAY_HIVE_REDIS_URL", type: "string", value: "", help: "the hive's Redis, for member passwords" },
  { env: "AGENTIHOOKS_BUS_SCOPED", type: "string", value: "", help: "the hub's bus mode: per-swarm streams" },
  { env: "AGENTIHOOKS_BUS_BIND", type: "string", value: "", help: "bind to the swarms' streams instead of provisioning them" },
  { env: "AGENTIHOOKS_BUS", type: "string", value: "", help: "unscoped: nats selects the legacy events and dead-letter streams" },
  { env: "LANEWAY_HIVE_SLOT_ACCOUNTS", type: "string", value: "", help: "the slot accounts and their sizes, name:slots[,name:slots…]" },
  { env: "LANEWAY_HIVE_SLOTS_PER_HIVE", type: "string", value: "", help: "the most slots one hive holds at once" },
  { env: "HIVE_LANES_ADDRESS", type: "string", value: "", help: "the hive as a lane participant: the Laneway it claims from" },
  { env: "HIVE_LANES_TOKEN", type: "string", value: "", help: "… its project token" },
  { env: "HIVE_LANES_LANE", type: "string", value: "", help: "… its lane" },
  { env: "HIVE_LANES_GROUP", type: "string", value: "", help: "… its work group" },
  { env: "HIVE_LANES_SNAPSHOT_PROJECTS", type: "string", value: "", help: "… the projects whose snapshots it accepts" },
];
const swarmVariables = declarations.map((d) => d.env);

/** The hub's settings and the hive lane adapter's, from those variables. */
interface SwarmSettings {
  readonly hub: HubSettings;
  readonly lanes: HiveLanesSettings | undefined;
}

export const swarmBinding: CoreBinding = {
  name: "swarm",
  folders: ["swarm-bus"],
  title: "the hive hub",
  errors,
  pausePoints: HUB_PAUSE_POINTS,
  services: [
    { service: HiveHubService, principal: "operator" },
    { service: HiveMemberService, principal: "member" },
  ],
  principals: { member: "a hive member's invite secret" },
  metrics: swarmMetrics,
  // Their names are the specification's wire contract.
  settings: {
    core: "swarm",
    title: "hive hub (variables only)",
    declarations,
    // Read here, before anything starts: a bad value stops startup (exit 2) naming its variable, hive or not.
    resolve(values): SwarmSettings {
      const variables = Object.fromEntries(swarmVariables.map((name) => [name, values.get(name)?.value]));
      try {
        return { lanes: hiveLanesSettingsFromEnv(variables), hub: hubSettingsFromEnv(variables) };
      } catch (error) {
        if (error instanceof SwarmError) throw new ConfigError(`the hive hub cannot start: ${error.message}`);
        throw error;
      }
    },
  },
  // With the hive enabled (`laneway hive init`; demo mode enables it on the
  // embedded broker), NATS runs in operator mode and Laneway connects as a
  // service user of its own account, which no hive member can reach.
  async prepareBroker(ctx) {
    const hive = await hiveBrokerSetup(ctx.dataDir, { initialize: ctx.demo && ctx.embedded });
    if (hive === undefined) return undefined;
    return { credentialsFile: hive.lanewayCredentialsFile, account: hive.lanewayAccount, listen: hive.listen, config: (resolverDir) => hive.config(resolverDir) };
  },
  async open(ctx) {
    const names = [HiveHubService.typeName, HiveMemberService.typeName];
    const { hub: hubSettings, lanes: lanesSettings } = ctx.settings as SwarmSettings;
    const opened = await openHiveHub({
      dataDir: ctx.startup.server.dataDir,
      settings: hubSettings,
      servers: ctx.broker.servers,
      pausePoints: ctx.pausePoints,
      log: ctx.log,
      replicas: ctx.startup.server.replicas,
    });
    if (opened === undefined) {
      if (lanesSettings !== undefined) ctx.log.warn("HIVE_LANES_* are set, but the hive is not initialized: the hive lane adapter is off");
      for (const name of names) ctx.health.set(name, "off");
      const hub = (): HiveHub => {
        throw new SwarmError("swarm_unavailable", "the hive is not initialized on this server: run laneway hive init, then restart laneway serve");
      };
      return {
        implementations: [implement(HiveHubService, hiveHubServiceImpl(hub)), implement(HiveMemberService, hiveMemberServiceImpl(hub))],
        async close() {},
      };
    }
    const hive = opened;
    const refresh = () => {
      const serving = hive.hubBroker.state === "connected" && hive.systemBroker.state === "connected";
      for (const name of names) ctx.health.set(name, serving ? "serving" : "not_serving");
    };
    const unsubscribe = [hive.hubBroker.onStateChange(refresh), hive.systemBroker.onStateChange(refresh)];
    refresh();
    ctx.log.info("hive hub open", { signer: hive.signerKind });
    let lanes: { adapter: HiveLanes; close(): void } | undefined;
    // The lane may be served by this very server: claim once it listens.
    const startLanes = (settings: HiveLanesSettings) => {
      if (ctx.drain.aborted) return;
      const laneClient = laneClientOf(settings);
      const adapter = HiveLanes.start({
        settings,
        client: laneClient.client,
        hub: hive.hub,
        readMigrationMarks: hubMigrationMarks(hive.hubBroker),
        log: ctx.log.child({ component: "hive-lanes" }),
      });
      lanes = { adapter, close: laneClient.close };
      // In-flight claims must not hold up shutdown (the lane may be this server).
      ctx.drain.addEventListener("abort", () => void adapter.stop(), { once: true });
    };
    const hub = () => hive.hub;
    return {
      implementations: [implement(HiveHubService, hiveHubServiceImpl(hub)), implement(HiveMemberService, hiveMemberServiceImpl(hub))],
      authenticate: (token) => {
        const member = hive.hub.resolveMember(token);
        return member && { kind: "member", id: member.memberId };
      },
      listening() {
        if (lanesSettings !== undefined) startLanes(lanesSettings);
      },
      async close() {
        for (const stop of unsubscribe) stop();
        if (lanes) {
          await lanes.adapter.stop();
          lanes.close();
        }
        await hive.close();
      },
    };
  },
};

/** The generated lane client the hive uses as a project: Connect binary with its bearer token. */
function laneClientOf(settings: HiveLanesSettings): { client: LaneClient; close(): void } {
  const { transport, close } = createLanewayTransport({ baseUrl: settings.address, protocol: "connect-binary", token: settings.token.reveal() });
  return { client: createClient(LaneService, transport), close };
}
