import Database from "better-sqlite3";
import { afterEach, expect, test } from "vitest";
import { WriterUnavailableError } from "../../../src/kmap/kweb-manager.js";
import { EmbeddedKwebManager, KwebReader } from "../../../src/kmap/kweb/index.js";
import { waitFor } from "../../helpers/wait-for.js";
import { apply, command, createNode, kwebPaths, newIdempotencyId, track, transactionCount, type KwebPaths } from "./kweb-fixtures.js";

/**
 * Another connection holding the Kweb file's write lock (here: the test,
 * with BEGIN IMMEDIATE on the same file) is a writer outage. The apply
 * reports WriterUnavailableError — across the thread boundary, as that
 * class — and succeeds once the lock is released. While the worker waits
 * on the lock, the main thread's event loop keeps running and the reader
 * keeps reading.
 */

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(busyTimeoutMs?: number): Promise<{ paths: KwebPaths; manager: EmbeddedKwebManager; reader: KwebReader }> {
  const paths = kwebPaths();
  cleanups.push(() => paths.remove());
  const manager = await EmbeddedKwebManager.open({
    databasePath: paths.databasePath,
    signingKeyPath: paths.signingKeyPath,
    ...(busyTimeoutMs === undefined ? {} : { busyTimeoutMs }),
  });
  cleanups.push(() => manager.close());
  const reader = KwebReader.open(paths.databasePath);
  cleanups.push(() => reader.close());
  return { paths, manager, reader };
}

/** A second connection that takes the Kweb file's write lock. */
function lockWriter(path: string): { release(): void } {
  const blocker = new Database(path);
  cleanups.push(() => {
    if (blocker.inTransaction) blocker.exec("ROLLBACK");
    blocker.close();
  });
  blocker.exec("BEGIN IMMEDIATE");
  return {
    release() {
      blocker.exec("COMMIT");
    },
  };
}

test("a held write lock makes apply reject with WriterUnavailableError, and it succeeds after release", async () => {
  const { paths, manager, reader } = await setup();
  const lock = lockWriter(paths.databasePath);
  const idempotencyId = newIdempotencyId();

  const blocked = apply(manager, command.createNode({ title: "waiting" }), {}, idempotencyId);
  await expect(blocked).rejects.toBeInstanceOf(WriterUnavailableError);
  const error = (await blocked.catch((e: unknown) => e)) as Error;
  expect(error.message).not.toMatch(/SQLITE|database is locked/i);
  expect(transactionCount(reader)).toBe(0);

  lock.release();
  const outcome = await apply(manager, command.createNode({ title: "waiting" }), {}, idempotencyId);
  expect(outcome).toMatchObject({ kind: "committed", replayed: false });
  expect(transactionCount(reader)).toBe(1);
});

test("the main thread's event loop runs and reads are answered while the worker waits to apply a large command", async () => {
  // A long busy timeout keeps the worker blocked inside SQLite for as long
  // as the test holds the lock; only the test's release ends the wait.
  const { paths, manager, reader } = await setup(120_000);
  const existing = await createNode(manager, { title: "readable" });
  const lock = lockWriter(paths.databasePath);

  const large = command.createNode({
    title: "large",
    body: "x".repeat(131_072),
    attributes: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`a${i}`, "y".repeat(4096)])),
  });
  const pending = track(apply(manager, large));

  let ticks = 0;
  const timer = setInterval(() => ticks++, 5);
  cleanups.push(() => clearInterval(timer));
  await waitFor(() => ticks >= 10, { what: "timer ticks on the main thread" });
  // Reads on the main thread are answered from the committed state.
  expect(reader.getNode({ nodeId: existing })?.title).toBe("readable");
  expect(reader.listNodes({ limit: 10 }).nodes).toHaveLength(1);
  // With the lock held, the apply cannot have finished: the ticks ran while it was in progress.
  expect(pending.settled).toBe(false);

  lock.release();
  const outcome = await pending.promise;
  expect(outcome).toMatchObject({ kind: "committed", replayed: false });
  expect(reader.getNode({ nodeId: outcome.kind === "committed" ? outcome.createdNodeId! : "" })?.body).toHaveLength(131_072);
});

test("the reader does not see a writer's uncommitted changes", async () => {
  const { paths, manager, reader } = await setup();
  await createNode(manager, { title: "committed" });
  const other = new Database(paths.databasePath);
  cleanups.push(() => other.close());
  other.exec("BEGIN IMMEDIATE");
  other.prepare("UPDATE nodes SET title = 'uncommitted'").run();
  expect(reader.listNodes({ limit: 10 }).nodes.map((n) => n.title)).toEqual(["committed"]);
  other.exec("ROLLBACK");
});
