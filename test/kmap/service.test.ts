import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ViolationsSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { CommandSchema, CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CommandEventKind, KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { wireProtocols, type WireProtocol } from "../../src/client/transport.js";
import { verifyTransaction } from "../../src/client/verify-transaction.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The Kmap RPCs through the generated client on every transport: submit,
 * follow a command to its outcome with the change stream, get, list in
 * pages, read nodes and history, verify signatures with the served key;
 * and the error mapping of each failure.
 */

let laneway: InProcessLaneway;

beforeAll(async () => {
  laneway = await startLanewayInProcess();
});

afterAll(async () => {
  await laneway?.stop();
});

function clients(protocol: WireProtocol, token = laneway.tokens.admin) {
  return {
    commands: laneway.clients.client(KmapCommandService, { token, protocol }),
    reads: laneway.clients.client(KmapReadService, { token, protocol }),
  };
}

const newId = () => randomBytes(16).toString("hex");

async function failure(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("the call succeeded but was expected to fail");
}

/** Submits and follows the command through the change stream to its outcome. */
async function submitAndFollow(protocol: WireProtocol, command: Parameters<typeof create<typeof CommandSchema>>[1], expected: Record<string, string> = {}) {
  const { commands } = clients(protocol);
  const idempotencyId = newId();
  const submitted = await commands.submitCommand({ idempotencyId, command: create(CommandSchema, command), expectedTransactionIds: expected });
  const kinds: CommandEventKind[] = [];
  let record: CommandRecord | undefined;
  for await (const change of commands.watchCommands({ afterPosition: submitted.position - 1n, idempotencyId })) {
    kinds.push(change.kind);
    record = change.record;
    if (record?.state === CommandState.COMMITTED || record?.state === CommandState.FAILED) break;
  }
  return { submitted, kinds, record: record! };
}

describe.each(wireProtocols)("over %s", (protocol) => {
  test("a command is queued, followed to Committed, and signed in the history", async () => {
    const { submitted, kinds, record } = await submitAndFollow(protocol, {
      operation: { case: "createNode", value: { kind: "topic", title: "Rivers", attributes: { region: "alps" } } },
    });
    expect(submitted.record?.state).toBe(CommandState.QUEUED);
    expect(submitted.existing).toBe(false);
    expect(kinds).toEqual([CommandEventKind.QUEUED, CommandEventKind.APPLYING, CommandEventKind.COMMITTED]);
    expect(record.transactionId).toMatch(/^[0-9a-f]{32}$/);

    const { reads, commands } = clients(protocol);
    const { node } = await reads.getNode({ nodeId: record.createdNodeId });
    expect(node).toMatchObject({ kind: "topic", title: "Rivers", attributes: { region: "alps" }, visibleTransactionId: record.transactionId });
    const { transactions } = await reads.listTransactions({ provenance: record.submission!.idempotencyId });
    expect(transactions.map((t) => t.id)).toEqual([record.transactionId]);
    const key = await reads.getSigningKey({});
    expect(key.algorithm).toBe("ed25519");
    expect(verifyTransaction(transactions[0]!, key.publicKey)).toBeUndefined();

    const again = await commands.submitCommand({
      idempotencyId: record.submission!.idempotencyId,
      command: record.submission!.command!,
      expectedTransactionIds: {},
    });
    expect(again.existing).toBe(true);
    expect(again.record?.sequence).toBe(record.sequence);
  });

  test("a tampered transaction does not verify", async () => {
    const { record } = await submitAndFollow(protocol, { operation: { case: "createNode", value: { kind: "topic", title: "Lakes" } } });
    const { reads } = clients(protocol);
    const { transaction } = await reads.getTransaction({ transactionId: record.transactionId });
    const { publicKey } = await reads.getSigningKey({});
    const payload = Buffer.from(transaction!.signedPayload);
    const tampered = { ...transaction!, signedPayload: Buffer.from(payload.toString("utf8").replace("Lakes", "Lakez")) };
    expect(verifyTransaction(tampered, publicKey)).toBeDefined();
    const otherField = { ...transaction!, touchedNodeIds: ["0".repeat(32)] };
    expect(verifyTransaction(otherField, publicKey)).toBeDefined();
    const otherSignature = { ...transaction!, signature: new Uint8Array(64) };
    expect(verifyTransaction(otherSignature, publicKey)).toBeDefined();
  });

  test("expectations and graph rules are checked when the command applies", async () => {
    const parent = await submitAndFollow(protocol, { operation: { case: "createNode", value: { kind: "topic", title: "Parent" } } });
    const parentId = parent.record.createdNodeId;
    const child = await submitAndFollow(protocol, { operation: { case: "createNode", value: { kind: "topic", title: "Child", parentId } } });
    const childId = child.record.createdNodeId;

    const cycle = await submitAndFollow(protocol, { operation: { case: "moveNode", value: { nodeId: parentId, newParentId: childId } } });
    expect(cycle.record.state).toBe(CommandState.FAILED);
    expect(cycle.record.error).toMatchObject({ code: "invalid_input", message: `cannot move node ${parentId} under its own descendant ${childId}` });

    const stale = await submitAndFollow(
      protocol,
      { operation: { case: "updateNode", value: { nodeId: childId, title: "Renamed" } } },
      { [childId]: parent.record.transactionId },
    );
    expect(stale.record.state).toBe(CommandState.FAILED);
    expect(stale.record.error?.code).toBe("stale_revision");

    const fresh = await submitAndFollow(
      protocol,
      { operation: { case: "updateNode", value: { nodeId: childId, title: "Renamed" } } },
      { [childId]: child.record.transactionId },
    );
    expect(fresh.record.state).toBe(CommandState.COMMITTED);
    const { reads } = clients(protocol);
    const { nodes } = await reads.listNodes({ parentId });
    expect(nodes.map((n) => [n.id, n.title, n.visibleTransactionId])).toEqual([[childId, "Renamed", fresh.record.transactionId]]);
    const history = await reads.listTransactions({ nodeId: childId });
    expect(history.transactions.map((t) => t.id)).toEqual([child.record.transactionId, fresh.record.transactionId]);
  });

  test("failures map to the documented codes and reasons", async () => {
    const { commands, reads } = clients(protocol);
    const bad = await failure(() =>
      commands.submitCommand({ idempotencyId: "ABC", command: create(CommandSchema, { operation: { case: "deleteNode", value: { nodeId: "pending:x" } } }) }),
    );
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.findDetails(ErrorDetailSchema)[0]).toMatchObject({ reason: "invalid_input", domain: "kmap" });
    expect(bad.findDetails(ViolationsSchema)[0]?.violations.length).toBe(2);

    const id = newId();
    await commands.submitCommand({ idempotencyId: id, command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: "one" } } }) });
    const conflict = await failure(() =>
      commands.submitCommand({ idempotencyId: id, command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: "two" } } }) }),
    );
    expect(conflict.code).toBe(Code.Aborted);
    expect(conflict.findDetails(ErrorDetailSchema)[0]?.reason).toBe("conflict");
    expect(conflict.rawMessage).toBe(`idempotency_id ${id} was already used for a different submission`);

    const missing = await failure(() => commands.getCommand({ idempotencyId: "e".repeat(32) }));
    expect(missing.code).toBe(Code.NotFound);
    expect((await failure(() => reads.getNode({ nodeId: "e".repeat(32) }))).code).toBe(Code.NotFound);
    expect(missing.findDetails(ErrorDetailSchema)[0]).toMatchObject({ reason: "not_found", domain: "kmap" });
    expect((await failure(() => commands.listCommands({ pageToken: "not-a-token" }))).code).toBe(Code.InvalidArgument);

    const project = clients(protocol, laneway.tokens.atlas);
    expect((await failure(() => project.commands.listCommands({}))).code).toBe(Code.PermissionDenied);
    expect((await failure(() => project.reads.getSigningKey({}))).code).toBe(Code.PermissionDenied);
  });
});

test("listing pages through every record in submission order", async () => {
  const { commands } = clients("connect-binary");
  // Its own records, so the test does not depend on the others: ten creates
  // and one delete of a node that does not exist.
  for (let i = 0; i < 10; i++) await submitAndFollow("connect-binary", { operation: { case: "createNode", value: { kind: "topic", title: `page ${i}` } } });
  await submitAndFollow("connect-binary", { operation: { case: "deleteNode", value: { nodeId: "d".repeat(32) } } });
  const seen: bigint[] = [];
  let pageToken = "";
  do {
    const page = await commands.listCommands({ pageSize: 3, pageToken });
    expect(page.records.length).toBeLessThanOrEqual(3);
    seen.push(...page.records.map((r) => r.sequence));
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  expect(seen.length).toBeGreaterThan(10);
  expect(seen).toEqual(seen.map((_, i) => BigInt(i + 1)));
  const failed = await commands.listCommands({ state: CommandState.FAILED, pageSize: 1000 });
  expect(failed.records.length).toBeGreaterThan(0);
  expect(failed.records.every((r) => r.state === CommandState.FAILED)).toBe(true);
});

test("a watch ends normally when the server shuts down", async () => {
  const own = await startLanewayInProcess({ lanesConfig: false });
  const commands = own.clients.client(KmapCommandService, { token: own.tokens.admin, protocol: "grpc" });
  const positions: bigint[] = [];
  const watching = (async () => {
    for await (const change of commands.watchCommands({ afterPosition: 0n })) positions.push(change.position);
  })();
  await commands.submitCommand({ idempotencyId: newId(), command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: "x" } } }) });
  await waitFor(() => positions.length >= 3, { what: "the command's first three changes" });
  const report = await own.server.close();
  await watching;
  expect(report.ok).toBe(true);
  expect(positions).toEqual([1n, 2n, 3n]);
  await own.stop();
});

describe("every validation rule through the generated client", () => {
  const node = "0123456789abcdef0123456789abcdef";
  const tx = "00112233445566778899aabbccddeeff";
  const attributes = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, "v".repeat(4096)]));
  const cases: [string, { idempotencyId?: string; command?: Parameters<typeof create<typeof CommandSchema>>[1]; expected?: Record<string, string> }, RegExp][] = [
    ["an id that is too short", { idempotencyId: "a".repeat(31) }, /idempotency_id: must be 32 lowercase hexadecimal characters/],
    ["an id that is too long", { idempotencyId: "a".repeat(33) }, /idempotency_id: must be 32 lowercase hexadecimal characters/],
    ["an uppercase id", { idempotencyId: "A".repeat(32) }, /idempotency_id: must be 32 lowercase hexadecimal characters/],
    ["a non-hex id", { idempotencyId: "g".repeat(32) }, /idempotency_id: must be 32 lowercase hexadecimal characters/],
    ["a pending node id", { command: { operation: { case: "deleteNode", value: { nodeId: "pending:new" } } } }, /node_id: must be a canonical node id.*pending ids are not accepted/],
    ["a malformed node id", { command: { operation: { case: "moveNode", value: { nodeId: node, newParentId: "root" } } } }, /new_parent_id: must be a canonical node id/],
    ["a pending expectation key", { expected: { "pending:x": tx } }, /expected_transaction_ids.*must be a canonical node id/],
    ["a malformed expected transaction id", { expected: { [node]: "nope" } }, /expected_transaction_ids.*must be 32 lowercase hexadecimal characters/],
    ["more than 64 expectations", { expected: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [i.toString(16).padStart(32, "0"), tx])) }, /expected_transaction_ids: map must be at most 64 entries/],
    ["an empty command", { command: {} }, /command\.operation: exactly one field is required in oneof/],
    ["an oversize command", { command: { operation: { case: "createNode", value: { kind: "topic", title: "big", body: "b".repeat(131_072), attributes } } } }, /^the command is \d+ bytes serialized; the limit is 262144$/],
  ];
  test.each(cases)("%s is invalid_argument (invalid_input), and nothing is stored", async (_name, input, message) => {
    const { commands } = clients("connect-json");
    const idempotencyId = input.idempotencyId ?? newId();
    const error = await failure(() =>
      commands.submitCommand({
        idempotencyId,
        command: create(CommandSchema, input.command ?? { operation: { case: "createNode", value: { kind: "topic", title: "ok" } } }),
        expectedTransactionIds: input.expected ?? {},
      }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.findDetails(ErrorDetailSchema)[0]).toMatchObject({ reason: "invalid_input", domain: "kmap" });
    expect(error.rawMessage).toMatch(message);
    if (/^[0-9a-f]{32}$/.test(idempotencyId)) {
      expect((await failure(() => commands.getCommand({ idempotencyId }))).code).toBe(Code.NotFound);
    }
  });
});
