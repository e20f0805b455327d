import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import type { CommandGroup } from "./command-group.js";
import { rpcCommand } from "./rpc-command.js";

/**
 * `laneway hive …`: the hive hub operator's commands (operator token) and
 * a member's join and refresh (invite secret as the token).
 */

const hub = HiveHubService.method;
const member = HiveMemberService.method;

export const hiveCommands: CommandGroup = {
  name: "hive",
  summary: "swarm membership (operator token; join and refresh take the invite secret)",
  commands: [
    rpcCommand({
      method: hub.scope,
      usage: "scope [--swarm S]...",
      summary: "create member_swarms and list every member with the swarms (all swarms when none given)",
      options: { swarm: { type: "string", multiple: true } },
      request: (i) => ({ swarms: i.list("swarm") }),
    }),
    rpcCommand({
      method: hub.invite,
      usage: "invite <member> [--bus-url URL]",
      summary: "register a member and print its invite (shown once)",
      args: ["member"],
      options: { "bus-url": { type: "string" } },
      request: (i) => ({ memberId: i.arg("member"), busUrl: i.string("bus-url") ?? "" }),
    }),
    rpcCommand({ method: hub.listMembers, usage: "members", summary: "every member with its scope", request: () => ({}) }),
    rpcCommand({
      method: hub.renderGrant,
      usage: "grant <member>",
      summary: "the NATS permissions a member's next credential would carry",
      args: ["member"],
      request: (i) => ({ memberId: i.arg("member") }),
    }),
    rpcCommand({
      method: hub.migrateState,
      usage: "migrate-state <swarm> <bucket> <key>...",
      summary: "move retained revisions of keys from a legacy KV bucket into the swarm's state stream",
      args: ["swarm", "bucket", "key..."],
      request: (i) => ({ swarm: i.arg("swarm"), bucket: i.arg("bucket"), keys: [...i.rest()] }),
    }),
    rpcCommand({
      method: hub.migrateQueue,
      usage: "migrate-queue <swarm> <queue> [--max-deliver N] [--ack-wait D]",
      summary: "move undelivered work of a legacy lane queue into the swarm's queue",
      args: ["swarm", "queue"],
      options: { "max-deliver": { type: "string" }, "ack-wait": { type: "string" } },
      request(i) {
        const ackWaitMs = i.durationMs("ack-wait");
        const policy = { maxDeliver: Number(i.uint("max-deliver", 0n)), ...(ackWaitMs > 0 ? { ackWait: durationFromMs(ackWaitMs) } : {}) };
        return { swarm: i.arg("swarm"), name: i.arg("queue"), policy };
      },
    }),
    rpcCommand({
      method: hub.migrateDead,
      usage: "migrate-dead <swarm>",
      summary: "copy a swarm's letters from the shared dead letter stream into its own",
      args: ["swarm"],
      request: (i) => ({ swarm: i.arg("swarm") }),
    }),
    rpcCommand({
      method: member.join,
      usage: "join",
      summary: "as a member (invite secret as the token): mint the first credential",
      request: () => ({}),
    }),
    rpcCommand({
      method: member.refresh,
      usage: "refresh",
      summary: "as a member: mint a new credential from the current signer record",
      request: () => ({}),
    }),
  ],
};
