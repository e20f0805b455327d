import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  HiveHubService,
  InviteResponseSchema,
  ListMembersResponseSchema,
  MigrateDeadResponseSchema,
  MigrateQueueResponseSchema,
  MigrateStateResponseSchema,
  RenderGrantResponseSchema,
  ScopeResponseSchema,
} from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService, JoinResponseSchema, RefreshResponseSchema } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { nanosToMillis, parseGoDuration } from "../config/index.js";
import { parseCommand, parseUint, positionals, printMessage, UsageError, withClient } from "./command.js";
import type { CommandGroup, CommandSpec } from "./command-group.js";

/**
 * `laneway hive …`: the hive hub operator's commands (operator token) and
 * a member's join and refresh (invite secret as the token).
 */

const scope: CommandSpec = {
  name: "scope",
  usage: "scope [--swarm S]...",
  summary: "create member_swarms and list every member with the swarms (all swarms when none given)",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { swarm: { type: "string", multiple: true } });
    positionals(rest, []);
    printMessage(io, ScopeResponseSchema, await withClient(HiveHubService, values, io, (c) => c.scope({ swarms: values.swarm ?? [] }, { signal: io.signal })));
  },
};

const invite: CommandSpec = {
  name: "invite",
  usage: "invite <member> [--bus-url URL]",
  summary: "register a member and print its invite (shown once)",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { "bus-url": { type: "string" } });
    const [memberId] = positionals(rest, ["member"]);
    const res = await withClient(HiveHubService, values, io, (c) => c.invite({ memberId, busUrl: values["bus-url"] ?? "" }, { signal: io.signal }));
    printMessage(io, InviteResponseSchema, res);
  },
};

const members: CommandSpec = {
  name: "members",
  usage: "members",
  summary: "every member with its scope",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    positionals(rest, []);
    printMessage(io, ListMembersResponseSchema, await withClient(HiveHubService, values, io, (c) => c.listMembers({}, { signal: io.signal })));
  },
};

const grant: CommandSpec = {
  name: "grant",
  usage: "grant <member>",
  summary: "the NATS permissions a member's next credential would carry",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    const [memberId] = positionals(rest, ["member"]);
    printMessage(io, RenderGrantResponseSchema, await withClient(HiveHubService, values, io, (c) => c.renderGrant({ memberId }, { signal: io.signal })));
  },
};

const migrateState: CommandSpec = {
  name: "migrate-state",
  usage: "migrate-state <swarm> <bucket> <key>...",
  summary: "move retained revisions of keys from a legacy KV bucket into the swarm's state stream",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    if (rest.length < 3) throw new UsageError("expected <swarm> <bucket> <key>...");
    const [swarm, bucket, ...keys] = rest as [string, string, ...string[]];
    printMessage(io, MigrateStateResponseSchema, await withClient(HiveHubService, values, io, (c) => c.migrateState({ swarm, bucket, keys }, { signal: io.signal })));
  },
};

const migrateQueue: CommandSpec = {
  name: "migrate-queue",
  usage: "migrate-queue <swarm> <queue> [--max-deliver N] [--ack-wait D]",
  summary: "move undelivered work of a legacy lane queue into the swarm's queue",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { "max-deliver": { type: "string" }, "ack-wait": { type: "string" } });
    const [swarm, name] = positionals(rest, ["swarm", "queue"]);
    let ackWaitMs: number | undefined;
    if (values["ack-wait"] !== undefined) {
      try {
        ackWaitMs = nanosToMillis(parseGoDuration(values["ack-wait"]));
      } catch {
        throw new UsageError("--ack-wait must be a duration such as 30s");
      }
    }
    const policy = {
      maxDeliver: Number(parseUint("max-deliver", values["max-deliver"], 0n)),
      ...(ackWaitMs !== undefined ? { ackWait: durationFromMs(ackWaitMs) } : {}),
    };
    printMessage(io, MigrateQueueResponseSchema, await withClient(HiveHubService, values, io, (c) => c.migrateQueue({ swarm, name, policy }, { signal: io.signal })));
  },
};

const migrateDead: CommandSpec = {
  name: "migrate-dead",
  usage: "migrate-dead <swarm>",
  summary: "copy a swarm's letters from the shared dead letter stream into its own",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    const [swarm] = positionals(rest, ["swarm"]);
    printMessage(io, MigrateDeadResponseSchema, await withClient(HiveHubService, values, io, (c) => c.migrateDead({ swarm }, { signal: io.signal })));
  },
};

const join: CommandSpec = {
  name: "join",
  usage: "join",
  summary: "as a member (invite secret as the token): mint the first credential",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    positionals(rest, []);
    printMessage(io, JoinResponseSchema, await withClient(HiveMemberService, values, io, (c) => c.join({}, { signal: io.signal })));
  },
};

const refresh: CommandSpec = {
  name: "refresh",
  usage: "refresh",
  summary: "as a member: mint a new credential from the current signer record",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    positionals(rest, []);
    printMessage(io, RefreshResponseSchema, await withClient(HiveMemberService, values, io, (c) => c.refresh({}, { signal: io.signal })));
  },
};

export const hiveCommands: CommandGroup = {
  name: "hive",
  summary: "swarm membership (operator token; join and refresh take the invite secret)",
  commands: [scope, invite, members, grant, migrateState, migrateQueue, migrateDead, join, refresh],
};
