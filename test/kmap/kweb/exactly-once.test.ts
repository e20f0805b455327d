import { afterEach, expect, test } from "vitest";
import { EmbeddedKwebManager, KwebReader } from "../../../src/kmap/kweb/index.js";
import { allNodes, apply, command, createNode, kwebPaths, newIdempotencyId, transactionCount, type KwebPaths } from "./kweb-fixtures.js";

/**
 * A command is applied at most once per provenance: a second apply with the
 * same idempotency id answers from history — also from a new manager on the
 * same file, which is the lane's crash-recovery path (Kweb committed, the
 * lane's status update never happened).
 */

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function setup(): KwebPaths {
  const paths = kwebPaths();
  cleanups.push(() => paths.remove());
  return paths;
}

async function open(paths: KwebPaths): Promise<EmbeddedKwebManager> {
  const manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  cleanups.push(() => manager.close());
  return manager;
}

test("a second apply of the same idempotency id returns the original transaction and applies nothing", async () => {
  const paths = setup();
  const manager = await open(paths);
  const idempotencyId = newIdempotencyId();
  const first = await apply(manager, command.createNode({ title: "once" }), {}, idempotencyId);
  expect(first).toMatchObject({ kind: "committed", replayed: false });
  const second = await apply(manager, command.createNode({ title: "once" }), {}, idempotencyId);
  expect(second).toEqual({ ...first, replayed: true });

  const reader = KwebReader.open(paths.databasePath);
  cleanups.push(() => reader.close());
  expect(allNodes(reader).map((n) => n.title)).toEqual(["once"]);
  expect(transactionCount(reader)).toBe(1);
  const byProvenance = reader.listTransactions({ limit: 10, provenance: idempotencyId }).transactions;
  expect(byProvenance.map((t) => t.id)).toEqual([first.kind === "committed" ? first.transactionId : ""]);
});

test("the provenance lookup comes before expectations: a replay with stale expectations is still the original commit", async () => {
  const paths = setup();
  const manager = await open(paths);
  const id = await createNode(manager);
  const idempotencyId = newIdempotencyId();
  const first = await apply(manager, command.updateNode(id, { title: "x" }), {}, idempotencyId);
  const again = await apply(manager, command.updateNode(id, { title: "x" }), { [id]: "ab".repeat(16) }, idempotencyId);
  expect(again).toEqual({ ...first, replayed: true });
});

test("after closing and reopening, the same idempotency id is answered from history", async () => {
  const paths = setup();
  const idempotencyId = newIdempotencyId();
  const first = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  const parent = await createNode(first, { title: "parent" });
  const original = await apply(first, command.createNode({ title: "child", parentId: parent }), {}, idempotencyId);
  await first.close();

  const second = await open(paths);
  const replay = await apply(second, command.createNode({ title: "child", parentId: parent }), {}, idempotencyId);
  expect(original).toMatchObject({ kind: "committed", replayed: false });
  expect(replay).toEqual({ ...original, replayed: true });

  const reader = KwebReader.open(paths.databasePath);
  cleanups.push(() => reader.close());
  expect(allNodes(reader).filter((n) => n.title === "child")).toHaveLength(1);
  expect(transactionCount(reader)).toBe(2);
});

test("commands apply one at a time in arrival order", async () => {
  const paths = setup();
  const manager = await open(paths);
  const titles = Array.from({ length: 20 }, (_, i) => `n${String(i).padStart(2, "0")}`);
  const outcomes = await Promise.all(titles.map((title) => apply(manager, command.createNode({ title }))));
  expect(outcomes.every((o) => o.kind === "committed")).toBe(true);
  const reader = KwebReader.open(paths.databasePath);
  cleanups.push(() => reader.close());
  const history = reader.listTransactions({ limit: 100 }).transactions;
  expect(history.map((t) => t.sequence)).toEqual(titles.map((_, i) => i + 1));
  expect(history.map((t) => (t.command.operation.case === "createNode" ? t.command.operation.value.title : ""))).toEqual(titles);
  expect(history.map((t) => t.id)).toEqual(outcomes.map((o) => (o.kind === "committed" ? o.transactionId : "")));
});
