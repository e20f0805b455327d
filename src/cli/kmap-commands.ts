import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { CommandSchema, CommandState, CommandRecordSchema, type Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { KmapCommandService, SubmitCommandResponseSchema } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { verifyTransaction } from "../client/verify-transaction.js";
import { OutcomeError, parseCommand, positionals, printMessage, UsageError, withClient } from "./command.js";
import type { CommandGroup, CommandSpec } from "./command-group.js";
import { rpcCommand, type RpcInput } from "./rpc-command.js";

/**
 * `laneway kmap …`: administrator commands of the Kmap command lane and
 * reads of the Kmap, on the generated client with the operator token
 * (default variable LANEWAY_TOKEN; `--token-env LANEWAY_ADMIN_TOKEN` reads
 * the operator token directly).
 */

function keyValues(option: string, entries: readonly string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of entries ?? []) {
    const at = entry.indexOf("=");
    if (at <= 0) throw new UsageError(`--${option} takes KEY=VALUE`);
    out[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return out;
}

const operationUsage = [
  "create-node --kind K --title T [--body B] [--attr KEY=VALUE]... [--parent NODE]",
  "update-node NODE [--kind K] [--title T] [--body B] [--set KEY=VALUE]... [--remove KEY]...",
  "delete-node NODE",
  "link FROM TO --type T",
  "unlink FROM TO --type T",
  "move NODE [--parent NODE]",
];

/** Builds the typed command from the operation's words and options. */
function commandOf(operation: string | undefined, args: readonly string[], values: Record<string, string | boolean | string[] | undefined>): Command {
  const str = (name: string) => values[name] as string | undefined;
  const list = (name: string) => values[name] as string[] | undefined;
  const need = (name: string) => {
    const value = str(name);
    if (value === undefined) throw new UsageError(`--${name} is required for ${operation}`);
    return value;
  };
  switch (operation) {
    case "create-node": {
      positionals(args, []);
      return create(CommandSchema, {
        operation: {
          case: "createNode",
          value: { kind: need("kind"), title: need("title"), body: str("body") ?? "", attributes: keyValues("attr", list("attr")), parentId: str("parent") ?? "" },
        },
      });
    }
    case "update-node": {
      const [nodeId] = positionals(args, ["node"]);
      return create(CommandSchema, {
        operation: {
          case: "updateNode",
          value: {
            nodeId: nodeId!,
            ...(str("kind") !== undefined ? { kind: str("kind") } : {}),
            ...(str("title") !== undefined ? { title: str("title") } : {}),
            ...(str("body") !== undefined ? { body: str("body") } : {}),
            setAttributes: keyValues("set", list("set")),
            removeAttributes: list("remove") ?? [],
          },
        },
      });
    }
    case "delete-node": {
      const [nodeId] = positionals(args, ["node"]);
      return create(CommandSchema, { operation: { case: "deleteNode", value: { nodeId: nodeId! } } });
    }
    case "link":
    case "unlink": {
      const [fromId, toId] = positionals(args, ["from", "to"]);
      const value = { fromId: fromId!, toId: toId!, linkType: need("type") };
      return create(CommandSchema, { operation: operation === "link" ? { case: "linkNodes", value } : { case: "unlinkNodes", value } });
    }
    case "move": {
      const [nodeId] = positionals(args, ["node"]);
      return create(CommandSchema, { operation: { case: "moveNode", value: { nodeId: nodeId!, newParentId: str("parent") ?? "" } } });
    }
    default:
      throw new UsageError(`the operation must be one of: ${operationUsage.map((u) => u.split(" ")[0]).join(", ")}`);
  }
}

const submit: CommandSpec = {
  name: "submit",
  usage: `submit <operation> ... [--id ID] [--expect NODE=TRANSACTION]... [--wait]\noperations:\n${operationUsage.map((u) => `  ${u}`).join("\n")}`,
  summary: "queue a command; --wait follows it to Committed or Failed",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {
      id: { type: "string" },
      expect: { type: "string", multiple: true },
      wait: { type: "boolean" },
      kind: { type: "string" },
      title: { type: "string" },
      body: { type: "string" },
      attr: { type: "string", multiple: true },
      parent: { type: "string" },
      set: { type: "string", multiple: true },
      remove: { type: "string", multiple: true },
      type: { type: "string" },
    });
    const [operation, ...operands] = rest;
    const command = commandOf(operation, operands, values);
    const idempotencyId = values.id ?? randomBytes(16).toString("hex");
    const expectedTransactionIds = keyValues("expect", values.expect);
    await withClient(KmapCommandService, values, io, async (client) => {
      const submitted = await client.submitCommand({ idempotencyId, command, expectedTransactionIds }, { signal: io.signal });
      if (!values.wait) {
        printMessage(io, SubmitCommandResponseSchema, submitted);
        return;
      }
      let record = submitted.record!;
      const done = (r: typeof record) => r.state === CommandState.COMMITTED || r.state === CommandState.FAILED;
      if (!done(record)) {
        for await (const change of client.watchCommands({ afterPosition: submitted.position - 1n, idempotencyId }, { signal: io.signal })) {
          record = change.record!;
          if (done(record)) break;
        }
      }
      printMessage(io, CommandRecordSchema, record);
      if (!done(record)) {
        throw new OutcomeError(`the server ended the watch before command ${idempotencyId} finished; follow it with: laneway kmap watch --id ${idempotencyId}`);
      }
      if (record.state === CommandState.FAILED) throw new OutcomeError(`command ${idempotencyId} failed: ${record.error?.code}: ${record.error?.message}`);
    });
  },
};

const stateNames: Record<string, CommandState> = {
  queued: CommandState.QUEUED,
  applying: CommandState.APPLYING,
  committed: CommandState.COMMITTED,
  failed: CommandState.FAILED,
};

const commandMethods = KmapCommandService.method;
const readMethods = KmapReadService.method;
const paging = { "page-size": { type: "string" }, "page-token": { type: "string" } } as const;
const page = (i: RpcInput) => ({ pageSize: Number(i.uint("page-size", 0n)), pageToken: i.string("page-token") ?? "" });

const reads: CommandSpec[] = [
  rpcCommand({
    method: commandMethods.getCommand,
    usage: "get <idempotency-id>",
    summary: "one command record",
    args: ["idempotency-id"],
    request: (i) => ({ idempotencyId: i.arg("idempotency-id") }),
  }),
  rpcCommand({
    method: commandMethods.listCommands,
    usage: "list [--state queued|applying|committed|failed] [--page-size N] [--page-token T]",
    summary: "command records in submission order, one page",
    options: { state: { type: "string" }, ...paging },
    request(i) {
      const name = i.string("state");
      const state = name === undefined ? CommandState.UNSPECIFIED : stateNames[name];
      if (state === undefined) throw new UsageError("--state must be queued, applying, committed or failed");
      return { state, ...page(i) };
    },
  }),
  rpcCommand({
    method: commandMethods.watchCommands,
    usage: "watch [--after POSITION] [--id IDEMPOTENCY-ID]",
    summary: "every record change after a position, one JSON line each, until interrupted",
    options: { after: { type: "string" }, id: { type: "string" } },
    request: (i) => ({ afterPosition: i.uint("after", 0n), idempotencyId: i.string("id") ?? "" }),
  }),
  rpcCommand({
    method: readMethods.listNodes,
    usage: "nodes [--parent NODE] [--page-size N] [--page-token T]",
    summary: "Kmap nodes ordered by id, one page",
    options: { parent: { type: "string" }, ...paging },
    request: (i) => ({ parentId: i.string("parent") ?? "", ...page(i) }),
  }),
  rpcCommand({
    method: readMethods.getNode,
    usage: "node <node-id>",
    summary: "one node with its links and visible transaction id",
    args: ["node-id"],
    request: (i) => ({ nodeId: i.arg("node-id") }),
  }),
  rpcCommand({
    method: readMethods.listTransactions,
    usage: "transactions [--node NODE] [--provenance IDEMPOTENCY-ID] [--page-size N] [--page-token T]",
    summary: "signed transactions in commit order, one page",
    options: { node: { type: "string" }, provenance: { type: "string" }, ...paging },
    request: (i) => ({ nodeId: i.string("node") ?? "", provenance: i.string("provenance") ?? "", ...page(i) }),
  }),
  rpcCommand({
    method: readMethods.getSigningKey,
    usage: "key",
    summary: "the Ed25519 public key that signs transactions",
    request: () => ({}),
  }),
];

const verify: CommandSpec = {
  name: "verify",
  usage: "verify <transaction-id>",
  summary: "check a transaction's signature and fields against the served public key",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    const [transactionId] = positionals(rest, ["transaction-id"]);
    await withClient(KmapReadService, values, io, async (c) => {
      const [{ transaction }, signingKey] = await Promise.all([
        c.getTransaction({ transactionId: transactionId! }, { signal: io.signal }),
        c.getSigningKey({}, { signal: io.signal }),
      ]);
      const problem = verifyTransaction(transaction!, signingKey.publicKey);
      if (problem) throw new OutcomeError(`transaction ${transactionId} does not verify: ${problem}`);
      io.stdout(`transaction ${transactionId} verifies with key ${signingKey.keyId}\n`);
    });
  },
};

export const kmapCommands: CommandGroup = {
  name: "kmap",
  summary: "the Kmap command lane (operator token)",
  commands: [submit, ...reads, verify],
};

