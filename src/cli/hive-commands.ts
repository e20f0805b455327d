import { resolve } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  HiveHubService,
  MigrationOutcome,
  MigrationProgressSchema,
  RetiredServiceUserSchema,
  ServiceUserAction,
  ServiceUserGrantSchema,
  type MigrateRequest,
  type MigrationProgress,
} from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService, type MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { nanosToMillis, parseGoDuration, SERVER_DEFAULTS } from "../config/index.js";
import { deleteServiceCreds, heldServiceKey, initHive, saveServiceCreds, serviceCredsPath, SwarmError } from "../swarm/index.js";
import { acceptCredential, HIVE_ENV, readHiveEnv, readInvite, saveHiveFiles, writeInviteFile, type MemberInvite } from "../swarm-bus/index.js";
import { checkGrants } from "./grant-check/grant-check.js";
import { ANTONCORE_FILES, readAntoncoreNats, type AntoncoreNats } from "./grant-check/antoncore-users.js";
import { clientSettings, openClient, OutcomeError, parseCommand, parseUint, positionals, printMessage, UsageError, withClient, type CliIo } from "./command.js";
import type { CommandGroup, CommandSpec } from "./command-group.js";
import { rpcCommand } from "./rpc-command.js";

/**
 * `laneway hive …`: the hive hub operator's commands (operator token), a
 * member's join and refresh (the invite secret from the invite file is the
 * token), and two local commands: `init` (the hive's keys in the data
 * directory) and `check-grants` (the grant check against an antoncore
 * checkout). `nats-trust` reads an antoncore checkout locally and signs
 * through the hub (TrustServiceUsers): the hub owns the revocation list.
 */

const hub = HiveHubService.method;
const member = HiveMemberService.method;

/** `hive init`: the operator, the accounts, the service users and the signer record. */
const initCommand: CommandSpec = {
  name: "init",
  usage: "init [--data-dir DIR] [--nats-listen HOST:PORT] [--bus-url URL]\n(restart laneway serve afterwards: its NATS then runs in operator mode)",
  summary: "create the hive's operator, system, hive and Laneway accounts and the hub's credentials in the data directory",
  async run(argv, io) {
    const { values, positionals: args } = parseCommand(argv, {
      "data-dir": { type: "string" },
      "nats-listen": { type: "string" },
      "bus-url": { type: "string" },
    });
    positionals(args, []);
    const dataDir = resolve(values["data-dir"] ?? nonEmpty(io.env.LANEWAY_DATA_DIR) ?? SERVER_DEFAULTS.dataDir);
    const result = await swarmCall(() =>
      initHive(dataDir, {
        ...(values["nats-listen"] ? { natsListen: values["nats-listen"] } : {}),
        ...(values["bus-url"] ? { busUrl: values["bus-url"] } : {}),
      }),
    );
    io.stdout(`${JSON.stringify(result, null, 2)}\n`);
    if (!result.created) io.stderr("laneway: the hive was already initialized; nothing was changed\n");
  },
};

/** `hive invite`: prints the invite, or writes it to a file (mode 0600) with the hub's address. */
const inviteCommand: CommandSpec = {
  name: "invite",
  usage:
    "invite <member> [--bus-url URL] [--swarm S]... [--out FILE] [--hub-url URL]\n(--out writes the invite file, secret included, and prints it without the secret;\n --swarm needs hive scope to have run: before it an invite is unscoped)",
  summary: "register a member and issue its invite (the secret is shown once)",
  async run(argv, io) {
    const { values, positionals: args } = parseCommand(argv, {
      "bus-url": { type: "string" },
      swarm: { type: "string", multiple: true },
      out: { type: "string" },
      "hub-url": { type: "string" },
    });
    const [memberId] = positionals(args, ["member"]);
    const settings = clientSettings(values, io);
    const swarms = values.swarm ?? [];
    await withClient(HiveHubService, values, io, async (client) => {
      // --swarm means "list the member with these swarms": before hive scope there is no field to list it in.
      if (swarms.length > 0 && !(await client.listMembers({}, { signal: io.signal })).scopingEnabled) {
        throw new UsageError("--swarm needs the signer record's member_swarms field, which does not exist yet: run laneway hive scope first (an invite issued before it is unscoped)");
      }
      const response = await client.invite({ memberId: memberId!, busUrl: values["bus-url"] ?? "", swarms, requireMemberSwarms: swarms.length > 0 });
      if (values.out === undefined) {
        printMessage(io, hub.invite.output, response);
        return;
      }
      const lines = [...response.inviteEnv, `${HIVE_ENV.hubAddress}=${values["hub-url"] ?? settings.baseUrl}`];
      const path = await swarmCall(() => writeInviteFile(values.out!, lines));
      io.stdout(`${JSON.stringify({ memberId: response.memberId, scoped: response.scoped, listed: response.listed, swarms: response.swarms, invite: path }, null, 2)}\n`);
    });
  },
};

/** `hive join <invite>` and `hive refresh`: mint, refuse a downgrade, save hive.creds and hive.env. */
function memberCommand(kind: "join" | "refresh"): CommandSpec {
  return {
    name: kind,
    usage:
      kind === "join"
        ? "join <invite> [--dir DIR]\n(writes DIR/hive.creds and DIR/hive.env, mode 0600; DIR defaults to the current directory)"
        : "refresh [--dir DIR]\n(reads DIR/hive.env and the invite it names; rewrites hive.creds and hive.env)",
    summary:
      kind === "join"
        ? "as a member: mint a credential with the invite and save it beside hive.env"
        : "as a member: mint a new credential from the hub's current signer record",
    async run(argv, io) {
      const { values, positionals: args } = parseCommand(argv, { dir: { type: "string" } });
      const dir = values.dir ?? ".";
      let invite: MemberInvite;
      if (kind === "join") {
        const [path] = positionals(args, ["invite"]);
        invite = await swarmCall(() => readInvite(path!));
      } else {
        positionals(args, []);
        const { invitePath } = await swarmCall(() => readHiveEnv(dir));
        invite = await swarmCall(() => readInvite(invitePath));
      }
      const settings = clientSettings({ ...values, address: values.address ?? invite.hubAddress }, io);
      const { client, transport } = openClient(HiveMemberService, { ...settings, token: invite.secret.reveal() });
      let credential: MemberCredential | undefined;
      try {
        credential = (kind === "join" ? await client.join({}, { signal: io.signal }) : await client.refresh({}, { signal: io.signal })).credential;
      } finally {
        transport.close();
      }
      if (credential === undefined) throw new OutcomeError("the hub answered without a credential");
      const offered = credential;
      // The hub has already rotated the member's Redis password: the invite's
      // (or the old hive.env's) Redis URL no longer authenticates.
      await swarmCall(async () => acceptCredential(invite, offered));
      const saved = await swarmCall(() => saveHiveFiles(dir, { creds: offered.creds, hiveEnv: offered.hiveEnv, invitePath: invite.path }));
      io.stdout(
        `${JSON.stringify(
          {
            memberId: offered.memberId,
            scoped: offered.scoped,
            swarms: offered.swarms,
            hiveEnv: saved.hiveEnvPath,
            credentials: saved.credsPath,
            expiresAt: offered.expiresAt ? timestampDate(offered.expiresAt).toISOString() : undefined,
          },
          null,
          2,
        )}\n`,
      );
    },
  };
}

/** `hive check-grants`: the specification's grant check against an antoncore checkout. */
const checkGrantsCommand: CommandSpec = {
  name: "check-grants",
  usage: "check-grants --antoncore DIR [--no-shared-hive-user]\n(compares the member and controller grants with DIR's agentihooks-swarm-nats users.yaml and values.yaml)",
  summary: "check that the NATS grants Laneway renders equal antoncore's hive users (exit 1 on any difference)",
  async run(argv, io) {
    const { values, positionals: args } = parseCommand(argv, { antoncore: { type: "string" }, "no-shared-hive-user": { type: "boolean" } });
    positionals(args, []);
    if (values.antoncore === undefined) throw new UsageError("--antoncore is required");
    const result = await checkGrants(resolve(values.antoncore), { noSharedHiveUser: values["no-shared-hive-user"] === true });
    for (const line of result.lines) io.stdout(`${line}\n`);
    if (!result.ok) throw new OutcomeError("the grant check failed");
  },
};

/**
 * `hive nats-trust`: the NATS service users of an antoncore checkout's
 * users file (operator mode), signed by the hub through TrustServiceUsers,
 * each credential written to `--out` (`<name>.creds`, mode 0600), each
 * retired user's credential there deleted once the hub revoked its keys.
 * The folder's credentials tell the hub which ones the operator holds, so a
 * rerun changes nothing. `--dry-run` prints what would be done.
 */
const natsTrustCommand: CommandSpec = {
  name: "nats-trust",
  usage: [
    "nats-trust --antoncore DIR --out DIR [--dry-run]",
    "(signs the service users of DIR's agentihooks-swarm-nats users.yaml in the hive account, writes each credential",
    " to --out as <name>.creds, mode 0600; retired: users are revoked on the NATS server and their credentials deleted)",
  ].join("\n"),
  summary: "sign antoncore's NATS service users in the hive account and revoke its retired ones",
  async run(argv, io) {
    const { values, positionals: args } = parseCommand(argv, { antoncore: { type: "string" }, out: { type: "string" }, "dry-run": { type: "boolean" } });
    positionals(args, []);
    if (values.antoncore === undefined) throw new UsageError("--antoncore is required");
    if (values.out === undefined) throw new UsageError("--out is required (the folder the credentials are written to)");
    const out = resolve(values.out);
    const dryRun = values["dry-run"] === true;
    let nats: AntoncoreNats;
    try {
      nats = await readAntoncoreNats(resolve(values.antoncore));
    } catch (error) {
      if (error instanceof Error && error.name === "ValueError") throw new OutcomeError(`the swarm NATS users cannot be read (${error.message})`);
      throw error;
    }
    if (nats.mode !== "operator") {
      throw new OutcomeError(`hive nats-trust signs the users of ${ANTONCORE_FILES.users} in operator mode, and ${ANTONCORE_FILES.values} still defines accounts`);
    }
    const users: MessageInitShape<typeof ServiceUserGrantSchema>[] = [];
    for (const user of nats.users.values()) {
      users.push({
        name: user.name,
        publishAllow: [...user.publishAllow],
        publishDeny: [...user.publishDeny],
        subscribeAllow: [...user.subscribeAllow],
        subscribeDeny: [...user.subscribeDeny],
        heldPublicKey: (await swarmCall(() => heldServiceKey(out, user.name))) ?? "",
      });
    }
    const retired: MessageInitShape<typeof RetiredServiceUserSchema>[] = [];
    for (const name of nats.retired) retired.push({ name, heldPublicKey: (await swarmCall(() => heldServiceKey(out, name))) ?? "" });
    await withClient(HiveHubService, values, io, async (client) => {
      const response = await client.trustServiceUsers({ users, retired, dryRun }, { signal: io.signal });
      const printedUsers = [];
      for (const user of response.users) {
        let credentials: string | undefined;
        if (!dryRun && user.creds !== "") credentials = await swarmCall(() => saveServiceCreds(out, user.name, user.creds));
        printedUsers.push({
          name: user.name,
          action: actionName(user.action),
          ...(user.why ? { why: user.why } : {}),
          ...(user.publicKey ? { publicKey: user.publicKey } : {}),
          ...(user.revokedKeys > 0 ? { revokedKeys: user.revokedKeys } : {}),
          ...(credentials ? { credentials } : {}),
        });
      }
      const printedRetired = [];
      for (const user of response.retired) {
        // Deleted only after the hub confirmed the revocation (its answer).
        const deleted = dryRun ? false : await swarmCall(() => deleteServiceCreds(out, user.name));
        printedRetired.push({ name: user.name, action: actionName(user.action), revokedKeys: user.revokedKeys, ...(deleted ? { deleted: serviceCredsPath(out, user.name) } : {}) });
      }
      io.stdout(`${JSON.stringify({ dryRun, users: printedUsers, retired: printedRetired, unlisted: response.unlisted }, null, 2)}\n`);
    });
  },
};

function actionName(action: ServiceUserAction): string {
  const names: Record<number, string> = {
    [ServiceUserAction.SIGNED]: "signed",
    [ServiceUserAction.RESIGNED]: "resigned",
    [ServiceUserAction.UNCHANGED]: "unchanged",
    [ServiceUserAction.REVOKED]: "revoked",
    [ServiceUserAction.ALREADY_RETIRED]: "already-retired",
  };
  return names[action] ?? "unknown";
}

/**
 * `hive migrate state|queue|dead`: one migration through the streaming
 * Migrate RPC. Progress goes to stderr (a bar, at most about four updates a
 * second; `--quiet` turns it off), the final counts to stdout as JSON.
 * Ctrl-C stops the copy at a safe point; running the command again resumes.
 */
const migrateCommand: CommandSpec = {
  name: "migrate",
  usage: [
    "migrate state <swarm> <bucket> <key>... [--quiet]",
    "migrate state <swarm> <bucket> --no-legacy-keys [--quiet]   (the swarm owns the bucket's state with no legacy key)",
    "migrate queue <swarm> <queue> [--max-deliver N] [--ack-wait D] [--quiet]",
    "migrate dead <swarm> [--quiet]",
    "(moves one swarm's retained legacy data into its own streams; quiesce that swarm's legacy writers and consumers first;",
    " safe to repeat; progress on stderr, the result as JSON on stdout)",
  ].join("\n"),
  summary: "move a swarm's legacy state keys, lane queue or dead letters into its own streams, with progress",
  async run(argv, io) {
    const { values, positionals: args } = parseCommand(argv, {
      "max-deliver": { type: "string" },
      "ack-wait": { type: "string" },
      "no-legacy-keys": { type: "boolean" },
      quiet: { type: "boolean" },
    });
    const [kind, ...rest] = args;
    let request: MigrateRequest["migration"];
    if (kind !== "queue" && (values["max-deliver"] !== undefined || values["ack-wait"] !== undefined)) {
      throw new UsageError("--max-deliver and --ack-wait apply to migrate queue only");
    }
    if (kind !== "state" && values["no-legacy-keys"] !== undefined) throw new UsageError("--no-legacy-keys applies to migrate state only");
    switch (kind) {
      case "state": {
        const noLegacyKeys = values["no-legacy-keys"] === true;
        if (noLegacyKeys ? rest.length !== 2 : rest.length < 3) {
          throw new UsageError("expected state <swarm> <bucket> <key>..., or state <swarm> <bucket> --no-legacy-keys");
        }
        const [swarm, bucket, ...keys] = rest;
        request = { case: "state", value: { $typeName: "laneway.swarm.v1.MigrateStateRequest", swarm: swarm!, bucket: bucket!, keys, noLegacyKeys } };
        break;
      }
      case "queue": {
        const [swarm, name] = positionals(rest, ["swarm", "queue"]);
        const maxDeliver = Number(parseUint("max-deliver", values["max-deliver"], 0n));
        const ackWaitMs = durationOption("ack-wait", values["ack-wait"]);
        request = {
          case: "queue",
          value: {
            $typeName: "laneway.swarm.v1.MigrateQueueRequest",
            swarm: swarm!,
            name: name!,
            policy: { $typeName: "laneway.swarm.v1.QueuePolicy", maxDeliver, ...(ackWaitMs > 0 ? { ackWait: durationFromMs(ackWaitMs) } : {}) },
          },
        };
        break;
      }
      case "dead": {
        const [swarm] = positionals(rest, ["swarm"]);
        request = { case: "dead", value: { $typeName: "laneway.swarm.v1.MigrateDeadRequest", swarm: swarm! } };
        break;
      }
      default:
        throw new UsageError("expected migrate state|queue|dead (see --help)");
    }
    const display = values.quiet === true ? undefined : new ProgressDisplay(io, kind);
    await withClient(HiveHubService, values, io, async (client) => {
      let last: MigrationProgress | undefined;
      for await (const message of client.migrate({ migration: request }, { signal: io.signal })) {
        if (message.progress === undefined) continue;
        last = message.progress;
        if (!last.complete) display?.update(last);
      }
      if (last === undefined || !last.complete) throw new OutcomeError("the hub ended the migration without a result");
      display?.done(last);
      printMessage(io, MigrationProgressSchema, last);
    });
  },
};

/** A progress bar on stderr: `migrate queue [#######-------------] 35% 35000/100000 copied 35000 skipped 0`. */
class ProgressDisplay {
  static readonly WIDTH = 30;

  constructor(
    private readonly io: CliIo,
    private readonly kind: string,
  ) {}

  update(p: MigrationProgress): void {
    const done = p.copied + p.skipped;
    const total = p.total > 0n ? p.total : done;
    const ratio = total === 0n ? 1 : Number((done * 1000n) / total) / 1000;
    const filled = Math.min(ProgressDisplay.WIDTH, Math.round(ratio * ProgressDisplay.WIDTH));
    const bar = `${"#".repeat(filled)}${"-".repeat(ProgressDisplay.WIDTH - filled)}`;
    this.io.stderr(`migrate ${this.kind} [${bar}] ${Math.floor(ratio * 100)}% ${done}/${total} copied ${p.copied} skipped ${p.skipped}\n`);
  }

  done(p: MigrationProgress): void {
    if (p.total > 0n) this.update(p);
    this.io.stderr(p.outcome === MigrationOutcome.OWNED ? `migrate ${this.kind}: owned with no legacy keys\n` : `migrate ${this.kind}: complete\n`);
  }
}

function durationOption(name: string, value: string | undefined): number {
  if (value === undefined) return 0;
  try {
    return nanosToMillis(parseGoDuration(value));
  } catch {
    throw new UsageError(`--${name} must be a duration such as 10s`);
  }
}

export const hiveCommands: CommandGroup = {
  name: "hive",
  summary: "swarm membership (operator token; join and refresh take the invite file)",
  commands: [
    initCommand,
    rpcCommand({
      method: hub.scope,
      usage: "scope [--swarm S]...",
      summary: "create member_swarms and list every member with the swarms (when none given: the named swarms and those in the store)",
      options: { swarm: { type: "string", multiple: true } },
      request: (i) => ({ swarms: i.list("swarm") }),
    }),
    inviteCommand,
    rpcCommand({ method: hub.listMembers, usage: "members", summary: "every member with its scope, and the retired ones", request: () => ({}) }),
    rpcCommand({
      method: hub.renderGrant,
      usage: "grant <member>",
      summary: "the NATS permissions a member's next credential would carry",
      args: ["member"],
      request: (i) => ({ memberId: i.arg("member") }),
    }),
    rpcCommand({
      method: hub.listSwarms,
      usage: "swarms",
      summary: "the swarms the operator named, what scope and invite grant by default, and the swarms only events named",
      request: () => ({}),
    }),
    rpcCommand({
      method: hub.nameSwarms,
      usage: "name-swarms <swarm>...",
      summary: "name swarms as the operator's (scope and invite without --swarm then grant them); creates their streams",
      args: ["swarm..."],
      request: (i) => ({ swarms: [...i.rest()] }),
    }),
    rpcCommand({
      method: hub.retireMember,
      usage: "retire <member>",
      summary: "revoke a member's credentials on the NATS server, delete its record and Redis user",
      args: ["member"],
      request: (i) => ({ memberId: i.arg("member") }),
    }),
    memberCommand("join"),
    memberCommand("refresh"),
    checkGrantsCommand,
    natsTrustCommand,
    migrateCommand,
  ],
};

/** Runs a swarm core call; its typed failures become one-line outcomes (exit 1). */
async function swarmCall<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof SwarmError) throw new OutcomeError(error.message);
    throw error;
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === "" ? undefined : value;
}
