import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { CommandSchema, type Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { KmapError, validateSubmission, type KwebManager, type Submission } from "../../src/kmap/index.js";
import { openCommandQueue } from "../../src/kmap/internal.js";

/**
 * Every validation rule of `submit`, against a real SQLite lane: bad
 * idempotency ids, pending and malformed node ids, empty and oversize
 * commands, the contract's field rules, the exact repeat and the conflict.
 * Nothing here needs the runtime, so its manager is never called.
 */

const idle: KwebManager = {
  ready: () => new Promise(() => {}),
  apply: () => Promise.reject(new Error("the runtime does not run in these tests")),
  close: async () => {},
};

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function freshLane() {
  const dir = await mkdtemp(join(tmpdir(), "laneway-kmap-"));
  dirs.push(dir);
  return openCommandQueue(join(dir, "commands.sqlite"), idle);
}

const nodeA = "0123456789abcdef0123456789abcdef";
const nodeB = "fedcba9876543210fedcba9876543210";
const tx = "00112233445566778899aabbccddeeff";
const goodId = "a".repeat(32);

function cmd(operation: MessageInitShape<typeof CommandSchema>["operation"]): Command {
  return create(CommandSchema, { operation });
}

const createTopic = cmd({ case: "createNode", value: { kind: "topic", title: "Rivers" } });

function submission(overrides: Partial<Submission> = {}): Submission {
  return { idempotencyId: goodId, command: createTopic, expectedTransactionIds: {}, ...overrides };
}

function invalid(s: Submission): string {
  try {
    validateSubmission(s);
  } catch (error) {
    expect(error).toBeInstanceOf(KmapError);
    expect((error as KmapError).reason).toBe("invalid_input");
    return (error as KmapError).message;
  }
  throw new Error("the submission was accepted");
}

describe("idempotency ids", () => {
  test.each([
    ["too short", "a".repeat(31), "idempotency_id must be 32 characters, got 31"],
    ["too long", "a".repeat(33), "idempotency_id must be 32 characters, got 33"],
    ["empty", "", "idempotency_id must be 32 characters, got 0"],
    ["uppercase", "A".repeat(32), "idempotency_id must be lowercase"],
    ["not hexadecimal", "g".repeat(32), "idempotency_id must contain only hexadecimal characters 0-9 and a-f"],
    ["a uuid with dashes", "0123456789ab-def0123456789abcdef", "idempotency_id must contain only hexadecimal characters 0-9 and a-f"],
  ])("%s is refused", (_name, idempotencyId, message) => {
    expect(invalid(submission({ idempotencyId }))).toBe(message);
  });
});

describe("node ids", () => {
  test.each([
    ["a pending parent", cmd({ case: "createNode", value: { kind: "topic", title: "x", parentId: "pending:new-river" } }), "create_node.parent_id is a pending identifier; commands must name existing nodes by their canonical id"],
    ["a pending update target", cmd({ case: "updateNode", value: { nodeId: "pending-7", title: "x" } }), "update_node.node_id is a pending identifier; commands must name existing nodes by their canonical id"],
    ["a short node id", cmd({ case: "deleteNode", value: { nodeId: "abc" } }), "delete_node.node_id is not a canonical node id: it must be 32 characters, got 3"],
    ["an uppercase node id", cmd({ case: "linkNodes", value: { fromId: nodeA.toUpperCase(), toId: nodeB, linkType: "cites" } }), "link_nodes.from_id is not a canonical node id: it must be lowercase"],
    ["a non-hex node id", cmd({ case: "unlinkNodes", value: { fromId: nodeA, toId: "z".repeat(32), linkType: "cites" } }), "unlink_nodes.to_id is not a canonical node id: it must contain only hexadecimal characters 0-9 and a-f"],
    ["a malformed new parent", cmd({ case: "moveNode", value: { nodeId: nodeA, newParentId: "root" } }), "move_node.new_parent_id is not a canonical node id: it must be 32 characters, got 4"],
  ])("%s is refused", (_name, command, message) => {
    expect(invalid(submission({ command }))).toBe(message);
  });

  test("expectations must be keyed by canonical node ids and name canonical transaction ids", () => {
    expect(invalid(submission({ expectedTransactionIds: { "pending:x": tx } }))).toBe(
      'expected_transaction_ids key "pending:x" is a pending identifier; commands must name existing nodes by their canonical id',
    );
    expect(invalid(submission({ expectedTransactionIds: { [nodeA]: "TX" } }))).toBe(`expected transaction id for node ${nodeA} must be 32 characters, got 2`);
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [i.toString(16).padStart(32, "0"), tx]));
    expect(invalid(submission({ expectedTransactionIds: many }))).toBe("at most 64 expected transaction ids, got 65");
  });
});

describe("commands", () => {
  test("an empty command is refused", () => {
    expect(invalid(submission({ command: create(CommandSchema, {}) }))).toBe("the command is empty: set exactly one operation");
  });

  test("an oversize command is refused with its size", () => {
    const attributes = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, "v".repeat(4096)]));
    const command = cmd({ case: "createNode", value: { kind: "topic", title: "big", body: "b".repeat(131_072), attributes } });
    expect(invalid(submission({ command }))).toMatch(/^the command is \d+ bytes serialized; the limit is 262144$/);
  });

  test.each([
    ["an empty title", cmd({ case: "createNode", value: { kind: "topic", title: "" } }), "title"],
    ["a kind that is not an identifier", cmd({ case: "createNode", value: { kind: "Topic!", title: "x" } }), "kind"],
    ["an update that changes nothing", cmd({ case: "updateNode", value: { nodeId: nodeA } }), "at least one field"],
    ["a link type that is not an identifier", cmd({ case: "linkNodes", value: { fromId: nodeA, toId: nodeB, linkType: "" } }), "link_type"],
  ])("%s is refused by the contract's rules", (_name, command, fragment) => {
    const message = invalid(submission({ command }));
    expect(message.startsWith("command: ")).toBe(true);
    expect(message).toContain(fragment);
  });

  test("a valid submission is accepted and its canonical text is stable", () => {
    const a = validateSubmission(submission({ expectedTransactionIds: { [nodeB]: tx, [nodeA]: tx } }));
    const b = validateSubmission(submission({ expectedTransactionIds: { [nodeA]: tx, [nodeB]: tx } }));
    expect(a).toBe(b);
  });
});

describe("submit", () => {
  test("commits a Queued record, and an exact repeat returns the original", async () => {
    const { queue, close } = await freshLane();
    const first = await queue.submit(submission());
    expect(first.existing).toBe(false);
    expect(first.record).toMatchObject({ sequence: 1, state: "queued", attempts: 0 });
    const again = await queue.submit(submission());
    expect(again.existing).toBe(true);
    expect(again.record).toEqual(first.record);
    expect(again.position).toBe(first.position);
    expect(queue.snapshot()).toHaveLength(1);
    close();
  });

  test("reusing an id for different input is a conflict and changes nothing", async () => {
    const { queue, close } = await freshLane();
    await queue.submit(submission());
    const other = cmd({ case: "createNode", value: { kind: "topic", title: "Lakes" } });
    await expect(queue.submit(submission({ command: other }))).rejects.toMatchObject({
      reason: "conflict",
      message: `idempotency_id ${goodId} was already used for a different submission`,
    });
    await expect(queue.submit(submission({ expectedTransactionIds: { [nodeA]: tx } }))).rejects.toMatchObject({ reason: "conflict" });
    expect(queue.snapshot().map((r) => r.submission.command)).toEqual([createTopic]);
    close();
  });

  test("invalid input is refused before anything is stored", async () => {
    const { queue, close } = await freshLane();
    await expect(queue.submit(submission({ idempotencyId: "nope" }))).rejects.toMatchObject({ reason: "invalid_input" });
    expect(queue.snapshot()).toEqual([]);
    close();
  });

  test("submissions of one turn share a commit but keep their order, and a repeat within the group finds the first", async () => {
    const { queue, close } = await freshLane();
    const ids = ["4", "5", "6"].map((d) => d.repeat(32));
    const results = await Promise.all([...ids.map((idempotencyId) => queue.submit(submission({ idempotencyId }))), queue.submit(submission({ idempotencyId: ids[0]! }))]);
    expect(results.map((r) => [r.record.sequence, r.existing])).toEqual([
      [1, false],
      [2, false],
      [3, false],
      [1, true],
    ]);
    const conflicting = queue.submit(submission({ idempotencyId: ids[1]!, command: cmd({ case: "createNode", value: { kind: "topic", title: "other" } }) }));
    const fine = queue.submit(submission({ idempotencyId: "7".repeat(32) }));
    await expect(conflicting).rejects.toMatchObject({ reason: "conflict" });
    expect((await fine).record.sequence).toBe(4);
    close();
  });

  test("records survive reopening, in submission order", async () => {
    const dir = await mkdtemp(join(tmpdir(), "laneway-kmap-"));
    dirs.push(dir);
    const path = join(dir, "commands.sqlite");
    const first = openCommandQueue(path, idle);
    const ids = ["1", "2", "3"].map((d) => d.repeat(32));
    for (const idempotencyId of ids) await first.queue.submit(submission({ idempotencyId }));
    first.close();
    const second = openCommandQueue(path, idle);
    expect(second.queue.snapshot().map((r) => [r.sequence, r.submission.idempotencyId])).toEqual(ids.map((id, i) => [i + 1, id]));
    second.close();
  });
});
