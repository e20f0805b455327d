import Database from "better-sqlite3";
import { writeFileSync, mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { afterEach, expect, test } from "vitest";
import {
  DEFAULT_BUSY_TIMEOUT_MS,
  EmbeddedKwebManager,
  KWEB_SCHEMA_VERSION,
  KwebFailureError,
  KwebReader,
  KwebWriter,
  loadOrCreateSigningKey,
} from "../../../src/kmap/kweb/index.js";
import {
  apply,
  command,
  createNode,
  DyingWorkerManager,
  EXIT_AFTER_COMMIT_ON,
  EXIT_ON,
  kwebPaths,
  newIdempotencyId,
  THROW_ON,
  track,
  transactionCount,
  type KwebPaths,
} from "./kweb-fixtures.js";

/**
 * The manager's lifecycle: a writer thread that dies, closing with an apply
 * in progress, and files the manager must refuse to open.
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

// EXIT_ON and THROW_ON end the thread before the command is applied;
// EXIT_AFTER_COMMIT_ON ends it after the Kweb committed but before the
// answer: the crash-after-commit case that provenance recovers exactly.
for (const [how, idempotencyId, committedBeforeDeath] of [
  ["exits", EXIT_ON, false],
  ["throws an uncaught error", THROW_ON, false],
  ["exits after committing but before answering", EXIT_AFTER_COMMIT_ON, true],
] as const) {
  test(`a worker thread that ${how} fails the apply in flight, the ones queued behind it and every later one`, async () => {
    const paths = setup();
    const manager = new DyingWorkerManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
    cleanups.push(() => manager.close());
    await manager.ready();
    await createNode(manager, { title: "before" });

    const dying = apply(manager, command.createNode({ title: "fatal" }), {}, idempotencyId);
    const queued = apply(manager, command.createNode({ title: "queued" }));
    const settled = await Promise.allSettled([dying, queued]);
    for (const outcome of settled) {
      expect(outcome.status).toBe("rejected");
      const error = outcome.status === "rejected" ? (outcome.reason as unknown) : undefined;
      expect(error).toBeInstanceOf(KwebFailureError);
      expect(error).toMatchObject({ failure: "worker_stopped", reason: "internal", message: "the Kweb writer thread stopped unexpectedly" });
    }
    await expect(apply(manager, command.createNode({ title: "later" }))).rejects.toMatchObject({ failure: "worker_stopped" });
    await manager.close();

    // A new manager on the same file carries on, and the retried command
    // applies exactly once: now, or answered from history if it had committed.
    const next = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
    cleanups.push(() => next.close());
    const reader = KwebReader.open(paths.databasePath);
    cleanups.push(() => reader.close());
    expect(transactionCount(reader)).toBe(committedBeforeDeath ? 2 : 1);
    const retried = await apply(next, command.createNode({ title: "fatal" }), {}, idempotencyId);
    expect(retried).toMatchObject({ kind: "committed", replayed: committedBeforeDeath });
    expect(transactionCount(reader)).toBe(2);
    expect(reader.listNodes({ limit: 10 }).nodes.filter((n) => n.title === "fatal")).toHaveLength(1);
  });
}

test("close lets the apply in progress finish, rejects the queued ones and later ones", async () => {
  const paths = setup();
  const manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath, busyTimeoutMs: 120_000 });
  cleanups.push(() => manager.close());
  await createNode(manager);
  // Hold the write lock so the first apply is certainly still in progress when close() is called.
  const blocker = new Database(paths.databasePath);
  cleanups.push(() => blocker.close());
  blocker.exec("BEGIN IMMEDIATE");

  const inProgress = track(apply(manager, command.createNode({ title: "in progress" })));
  const queued = apply(manager, command.createNode({ title: "queued" }));
  const closing = track(manager.close());
  await expect(queued).rejects.toMatchObject({ failure: "closed" });
  await expect(apply(manager, command.createNode({ title: "late" }))).rejects.toMatchObject({ failure: "closed" });
  await expect(manager.ready()).resolves.toBeUndefined();
  expect(inProgress.settled).toBe(false);
  expect(closing.settled).toBe(false);

  blocker.exec("COMMIT");
  expect(await inProgress.promise).toMatchObject({ kind: "committed", replayed: false });
  await closing.promise;

  const reader = KwebReader.open(paths.databasePath);
  cleanups.push(() => reader.close());
  expect(reader.listNodes({ limit: 10 }).nodes.map((n) => n.title).sort()).toEqual(["in progress", "untitled"]);
});

test("close is idempotent and works on a manager that never started", async () => {
  const paths = setup();
  const idle = new EmbeddedKwebManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  await idle.close();
  await idle.close();
  await expect(idle.ready()).rejects.toMatchObject({ failure: "closed" });
  await expect(apply(idle, command.createNode())).rejects.toBeInstanceOf(KwebFailureError);
});

test("apply before ready() starts the manager and waits for it", async () => {
  const paths = setup();
  const manager = new EmbeddedKwebManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  cleanups.push(() => manager.close());
  expect(await apply(manager, command.createNode())).toMatchObject({ kind: "committed" });
});

test("a Kweb file with a newer schema version is refused with a clear error", async () => {
  const paths = setup();
  const first = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  await first.close();
  const db = new Database(paths.databasePath);
  db.prepare("UPDATE kweb_meta SET value = ? WHERE key = 'schema_version'").run(String(KWEB_SCHEMA_VERSION + 1));
  db.close();

  const manager = new EmbeddedKwebManager({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  cleanups.push(() => manager.close());
  const error = await manager.ready().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(KwebFailureError);
  expect(error).toMatchObject({
    failure: "unsupported_schema",
    message: `the Kweb file has schema version ${KWEB_SCHEMA_VERSION + 1}, newer than this Laneway understands (${KWEB_SCHEMA_VERSION}); upgrade Laneway`,
  });
  await expect(apply(manager, command.createNode())).rejects.toMatchObject({ failure: "unsupported_schema" });
  expect(() => KwebReader.open(paths.databasePath)).toThrow(/newer than this Laneway understands/);
});

test("a file that is not a Kweb file is refused, and so is one that is not SQLite at all", async () => {
  const paths = setup();
  mkdirSync(dirname(paths.databasePath), { recursive: true });
  const other = new Database(paths.databasePath);
  other.exec("CREATE TABLE something_else (x)");
  other.close();
  await expect(EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath })).rejects.toMatchObject({
    failure: "unsupported_schema",
    message: "the Kweb file is a SQLite database without a Kweb schema",
  });

  const garbage = `${paths.dir}/garbage.sqlite`;
  writeFileSync(garbage, "this is not a database, it is a text file that is long enough to have a header".repeat(10));
  await expect(EmbeddedKwebManager.open({ databasePath: garbage, signingKeyPath: paths.signingKeyPath })).rejects.toMatchObject({
    failure: "unsupported_schema",
    message: "the Kweb file is not a SQLite database",
  });
});

test("the Kweb file is in WAL mode with its schema version row", async () => {
  const paths = setup();
  const manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  cleanups.push(() => manager.close());
  const db = new Database(paths.databasePath, { readonly: true });
  cleanups.push(() => db.close());
  expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
  expect(db.prepare("SELECT value FROM kweb_meta WHERE key = 'schema_version'").get()).toEqual({ value: String(KWEB_SCHEMA_VERSION) });
});

test("a writer unavailable during an apply does not poison the manager", async () => {
  const paths = setup();
  const manager = await EmbeddedKwebManager.open({ databasePath: paths.databasePath, signingKeyPath: paths.signingKeyPath });
  cleanups.push(() => manager.close());
  const blocker = new Database(paths.databasePath);
  cleanups.push(() => blocker.close());
  for (let round = 0; round < 3; round++) {
    blocker.exec("BEGIN IMMEDIATE");
    await expect(apply(manager, command.createNode())).rejects.toMatchObject({ name: "WriterUnavailableError" });
    blocker.exec("ROLLBACK");
    expect(await apply(manager, command.createNode(), {}, newIdempotencyId())).toMatchObject({ kind: "committed" });
  }
});

test("the writer's connection runs WAL, synchronous=FULL, foreign keys and the configured busy timeout", () => {
  const paths = setup();
  const writer = KwebWriter.open({ databasePath: paths.databasePath, signingKey: loadOrCreateSigningKey(paths.signingKeyPath) });
  cleanups.push(() => writer.close());
  expect(writer.settings()).toEqual({ journalMode: "wal", synchronous: "full", foreignKeys: true, busyTimeoutMs: DEFAULT_BUSY_TIMEOUT_MS });
  expect(DEFAULT_BUSY_TIMEOUT_MS).toBe(250);
  const patient = KwebWriter.open({ databasePath: paths.databasePath, signingKey: loadOrCreateSigningKey(paths.signingKeyPath), busyTimeoutMs: 40 });
  cleanups.push(() => patient.close());
  expect(patient.settings().busyTimeoutMs).toBe(40);
});
