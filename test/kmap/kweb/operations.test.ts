import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { EmbeddedKwebManager, KwebReader } from "../../../src/kmap/kweb/index.js";
import {
  apply,
  changedIds,
  command,
  commit,
  createNode,
  kwebPaths,
  newIdempotencyId,
  transactionCount,
  visibleIds,
  type KwebPaths,
} from "./kweb-fixtures.js";

/**
 * Every Kmap operation and every way it can be rejected, through the real
 * manager (worker thread, SQLite file). After each command the test checks
 * which nodes' visible transaction ids moved: exactly the touched ones.
 */

let paths: KwebPaths;
let manager: EmbeddedKwebManager;
let reader: KwebReader;

beforeAll(async () => {
  paths = kwebPaths();
  manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  reader = KwebReader.open(paths.databasePath);
});

afterAll(async () => {
  reader?.close();
  await manager?.close();
  paths?.remove();
});

function node(id: string) {
  const found = reader.getNode({ nodeId: id });
  if (found === undefined) throw new Error(`node ${id} not found`);
  return found;
}

/** Applies a command and checks that the visible ids of exactly `touched` (still existing) moved to the new transaction. */
async function commitTouching(cmd: Parameters<typeof commit>[1], expected: Record<string, string> = {}) {
  const before = visibleIds(reader);
  const outcome = await commit(manager, cmd, expected);
  const after = visibleIds(reader);
  const transaction = reader.getTransaction({ transactionId: outcome.transactionId });
  if (transaction === undefined) throw new Error("the committed transaction is not in history");
  const stillThere = transaction.touchedNodeIds.filter((id) => after.has(id) && before.has(id));
  expect(changedIds(before, after)).toEqual([...stillThere].sort());
  for (const id of stillThere) expect(after.get(id)).toBe(outcome.transactionId);
  return { outcome, transaction };
}

/** Applies a command that must be rejected, and checks that nothing was written. */
async function reject(cmd: Parameters<typeof commit>[1], expected: Record<string, string> = {}) {
  const before = visibleIds(reader);
  const count = transactionCount(reader);
  const outcome = await apply(manager, cmd, expected);
  if (outcome.kind !== "rejected") throw new Error(`expected a rejection, got ${outcome.kind}`);
  expect(visibleIds(reader)).toEqual(before);
  expect(transactionCount(reader)).toBe(count);
  expect(outcome.message).not.toMatch(/SQLITE|constraint/i);
  return outcome;
}

const absent = "0f".repeat(15) + "e1";

describe("create_node", () => {
  test("creates a top-level node and names it as the created node", async () => {
    const { outcome, transaction } = await commitTouching(
      command.createNode({ kind: "topic", title: "Roads", body: "All about roads", attributes: { owner: "ops", zone: "b" } }),
    );
    expect(outcome.replayed).toBe(false);
    expect(outcome.createdNodeId).toMatch(/^[0-9a-f]{32}$/);
    expect(outcome.transactionId).toMatch(/^[0-9a-f]{32}$/);
    const created = node(outcome.createdNodeId!);
    expect(created).toMatchObject({
      kind: "topic",
      title: "Roads",
      body: "All about roads",
      attributes: { owner: "ops", zone: "b" },
      parentId: undefined,
      links: [],
      visibleTransactionId: outcome.transactionId,
      createdTransactionId: outcome.transactionId,
    });
    expect(created.updatedAt).toBe(created.createdAt);
    expect(transaction.touchedNodeIds).toEqual([outcome.createdNodeId]);
    expect(transaction.createdNodeId).toBe(outcome.createdNodeId);
  });

  test("creates a child without touching the parent", async () => {
    const parent = await createNode(manager, { title: "parent" });
    const { outcome, transaction } = await commitTouching(command.createNode({ title: "child", parentId: parent }));
    expect(node(outcome.createdNodeId!).parentId).toBe(parent);
    expect(transaction.touchedNodeIds).toEqual([outcome.createdNodeId]);
  });

  test("a missing parent is a missing node", async () => {
    const outcome = await reject(command.createNode({ parentId: absent }));
    expect(outcome).toEqual({ kind: "rejected", code: "missing_node", message: `parent node ${absent} does not exist` });
  });
});

describe("update_node", () => {
  test("changes only the fields it sets and merges attributes", async () => {
    const id = await createNode(manager, { kind: "topic", title: "Old", body: "keep me", attributes: { a: "1", b: "2", c: "3" } });
    const { transaction } = await commitTouching(
      command.updateNode(id, { title: "New", setAttributes: { b: "20", d: "4" }, removeAttributes: ["a", "zz"] }),
    );
    expect(node(id)).toMatchObject({ kind: "topic", title: "New", body: "keep me", attributes: { b: "20", c: "3", d: "4" } });
    expect(transaction.touchedNodeIds).toEqual([id]);
    await commitTouching(command.updateNode(id, { kind: "place", body: "" }));
    expect(node(id)).toMatchObject({ kind: "place", title: "New", body: "" });
  });

  test("updated_at follows the visible transaction", async () => {
    const id = await createNode(manager);
    const { transaction } = await commitTouching(command.updateNode(id, { title: "later" }));
    expect(node(id).updatedAt).toBe(transaction.committedAt);
  });

  test("a missing node is a missing node", async () => {
    const outcome = await reject(command.updateNode(absent, { title: "x" }));
    expect(outcome).toEqual({ kind: "rejected", code: "missing_node", message: `node ${absent} does not exist` });
  });

  test("a key both set and removed is invalid input", async () => {
    const id = await createNode(manager, { attributes: { a: "1" } });
    const outcome = await reject(command.updateNode(id, { setAttributes: { a: "2" }, removeAttributes: ["a"] }));
    expect(outcome.code).toBe("invalid_input");
    expect(outcome.message).toBe('attribute "a" cannot be both set and removed');
    expect(node(id).attributes).toEqual({ a: "1" });
  });

  test("a node may not end with more than 64 attributes", async () => {
    const sixty = Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`k${i}`, "v"]));
    const id = await createNode(manager, { attributes: sixty });
    const five = Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`n${i}`, "v"]));
    const outcome = await reject(command.updateNode(id, { setAttributes: five }));
    expect(outcome.code).toBe("invalid_input");
    expect(outcome.message).toBe(`node ${id} would have 65 attributes; a node keeps at most 64`);
    // Removing one while adding five ends at exactly 64: allowed.
    await commitTouching(command.updateNode(id, { setAttributes: { ...five, k0: "overwritten" }, removeAttributes: ["k1"] }));
    expect(Object.keys(node(id).attributes)).toHaveLength(64);
  });
});

describe("delete_node", () => {
  test("deletes the node and its links, touching every other end", async () => {
    const doomed = await createNode(manager, { title: "doomed" });
    const target = await createNode(manager, { title: "target" });
    const source = await createNode(manager, { title: "source" });
    const bystander = await createNode(manager, { title: "bystander" });
    await commit(manager, command.linkNodes(doomed, target, "cites"));
    await commit(manager, command.linkNodes(source, doomed, "mentions"));
    await commit(manager, command.linkNodes(source, bystander, "mentions"));
    const { transaction } = await commitTouching(command.deleteNode(doomed));
    expect(transaction.touchedNodeIds).toEqual([doomed, source, target].sort());
    expect(reader.getNode({ nodeId: doomed })).toBeUndefined();
    expect(node(source).links).toEqual([{ fromId: source, toId: bystander, linkType: "mentions" }]);
    // The deleted node's history stays queryable.
    const history = reader.listTransactions({ limit: 100, nodeId: doomed }).transactions;
    expect(history.map((t) => t.id)).toContain(transaction.id);
    expect(history.at(-1)?.id).toBe(transaction.id);
  });

  test("a node with children cannot be deleted", async () => {
    const parent = await createNode(manager);
    await createNode(manager, { parentId: parent });
    await createNode(manager, { parentId: parent });
    const outcome = await reject(command.deleteNode(parent));
    expect(outcome).toEqual({
      kind: "rejected",
      code: "invalid_input",
      message: `node ${parent} has 2 children: move or delete them first`,
    });
  });

  test("a missing node is a missing node", async () => {
    expect((await reject(command.deleteNode(absent))).code).toBe("missing_node");
  });
});

describe("link_nodes and unlink_nodes", () => {
  test("a link touches both ends and shows on the source, ordered by type then target", async () => {
    const from = await createNode(manager);
    const [a, b] = [await createNode(manager), await createNode(manager)].sort();
    const { transaction } = await commitTouching(command.linkNodes(from, b!, "cites"));
    expect(transaction.touchedNodeIds).toEqual([from, b!].sort());
    await commitTouching(command.linkNodes(from, a!, "cites"));
    await commitTouching(command.linkNodes(from, a!, "about"));
    expect(node(from).links).toEqual([
      { fromId: from, toId: a, linkType: "about" },
      { fromId: from, toId: a, linkType: "cites" },
      { fromId: from, toId: b, linkType: "cites" },
    ]);
    expect(node(a!).links).toEqual([]);
  });

  test("a node cannot link to itself", async () => {
    const id = await createNode(manager);
    const outcome = await reject(command.linkNodes(id, id));
    expect(outcome.code).toBe("invalid_input");
    expect(outcome.message).toContain("a node cannot link to itself");
    expect(outcome.message).toContain(id);
  });

  test("an identical link is invalid input", async () => {
    const [from, to] = [await createNode(manager), await createNode(manager)];
    await commit(manager, command.linkNodes(from, to, "cites"));
    const outcome = await reject(command.linkNodes(from, to, "cites"));
    expect(outcome).toEqual({ kind: "rejected", code: "invalid_input", message: `node ${from} already has a "cites" link to node ${to}` });
  });

  test("linking a missing node is a missing node", async () => {
    const id = await createNode(manager);
    expect(await reject(command.linkNodes(id, absent))).toMatchObject({ code: "missing_node", message: `node ${absent} does not exist` });
    expect(await reject(command.linkNodes(absent, id))).toMatchObject({ code: "missing_node", message: `node ${absent} does not exist` });
  });

  test("unlink removes the link and touches both ends", async () => {
    const [from, to] = [await createNode(manager), await createNode(manager)];
    await commit(manager, command.linkNodes(from, to, "cites"));
    const { transaction } = await commitTouching(command.unlinkNodes(from, to, "cites"));
    expect(transaction.touchedNodeIds).toEqual([from, to].sort());
    expect(node(from).links).toEqual([]);
  });

  test("unlinking a link that does not exist is invalid input", async () => {
    const [from, to] = [await createNode(manager), await createNode(manager)];
    await commit(manager, command.linkNodes(from, to, "cites"));
    const outcome = await reject(command.unlinkNodes(from, to, "mentions"));
    expect(outcome).toEqual({ kind: "rejected", code: "invalid_input", message: `node ${from} has no "mentions" link to node ${to}` });
    expect((await reject(command.unlinkNodes(from, absent))).code).toBe("missing_node");
  });
});

describe("move_node", () => {
  test("moves under a new parent and back to the top level, touching only the node", async () => {
    const [oldParent, newParent] = [await createNode(manager), await createNode(manager)];
    const id = await createNode(manager, { parentId: oldParent });
    const { transaction } = await commitTouching(command.moveNode(id, newParent));
    expect(transaction.touchedNodeIds).toEqual([id]);
    expect(node(id).parentId).toBe(newParent);
    await commitTouching(command.moveNode(id, ""));
    expect(node(id).parentId).toBeUndefined();
  });

  test("a node cannot move under itself or its own descendant", async () => {
    const root = await createNode(manager);
    const child = await createNode(manager, { parentId: root });
    const grandchild = await createNode(manager, { parentId: child });
    const outcome = await reject(command.moveNode(root, grandchild));
    expect(outcome).toEqual({
      kind: "rejected",
      code: "invalid_input",
      message: `cannot move node ${root} under its own descendant ${grandchild}`,
    });
    expect((await reject(command.moveNode(root, root))).message).toBe(`cannot move node ${root} under itself`);
    // Moving a descendant up is fine.
    await commitTouching(command.moveNode(grandchild, root));
  });

  test("a missing node or new parent is a missing node", async () => {
    const id = await createNode(manager);
    expect(await reject(command.moveNode(absent, id))).toMatchObject({ code: "missing_node", message: `node ${absent} does not exist` });
    expect(await reject(command.moveNode(id, absent))).toMatchObject({ code: "missing_node", message: `parent node ${absent} does not exist` });
  });
});

describe("expected visible transaction ids", () => {
  test("a command applies when every expectation holds", async () => {
    const [a, b] = [await createNode(manager), await createNode(manager)];
    await commitTouching(command.linkNodes(a, b), { [a]: node(a).visibleTransactionId, [b]: node(b).visibleTransactionId });
  });

  test("a node at another transaction is a stale revision", async () => {
    const id = await createNode(manager);
    const first = node(id).visibleTransactionId;
    await commit(manager, command.updateNode(id, { title: "changed" }));
    const now = node(id).visibleTransactionId;
    const outcome = await reject(command.updateNode(id, { title: "again" }), { [id]: first });
    expect(outcome).toEqual({ kind: "rejected", code: "stale_revision", message: `node ${id} is at transaction ${now}, expected ${first}` });
    expect(node(id).title).toBe("changed");
  });

  test("an expectation on a missing node is a missing node", async () => {
    const id = await createNode(manager);
    const outcome = await reject(command.updateNode(id, { title: "x" }), { [absent]: "ab".repeat(16) });
    expect(outcome).toEqual({ kind: "rejected", code: "missing_node", message: `node ${absent} does not exist` });
  });

  test("expectations are checked before the operation", async () => {
    const id = await createNode(manager);
    const outcome = await reject(command.linkNodes(id, id), { [id]: "ab".repeat(16) });
    expect(outcome.code).toBe("stale_revision");
  });

  test("a rejected command can be resubmitted under the same id once it can apply", async () => {
    const id = await createNode(manager);
    const idempotencyId = newIdempotencyId();
    const stale = await apply(manager, command.updateNode(id, { title: "x" }), { [id]: "ab".repeat(16) }, idempotencyId);
    expect(stale.kind).toBe("rejected");
    const fresh = await apply(manager, command.updateNode(id, { title: "x" }), { [id]: node(id).visibleTransactionId }, idempotencyId);
    expect(fresh).toMatchObject({ kind: "committed", replayed: false });
  });
});
