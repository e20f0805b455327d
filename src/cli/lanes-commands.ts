import { readFile } from "node:fs/promises";
import { fromJson, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { BatchRecordSchema, LaneRecordSchema, LaneService, RecordKind, type BatchRecord } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { spawn } from "node:child_process";
import { IDENTIFIER_PATTERN, lanesBrokerPermissions } from "../lanes/index.js";
import { Participant, type ClaimedWork } from "../participant/index.js";
import { ConnectError } from "@connectrpc/connect";
import { describeFailure, parseCommand, parseUint, positionals, UsageError, withClient } from "./command.js";
import type { CommandGroup, CommandSpec } from "./command-group.js";
import { rpcCommand, type RpcInput } from "./rpc-command.js";

/**
 * `laneway lanes …`: the project API of durable lanes on the generated
 * client. The token is a project token (default variable LANEWAY_TOKEN).
 * Receipts are bearer secrets, so ack/nack/renew read them from the
 * variable LANEWAY_RECEIPT unless --receipt is given.
 */

const method = LaneService.method;

/** The cursor last printed by each running follow command (printed again only when it moves). */
const lastCursor = new WeakMap<RpcInput, bigint>();

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** One line of a publish-batch file; `kind` may be written `event`/`work` or as the enum name. */
function batchRecord(line: string, n: number): BatchRecord {
  let value: Record<string, unknown>;
  try {
    value = JSON.parse(line) as Record<string, unknown>;
  } catch {
    throw new UsageError(`line ${n} of the batch file is not JSON`);
  }
  if (value.kind === "event") value.kind = "RECORD_KIND_EVENT";
  if (value.kind === "work") value.kind = "RECORD_KIND_WORK";
  try {
    return fromJson(BatchRecordSchema, value as JsonValue);
  } catch {
    throw new UsageError(`line ${n} of the batch file is not a record: it needs id, kind, schema and a base64 payload`);
  }
}

function receiptOf(input: RpcInput): string {
  const receipt = input.string("receipt") ?? input.io.env.LANEWAY_RECEIPT;
  if (!receipt) throw new UsageError("a receipt is required: set LANEWAY_RECEIPT or pass --receipt");
  return receipt;
}

/** A `SEQUENCE:RECEIPT` entry (--ack, --expired); a malformed one is a usage error that never echoes it. */
function sequenceReceipt(entry: string, takes: string): { sequence: bigint; receipt: string } {
  const match = /^(\d{1,20}):([0-9a-f]{64})$/.exec(entry);
  if (!match) throw new UsageError(`${takes} SEQUENCE:RECEIPT (64 lowercase hex characters)`);
  return { sequence: BigInt(match[1]!), receipt: match[2]! };
}

function receiptCommand(m: typeof method.renew | typeof method.ack | typeof method.nack, summary: string): CommandSpec {
  return rpcCommand({
    method: m,
    usage: `${m.localName} <lane> <group> --sequence N [--receipt R]`,
    summary,
    args: ["lane", "group"],
    options: { sequence: { type: "string" }, receipt: { type: "string" } },
    request: (i) => ({ lane: i.arg("lane"), group: i.arg("group"), sequence: i.uint("sequence"), receipt: receiptOf(i) }),
  });
}

/**
 * `laneway lanes work`: a participant that runs a command per claimed
 * record, with the payload on its stdin: exit 0 acks, anything else nacks.
 * Only records of the accepted (schema, publisher) pairs run; others are
 * nacked unexecuted.
 */
const work: CommandSpec = {
  name: "work",
  usage: "work <lane> --group G --accept SCHEMA:PUBLISHER... [--concurrency N] -- <command> [args...]\n(the record arrives on stdin; LANEWAY_WORK_ID, _SEQUENCE, _PUBLISHER, _SCHEMA, _ATTEMPT are set)",
  summary: "run a command for every claimed record: exit 0 acks it, anything else nacks it",
  async run(args, io) {
    const dash = args.indexOf("--");
    if (dash === -1 || dash === args.length - 1) throw new UsageError("give the command to run after --");
    const command = args.slice(dash + 1);
    const { values, positionals: rest } = parseCommand(args.slice(0, dash), {
      group: { type: "string" },
      accept: { type: "string", multiple: true },
      concurrency: { type: "string" },
    });
    const [lane] = positionals(rest, ["lane"]);
    if (!values.group) throw new UsageError("--group is required");
    const accepted = (values.accept ?? []).map((pair) => {
      const match = /^([a-z][a-z0-9_-]*):([a-z][a-z0-9_-]*)$/.exec(pair);
      if (!match) throw new UsageError("--accept takes SCHEMA:PUBLISHER (identifiers)");
      return { schema: match[1]!, publisher: match[2]! };
    });
    if (accepted.length === 0) throw new UsageError("give at least one --accept SCHEMA:PUBLISHER: work is only run for what you accept");
    const concurrency = Number(parseUint("concurrency", values.concurrency, 4n));
    if (concurrency < 1 || concurrency > 256) throw new UsageError("--concurrency must be 1 to 256");
    await withClient(LaneService, values, io, async (client) => {
      const participant = new Participant({
        client,
        lane: lane!,
        group: values.group!,
        concurrency,
        waitMs: 5_000,
        onError: (error) => io.stderr(`lanes work: ${error instanceof ConnectError ? describeFailure(error) : (error as Error).message}\n`),
      });
      const runCommand = (claimed: ClaimedWork, signal: AbortSignal) =>
        new Promise<void>((resolve, reject) => {
          const child = spawn(command[0]!, command.slice(1), {
            stdio: ["pipe", "inherit", "inherit"],
            env: {
              ...io.env,
              LANEWAY_WORK_ID: claimed.id,
              LANEWAY_WORK_SEQUENCE: String(claimed.sequence),
              LANEWAY_WORK_PUBLISHER: claimed.project,
              LANEWAY_WORK_SCHEMA: claimed.schema,
              LANEWAY_WORK_ATTEMPT: String(claimed.attempt),
            },
          });
          const onAbort = () => child.kill("SIGTERM");
          signal.addEventListener("abort", onAbort, { once: true });
          child.on("error", reject);
          child.on("exit", (code) => {
            signal.removeEventListener("abort", onAbort);
            if (code === 0) resolve();
            else reject(new Error(`the command exited with ${code}`));
          });
          child.stdin.on("error", () => {});
          child.stdin.end(claimed.payload);
        });
      for (const { schema, publisher } of accepted) participant.handle(schema, publisher, runCommand);
      let last = "";
      const progress = setInterval(() => {
        const { claimed, acked, nacked, inFlight } = participant.stats;
        const line = `lanes work: claimed ${claimed}, acked ${acked}, nacked ${nacked}, in flight ${inFlight}`;
        if (line !== last) io.stderr(`${line}\n`);
        last = line;
      }, 1_000);
      const stop = () => void participant.stop();
      io.signal.addEventListener("abort", stop, { once: true });
      try {
        await participant.run();
      } finally {
        clearInterval(progress);
        io.signal.removeEventListener("abort", stop);
        const { claimed, acked, nacked } = participant.stats;
        io.stderr(`lanes work: stopped after claimed ${claimed}, acked ${acked}, nacked ${nacked}\n`);
      }
    });
  },
};

/**
 * `laneway lanes broker-permissions <namespace>`: what Laneway's own NATS
 * credential needs on a server it does not run (docs/operations.md), with
 * the namespace's real stream and bucket names; offline, no token.
 */
const brokerPermissions: CommandSpec = {
  name: "broker-permissions",
  usage: "broker-permissions <namespace>\n(offline: prints the NATS publish and subscribe permissions Laneway's credential needs for this namespace, as JSON)",
  summary: "the NATS permissions Laneway itself needs on an external server",
  async run(args, io) {
    const { positionals: rest } = parseCommand(args, {});
    const [namespace] = positionals(rest, ["namespace"]);
    if (!IDENTIFIER_PATTERN.test(namespace!)) throw new UsageError("the namespace is an identifier: a lowercase letter, then lowercase letters, digits, '-' and '_'");
    const { publish, subscribe } = lanesBrokerPermissions(namespace!);
    io.stdout(`${JSON.stringify({ publish: { allow: publish }, subscribe: { allow: subscribe } }, null, 2)}\n`);
  },
};

export const lanesCommands: CommandGroup = {
  name: "lanes",
  summary: "durable lanes (project token)",
  commands: [
    rpcCommand({
      method: method.getRegistry,
      usage: "registry",
      summary: "the lanes and capabilities of the calling project",
      request: () => ({}),
    }),
    rpcCommand({
      method: method.publish,
      usage: "publish <lane> --id ID --kind event|work --schema S (--payload TEXT | --payload-file F) [--provenance URI]",
      summary: "durably publish an event or a work record",
      args: ["lane"],
      options: {
        id: { type: "string" },
        kind: { type: "string" },
        schema: { type: "string" },
        payload: { type: "string" },
        "payload-file": { type: "string" },
        provenance: { type: "string" },
      },
      async request(i) {
        const kinds: Record<string, RecordKind> = { event: RecordKind.EVENT, work: RecordKind.WORK };
        const kind = kinds[i.string("kind") ?? ""];
        if (kind === undefined) throw new UsageError("--kind must be event or work");
        const text = i.string("payload");
        const file = i.string("payload-file");
        if ((text === undefined) === (file === undefined)) throw new UsageError("give exactly one of --payload and --payload-file");
        const payload = file !== undefined ? await readFile(file) : Buffer.from(text!, "utf8");
        return { lane: i.arg("lane"), id: i.required("id"), kind, schema: i.required("schema"), payload, provenance: i.string("provenance") ?? "" };
      },
    }),
    rpcCommand({
      method: method.replay,
      usage: "replay <lane> [--cursor N] [--max-events N]",
      summary: "one page of events after a cursor",
      args: ["lane"],
      options: { cursor: { type: "string" }, "max-events": { type: "string" } },
      request: (i) => ({ lane: i.arg("lane"), cursor: i.uint("cursor", 0n), maxEvents: Number(i.uint("max-events", 0n)) }),
    }),
    rpcCommand({
      method: method.publishBatch,
      usage: "publish-batch <lane> --file F\n(F: one record per line in JSON, {\"id\":…,\"kind\":\"event\"|\"work\",\"schema\":…,\"payload\":\"<base64>\",\"provenance\":…}; - reads stdin)",
      summary: "publish up to 128 records in one call; each has its own result",
      args: ["lane"],
      options: { file: { type: "string" } },
      async request(i) {
        const path = i.required("file");
        const text = path === "-" ? await readStdin() : await readFile(path, "utf8");
        const records = text
          .split("\n")
          .map((line, n) => [line.trim(), n + 1] as const)
          .filter(([line]) => line !== "")
          .map(([line, n]) => batchRecord(line, n));
        return { lane: i.arg("lane"), records };
      },
    }),
    rpcCommand({
      method: method.follow,
      usage: "follow <lane> [--cursor N]",
      summary: 'tail a lane until interrupted: one JSON line per event, then {"cursor":…} to save after processing it',
      args: ["lane"],
      options: { cursor: { type: "string" } },
      request: (i) => ({ lane: i.arg("lane"), cursor: i.uint("cursor", 0n) }),
      handle(page, i) {
        for (const event of page.events) i.io.stdout(`${toJsonString(LaneRecordSchema, event)}\n`);
        if (page.events.length > 0 || page.cursor !== lastCursor.get(i)) i.io.stdout(`${JSON.stringify({ cursor: String(page.cursor) })}\n`);
        lastCursor.set(i, page.cursor);
      },
    }),
    rpcCommand({
      method: method.claim,
      usage: "claim <lane> <group> [--wait 10s]",
      summary: "lease the next work record of a group (empty output field when none)",
      args: ["lane", "group"],
      options: { wait: { type: "string" } },
      request: (i) => ({ lane: i.arg("lane"), group: i.arg("group"), wait: durationFromMs(i.durationMs("wait")) }),
    }),
    rpcCommand({
      method: method.claimBatch,
      usage:
        "claim-batch <lane> <group> [--max N] [--wait 10s] [--ack SEQ:RECEIPT]...\n(--ack, or LANEWAY_ACKS with SEQ:RECEIPT entries separated by spaces: completed first, in the same call, which then does not wait)",
      summary: "lease up to N (1 to 64) work records of a group at once, after acknowledging the given ones",
      args: ["lane", "group"],
      options: { max: { type: "string" }, wait: { type: "string" }, ack: { type: "string", multiple: true } },
      request(i) {
        const given = i.list("ack");
        const entries = given.length > 0 ? given : (i.io.env.LANEWAY_ACKS ?? "").split(/\s+/).filter((e) => e !== "");
        const acks = entries.map((entry) => sequenceReceipt(entry, "--ack and LANEWAY_ACKS take"));
        return { lane: i.arg("lane"), group: i.arg("group"), maxRecords: Number(i.uint("max", 64n)), wait: durationFromMs(i.durationMs("wait")), acks };
      },
    }),
    receiptCommand(method.renew, "extend a work lease"),
    receiptCommand(method.ack, "complete a claimed record"),
    receiptCommand(method.nack, "release a claimed record for a later retry"),
    work,
    brokerPermissions,
    rpcCommand({
      method: method.inspectGroup,
      usage: "inspect <lane> <group>",
      summary: "the persisted ledger of a work group",
      args: ["lane", "group"],
      request: (i) => ({ lane: i.arg("lane"), group: i.arg("group") }),
    }),
    rpcCommand({
      method: method.recoverGroup,
      usage: "recover <lane> <group> --id ID --revision N --cursor-through N [--expired SEQ:RECEIPT]... [--missing SEQ]...",
      summary: "explicitly accept an expired gap of a group",
      args: ["lane", "group"],
      options: {
        id: { type: "string" },
        revision: { type: "string" },
        "cursor-through": { type: "string" },
        expired: { type: "string", multiple: true },
        missing: { type: "string", multiple: true },
      },
      request(i) {
        const expired = i.list("expired").map((entry) => sequenceReceipt(entry, "--expired takes"));
        const missing = i.list("missing").map((m) => {
          if (!/^\d{1,20}$/.test(m)) throw new UsageError("--missing must be a non-negative integer");
          return BigInt(m);
        });
        return {
          lane: i.arg("lane"),
          group: i.arg("group"),
          id: i.required("id"),
          revision: i.uint("revision"),
          cursorThrough: i.uint("cursor-through"),
          expired,
          missing,
        };
      },
    }),
  ],
};
