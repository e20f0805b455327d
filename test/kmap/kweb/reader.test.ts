import { afterAll, beforeAll, expect, test } from "vitest";
import { EmbeddedKwebManager, KwebFailureError, KwebReader, type KwebNode, type KwebTransaction } from "../../../src/kmap/kweb/index.js";
import { apply, command, commit, createNode, kwebPaths, newIdempotencyId, track, type KwebPaths } from "./kweb-fixtures.js";

/**
 * KwebReader: nodes and history on the main thread over a read-only
 * connection, in keyset pages that stay correct while the writer commits.
 */

let paths: KwebPaths;
let manager: EmbeddedKwebManager;
let reader: KwebReader;
let parent: string;
let children: string[];
let loose: string[];

beforeAll(async () => {
  paths = kwebPaths();
  manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  reader = KwebReader.open(paths.databasePath);
  parent = await createNode(manager, { title: "parent" });
  children = [];
  for (let i = 0; i < 12; i++) children.push(await createNode(manager, { title: `child ${i}`, parentId: parent }));
  loose = [];
  for (let i = 0; i < 10; i++) loose.push(await createNode(manager, { title: `loose ${i}` }));
});

afterAll(async () => {
  reader?.close();
  await manager?.close();
  paths?.remove();
});

function pages<T>(read: (after: T | undefined) => { items: readonly unknown[]; next: T | undefined }): Array<readonly unknown[]> {
  const all: Array<readonly unknown[]> = [];
  let after: T | undefined;
  do {
    const page = read(after);
    all.push(page.items);
    after = page.next;
  } while (after !== undefined);
  return all;
}

test("listNodes pages through every node in id order", () => {
  const nodePages = pages<string>((afterId) => {
    const page = reader.listNodes({ limit: 10, ...(afterId === undefined ? {} : { afterId }) });
    return { items: page.nodes, next: page.nextAfterId };
  }) as KwebNode[][];
  expect(nodePages.map((p) => p.length)).toEqual([10, 10, 3]);
  const ids = nodePages.flat().map((n) => n.id);
  expect(ids).toEqual([parent, ...children, ...loose].sort());
});

test("a page that ends exactly at the last node has no next marker", () => {
  const page = reader.listNodes({ limit: 23 });
  expect(page.nodes).toHaveLength(23);
  expect(page.nextAfterId).toBeUndefined();
});

test("listNodes with a parent pages through its children only", () => {
  const childPages = pages<string>((afterId) => {
    const page = reader.listNodes({ limit: 5, parentId: parent, ...(afterId === undefined ? {} : { afterId }) });
    return { items: page.nodes, next: page.nextAfterId };
  }) as KwebNode[][];
  expect(childPages.map((p) => p.length)).toEqual([5, 5, 2]);
  expect(childPages.flat().map((n) => n.id)).toEqual([...children].sort());
  expect(childPages.flat().every((n) => n.parentId === parent)).toBe(true);
  expect(reader.listNodes({ limit: 5, parentId: loose[0]! })).toEqual({ nodes: [], nextAfterId: undefined });
});

test("listTransactions pages in commit order, by node and by provenance", async () => {
  const all = (pages<number>((afterSequence) => {
    const page = reader.listTransactions({ limit: 7, ...(afterSequence === undefined ? {} : { afterSequence }) });
    return { items: page.transactions, next: page.nextAfterSequence };
  }) as KwebTransaction[][]).flat();
  expect(all.map((t) => t.sequence)).toEqual(Array.from({ length: all.length }, (_, i) => i + 1));
  expect(all.length).toBeGreaterThanOrEqual(23);

  // History of one node: its creation, a link to it, an update, an unlink.
  const subject = loose[3]!;
  const other = loose[4]!;
  await commit(manager, command.linkNodes(other, subject));
  await commit(manager, command.updateNode(subject, { title: "renamed" }));
  await commit(manager, command.updateNode(other, { title: "not about the subject" }));
  await commit(manager, command.unlinkNodes(other, subject));
  const history = (pages<number>((afterSequence) => {
    const page = reader.listTransactions({ limit: 2, nodeId: subject, ...(afterSequence === undefined ? {} : { afterSequence }) });
    return { items: page.transactions, next: page.nextAfterSequence };
  }) as KwebTransaction[][]).flat();
  expect(history.map((t) => t.command.operation.case)).toEqual(["createNode", "linkNodes", "updateNode", "unlinkNodes"]);
  expect(history.every((t) => t.touchedNodeIds.includes(subject))).toBe(true);
  expect(history.at(-1)?.id).toBe(reader.getNode({ nodeId: subject })?.visibleTransactionId);

  const idempotencyId = newIdempotencyId();
  const outcome = await apply(manager, command.updateNode(subject, { body: "by provenance" }), {}, idempotencyId);
  const found = reader.listTransactions({ limit: 10, provenance: idempotencyId });
  expect(found.transactions.map((t) => t.id)).toEqual([outcome.kind === "committed" ? outcome.transactionId : ""]);
  expect(found.nextAfterSequence).toBeUndefined();
  expect(reader.listTransactions({ limit: 10, provenance: newIdempotencyId() }).transactions).toEqual([]);
  expect(reader.listTransactions({ limit: 10, provenance: idempotencyId, nodeId: other }).transactions).toEqual([]);
});

test("getTransaction returns the stored transaction with its typed command; unknown ids are undefined", () => {
  const first = reader.listTransactions({ limit: 1 }).transactions[0]!;
  const again = reader.getTransaction({ transactionId: first.id });
  expect(again).toEqual(first);
  expect(first.command.operation).toMatchObject({ case: "createNode", value: { title: "parent" } });
  expect(first.signedPayload).toBeInstanceOf(Uint8Array);
  expect(first.signature).toBeInstanceOf(Uint8Array);
  expect(reader.getTransaction({ transactionId: "ab".repeat(16) })).toBeUndefined();
  expect(reader.getNode({ nodeId: "ab".repeat(16) })).toBeUndefined();
});

test("a page started before commits continues correctly after them", async () => {
  const first = reader.listNodes({ limit: 5 });
  const added = await createNode(manager, { title: "added mid-listing" });
  const rest: KwebNode[] = [];
  let afterId = first.nextAfterId;
  while (afterId !== undefined) {
    const page = reader.listNodes({ limit: 5, afterId });
    rest.push(...page.nodes);
    afterId = page.nextAfterId;
  }
  const ids = [...first.nodes, ...rest].map((n) => n.id);
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids).toEqual([...ids].sort());
  if (added > first.nodes.at(-1)!.id) expect(ids).toContain(added);
});

test("the reader answers while the writer applies a stream of commands", async () => {
  const writes = Array.from({ length: 30 }, (_, i) => track(apply(manager, command.createNode({ title: `burst ${i}` }))));
  let reads = 0;
  while (writes.some((w) => !w.settled)) {
    expect(reader.getNode({ nodeId: parent })?.title).toBe("parent");
    reader.listTransactions({ limit: 5, nodeId: parent });
    reads++;
    await new Promise((resolve) => setImmediate(resolve));
  }
  expect(reads).toBeGreaterThan(0);
  const outcomes = await Promise.all(writes.map((w) => w.promise));
  expect(outcomes.every((o) => o.kind === "committed")).toBe(true);
});

test("opening a reader on a file that does not exist is a typed error", () => {
  expect(() => KwebReader.open(`${paths.dir}/missing.sqlite`)).toThrow(KwebFailureError);
});
