import { readFile } from "node:fs/promises";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  AckResponseSchema,
  ClaimResponseSchema,
  FollowResponseSchema,
  GetRegistryResponseSchema,
  InspectGroupResponseSchema,
  LaneService,
  NackResponseSchema,
  PublishResponseSchema,
  RecordKind,
  RecoverGroupResponseSchema,
  RenewResponseSchema,
  ReplayResponseSchema,
  ExpiredDeliverySchema,
} from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { parseGoDuration, nanosToMillis } from "../config/index.js";
import { parseCommand, parseUint, positionals, printLine, printMessage, UsageError, withClient, type CliIo } from "./command.js";
import type { CommandGroup, CommandSpec } from "./command-group.js";

/**
 * `laneway lanes …`: the project API of durable lanes on the generated
 * client. The token is a project token (default variable LANEWAY_TOKEN).
 * Receipts are bearer secrets, so ack/nack/renew read them from the
 * variable LANEWAY_RECEIPT unless --receipt is given.
 */

function receiptOf(values: { receipt?: string }, io: CliIo): string {
  const receipt = values.receipt ?? io.env.LANEWAY_RECEIPT;
  if (!receipt) throw new UsageError("a receipt is required: set LANEWAY_RECEIPT or pass --receipt");
  return receipt;
}

function durationMs(name: string, value: string | undefined): number {
  if (value === undefined) return 0;
  try {
    return nanosToMillis(parseGoDuration(value));
  } catch {
    throw new UsageError(`--${name} must be a duration such as 10s`);
  }
}

const registry: CommandSpec = {
  name: "registry",
  usage: "registry",
  summary: "the lanes and capabilities of the calling project",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    positionals(rest, []);
    const res = await withClient(LaneService, values, io, (c) => c.getRegistry({}, { signal: io.signal }));
    printMessage(io, GetRegistryResponseSchema, res);
  },
};

const publish: CommandSpec = {
  name: "publish",
  usage: "publish <lane> --id ID --kind event|work --schema S (--payload TEXT | --payload-file F) [--provenance URI]",
  summary: "durably publish an event or a work record",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {
      id: { type: "string" },
      kind: { type: "string" },
      schema: { type: "string" },
      payload: { type: "string" },
      "payload-file": { type: "string" },
      provenance: { type: "string" },
    });
    const [lane] = positionals(rest, ["lane"]);
    if (!values.id || !values.schema) throw new UsageError("--id and --schema are required");
    const kind = values.kind === "event" ? RecordKind.EVENT : values.kind === "work" ? RecordKind.WORK : undefined;
    if (kind === undefined) throw new UsageError("--kind must be event or work");
    if ((values.payload === undefined) === (values["payload-file"] === undefined)) {
      throw new UsageError("give exactly one of --payload and --payload-file");
    }
    const payload = values["payload-file"] !== undefined ? await readFile(values["payload-file"]) : Buffer.from(values.payload!, "utf8");
    const res = await withClient(LaneService, values, io, (c) =>
      c.publish({ lane, id: values.id!, kind, schema: values.schema!, payload, provenance: values.provenance ?? "" }, { signal: io.signal }),
    );
    printMessage(io, PublishResponseSchema, res);
  },
};

const replay: CommandSpec = {
  name: "replay",
  usage: "replay <lane> [--cursor N] [--max-events N]",
  summary: "one page of events after a cursor",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { cursor: { type: "string" }, "max-events": { type: "string" } });
    const [lane] = positionals(rest, ["lane"]);
    const res = await withClient(LaneService, values, io, (c) =>
      c.replay(
        { lane, cursor: parseUint("cursor", values.cursor, 0n), maxEvents: Number(parseUint("max-events", values["max-events"], 0n)) },
        { signal: io.signal },
      ),
    );
    printMessage(io, ReplayResponseSchema, res);
  },
};

const follow: CommandSpec = {
  name: "follow",
  usage: "follow <lane> [--cursor N]",
  summary: "tail a lane's events (one JSON page per line) until interrupted",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { cursor: { type: "string" } });
    const [lane] = positionals(rest, ["lane"]);
    await withClient(LaneService, values, io, async (c) => {
      for await (const page of c.follow({ lane, cursor: parseUint("cursor", values.cursor, 0n) }, { signal: io.signal })) {
        printLine(io, FollowResponseSchema, page);
      }
    });
  },
};

const claim: CommandSpec = {
  name: "claim",
  usage: "claim <lane> <group> [--wait 10s]",
  summary: "lease the next work record of a group (empty output field when none)",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, { wait: { type: "string" } });
    const [lane, group] = positionals(rest, ["lane", "group"]);
    const waitMs = durationMs("wait", values.wait);
    const res = await withClient(LaneService, values, io, (c) => c.claim({ lane, group, wait: durationFromMs(waitMs) }, { signal: io.signal }));
    printMessage(io, ClaimResponseSchema, res);
  },
};

function receiptCommand(name: "renew" | "ack" | "nack", summary: string): CommandSpec {
  const usage = `${name} <lane> <group> --sequence N [--receipt R]`;
  return {
    name,
    usage,
    summary,
    async run(args, io) {
      const { values, positionals: rest } = parseCommand(args, { sequence: { type: "string" }, receipt: { type: "string" } });
      const [lane, group] = positionals(rest, ["lane", "group"]);
      const req = { lane, group, sequence: parseUint("sequence", values.sequence), receipt: receiptOf(values, io) };
      await withClient(LaneService, values, io, async (c) => {
        if (name === "renew") printMessage(io, RenewResponseSchema, await c.renew(req, { signal: io.signal }));
        else if (name === "ack") printMessage(io, AckResponseSchema, await c.ack(req, { signal: io.signal }));
        else printMessage(io, NackResponseSchema, await c.nack(req, { signal: io.signal }));
      });
    },
  };
}

const inspect: CommandSpec = {
  name: "inspect",
  usage: "inspect <lane> <group>",
  summary: "the persisted ledger of a work group",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {});
    const [lane, group] = positionals(rest, ["lane", "group"]);
    printMessage(io, InspectGroupResponseSchema, await withClient(LaneService, values, io, (c) => c.inspectGroup({ lane, group }, { signal: io.signal })));
  },
};

const recover: CommandSpec = {
  name: "recover",
  usage: "recover <lane> <group> --id ID --revision N --cursor-through N [--expired SEQ:RECEIPT]... [--missing SEQ]...",
  summary: "explicitly accept an expired gap of a group",
  async run(args, io) {
    const { values, positionals: rest } = parseCommand(args, {
      id: { type: "string" },
      revision: { type: "string" },
      "cursor-through": { type: "string" },
      expired: { type: "string", multiple: true },
      missing: { type: "string", multiple: true },
    });
    const [lane, group] = positionals(rest, ["lane", "group"]);
    if (!values.id) throw new UsageError("--id is required");
    const expired = (values.expired ?? []).map((entry) => {
      const match = /^(\d{1,20}):([0-9a-f]{64})$/.exec(entry);
      if (!match) throw new UsageError("--expired takes SEQUENCE:RECEIPT (64 lowercase hex characters)");
      return create(ExpiredDeliverySchema, { sequence: BigInt(match[1]!), receipt: match[2]! });
    });
    const missing = (values.missing ?? []).map((m) => parseUint("missing", m));
    const res = await withClient(LaneService, values, io, (c) =>
      c.recoverGroup(
        {
          lane,
          group,
          id: values.id!,
          revision: parseUint("revision", values.revision),
          cursorThrough: parseUint("cursor-through", values["cursor-through"]),
          expired,
          missing,
        },
        { signal: io.signal },
      ),
    );
    printMessage(io, RecoverGroupResponseSchema, res);
  },
};

export const lanesCommands: CommandGroup = {
  name: "lanes",
  summary: "durable lanes (project token)",
  commands: [
    registry,
    publish,
    replay,
    follow,
    claim,
    receiptCommand("renew", "extend a work lease"),
    receiptCommand("ack", "complete a claimed record"),
    receiptCommand("nack", "release a claimed record for a later retry"),
    inspect,
    recover,
  ],
};
