import Database from "better-sqlite3";
import { afterEach, expect, test } from "vitest";
import { holdWriteLock } from "../../helpers/sqlite-lock.js";
import { join } from "node:path";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type KwebManager } from "../../../src/kmap/kweb-manager.js";
import { canonicalCommand } from "../../../src/kmap/canonical-command.js";
import { CommandRuntime } from "../../../src/kmap/command-runtime.js";
import type { CommandEvent } from "../../../src/kmap/command-record.js";
import { CommandStore, CommandStoreError, DurableChanges, openCommandQueue } from "../../../src/kmap/internal.js";
import { canonicalSubmission } from "../../../src/kmap/stored-submission.js";
import { InThreadKwebManager } from "../../../src/kmap/kweb/in-thread-kweb-manager.js";
import { waitFor } from "../../helpers/wait-for.js";
import { KwebReader, KwebWriter, loadOrCreateSigningKey, verifyHistoryChain, verifyTransaction, type KwebTransaction } from "../../../src/kmap/kweb/index.js";
import { command, kwebPaths, newIdempotencyId, type KwebPaths } from "./kweb-fixtures.js";

/**
 * Group apply at the Kweb writer (real SQLite files): several commands in
 * one call, each in a SQLite transaction of its own and each its own signed
 * transaction, made durable by one fsync of the WAL. The history a group
 * writes is exactly the one the same commands write one by one —
 * consecutive sequences, each signed, each chained to the one before it — a
 * rejected command ends the group with nothing of it written, provenance
 * still answers from history, and a failure inside one command's
 * transaction takes back that command only.
 */

const cleanups: Array<() => unknown> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
});

function open(busyTimeoutMs?: number): { paths: KwebPaths; writer: KwebWriter; reader: () => KwebReader } {
  const paths = kwebPaths();
  cleanups.push(() => paths.remove());
  const writer = KwebWriter.open({ databasePath: paths.databasePath, signingKey: loadOrCreateSigningKey(paths.signingKeyPath), busyTimeoutMs });
  cleanups.push(() => writer.close());
  return {
    paths,
    writer,
    reader: () => {
      const reader = KwebReader.open(paths.databasePath);
      cleanups.push(() => reader.close());
      return reader;
    },
  };
}

const request = (cmd: ApplyRequest["command"], expectedTransactionIds: Record<string, string> = {}, idempotencyId = newIdempotencyId()): ApplyRequest => ({
  idempotencyId,
  command: cmd,
  expectedTransactionIds,
});

function history(reader: KwebReader): KwebTransaction[] {
  return [...reader.listTransactions({ limit: 1_000 }).transactions];
}

function committed(outcome: ApplyOutcome | undefined): Extract<ApplyOutcome, { kind: "committed" }> {
  if (outcome?.kind !== "committed") throw new Error(`expected a commit, got ${JSON.stringify(outcome)}`);
  return outcome;
}

function expectVerifiedHistory(reader: KwebReader, provenances: readonly string[]): void {
  const transactions = history(reader);
  expect(transactions.map((t) => t.provenance)).toEqual(provenances);
  expect(transactions.map((t) => t.sequence)).toEqual(provenances.map((_, i) => i + 1));
  expect(verifyHistoryChain(transactions)).toEqual({ valid: true });
  const key = reader.signingKey();
  for (const transaction of transactions) expect(verifyTransaction(transaction, key.publicKey)).toEqual({ valid: true });
}

test("a group commits every command as its own signed, chained transaction, each seeing the ones before it", () => {
  const { writer, reader } = open();
  const create = request(command.createNode({ title: "parent" }));
  const parent = committed(writer.apply(create)).createdNodeId!;
  const rename = request(command.updateNode(parent, { title: "renamed" }));
  const parentTx = committed(writer.applyGroup([rename])[0]).transactionId;

  const child = request(command.createNode({ title: "child", parentId: parent }));
  // The second member quotes the parent's transaction as the group found
  // it; the third quotes the same transaction, which the second replaced
  // inside this very group: it is stale, and ends the group unwritten.
  const seen: [number, ApplyOutcome][] = [];
  const requests: ApplyRequest[] = [child];
  const outcomes = writer.applyGroup(
    (function* () {
      yield child;
      const renameAgain = request(command.updateNode(parent, { title: "again" }), { [parent]: parentTx });
      requests.push(renameAgain);
      yield renameAgain;
      const stale = request(command.updateNode(parent, { title: "stale" }), { [parent]: parentTx });
      requests.push(stale);
      yield stale;
      const never = request(command.createNode({ title: "after the rejection" }));
      requests.push(never);
      yield never;
    })(),
    { afterCommit: (index, outcome) => seen.push([index, outcome]) },
  );
  expect(outcomes.map((o) => o.kind)).toEqual(["committed", "committed"]);
  // Called after each member's own commit; not for the rejected one.
  expect(seen).toEqual([
    [0, outcomes[0]],
    [1, outcomes[1]],
  ]);
  expect(requests).toHaveLength(3); // the group stopped at the stale update: the fourth was never read

  const r = reader();
  expectVerifiedHistory(r, [create.idempotencyId, rename.idempotencyId, requests[0]!.idempotencyId, requests[1]!.idempotencyId]);
  expect(r.getNode({ nodeId: parent })!.title).toBe("again");
  expect(r.getNode({ nodeId: committed(outcomes[0]).createdNodeId! })!.parentId).toBe(parent);

  // The rejected command comes first in the next call, on exactly the state it saw: rejected alone.
  const again = writer.applyGroup([requests[2]!, request(command.createNode({ title: "behind it" }))]);
  expect(again).toEqual([expect.objectContaining({ kind: "rejected", code: "stale_revision" })]);
  expect(history(r)).toHaveLength(4);
});

test("replays inside a group are answered from history, and new commands continue the chain", () => {
  const { writer, reader } = open();
  const first = [request(command.createNode({ title: "a" })), request(command.createNode({ title: "b" }))];
  const original = writer.applyGroup(first);
  expect(original.map((o) => committed(o).replayed)).toEqual([false, false]);
  const fresh = request(command.createNode({ title: "c" }));
  const replayed = writer.applyGroup([...first, fresh]);
  expect(replayed.slice(0, 2)).toEqual(original.map((o) => ({ ...o, replayed: true })));
  expect(committed(replayed[2]).replayed).toBe(false);
  expectVerifiedHistory(reader(), [...first, fresh].map((r) => r.idempotencyId));
});

test("each member is its own SQLite transaction, committed (visible to another connection) before the next one begins", () => {
  const { paths, writer, reader } = open();
  const group = Array.from({ length: 4 }, (_, i) => request(command.createNode({ title: `n${i}` })));
  const observer = new Database(paths.databasePath, { readonly: true });
  cleanups.push(() => observer.close());
  const visible: number[] = [];
  const outcomes = writer.applyGroup(group, {
    afterCommit: () => {
      visible.push((observer.prepare("SELECT count(*) AS n FROM transactions").get() as { n: number }).n);
    },
  });
  expect(outcomes.map((o) => committed(o).replayed)).toEqual([false, false, false, false]);
  // Right after member i's commit, another connection sees it and the ones before it.
  expect(visible).toEqual([1, 2, 3, 4]);
  expectVerifiedHistory(reader(), group.map((r) => r.idempotencyId));
  // The group's commits were NORMAL; the connection is back to FULL after it.
  expect(writer.settings().synchronous).toBe("full");
});

test("an error from afterCommit ends the group unchanged; what was committed stays, and is answered from history when applied again", () => {
  const { writer, reader } = open();
  const group = [request(command.createNode({ title: "a" })), request(command.createNode({ title: "b" })), request(command.createNode({ title: "c" }))];
  const stop = new Error("stopped after the first command");
  expect(() =>
    writer.applyGroup(group, {
      afterCommit: () => {
        throw stop;
      },
    }),
  ).toThrow(stop);
  // The first member committed in its own transaction; the others were never read.
  expectVerifiedHistory(reader(), [group[0]!.idempotencyId]);
  // Applied again: the first is answered from history, the others apply now, once.
  expect(writer.applyGroup(group).map((o) => committed(o).replayed)).toEqual([true, false, false]);
  expectVerifiedHistory(reader(), group.map((r) => r.idempotencyId));
});

test("a write lock taken elsewhere between two members ends the group before the second; at the first it is a writer outage", () => {
  const { paths, writer, reader } = open(0);
  const group = [request(command.createNode({ title: "a" })), request(command.createNode({ title: "b" })), request(command.createNode({ title: "c" }))];
  let lock: { release(): void } | undefined;
  cleanups.push(() => lock?.release());
  const outcomes = writer.applyGroup(
    (function* () {
      yield group[0]!;
      // The first member's transaction is committed: another connection can take the lock now.
      lock = holdWriteLock(paths.databasePath);
      yield group[1]!;
      yield group[2]!;
    })(),
  );
  expect(outcomes.map((o) => committed(o).replayed)).toEqual([false]);
  expect(() => writer.applyGroup(group.slice(1))).toThrow(WriterUnavailableError);
  lock!.release();
  expect(writer.applyGroup(group.slice(1)).map((o) => committed(o).replayed)).toEqual([false, false]);
  expectVerifiedHistory(reader(), group.map((r) => r.idempotencyId));
});

test("once it holds `atLeast` commands, a group takes no more after `until`", () => {
  const { writer, reader } = open();
  const group = Array.from({ length: 6 }, (_, i) => request(command.createNode({ title: `n${i}` })));
  const past = performance.now() - 1;
  expect(writer.applyGroup(group, { until: past })).toHaveLength(1);
  expect(writer.applyGroup(group.slice(1), { until: past, atLeast: 3 })).toHaveLength(3);
  expect(writer.applyGroup(group.slice(4), { until: performance.now() + 60_000, atLeast: 1 })).toHaveLength(2);
  expectVerifiedHistory(reader(), group.map((r) => r.idempotencyId));
});

test("the runtime applies a backlog as groups: strict order, one signed transaction each, a rejected member applied and recorded alone", async () => {
  const { paths, writer, reader } = open();
  const parent = committed(writer.apply(request(command.createNode({ title: "parent" }))));
  const inner = new InThreadKwebManager(writer);
  const groups: string[][] = [];
  // What the lane shows after each command's Kweb commit: how many records are Applying.
  const applying: number[] = [];
  let opened: ReturnType<typeof openCommandQueue> | undefined;
  const manager: KwebManager = {
    ready: () => inner.ready(),
    apply: (r) => inner.apply(r),
    close: () => inner.close(),
    groupApply: {
      apply: (requests, options) => {
        const outcomes = inner.groupApply.apply(requests, {
          ...options,
          afterCommit: (index, outcome) => {
            applying.push(opened!.queue.snapshot().filter((r) => r.state === "applying").length);
            options.afterCommit?.(index, outcome);
          },
        });
        groups.push(outcomes.map((o) => o.kind));
        return outcomes;
      },
    },
  };
  opened = openCommandQueue(join(paths.dir, "commands.sqlite"), manager);
  cleanups.push(() => opened.close());
  const submissions = [
    request(command.updateNode(parent.createdNodeId!, { title: "renamed" }), { [parent.createdNodeId!]: parent.transactionId }),
    request(command.createNode({ title: "b" })),
    // Stale once the first one applied: it ends the first group, unwritten.
    request(command.updateNode(parent.createdNodeId!, { title: "stale" }), { [parent.createdNodeId!]: parent.transactionId }),
    request(command.createNode({ title: "c" })),
    request(command.createNode({ title: "d" })),
  ];
  // Everything is queued before the runtime starts: the backlog is there for it.
  for (const s of submissions) await opened.queue.submit(s);
  const running = opened.runtime.run();
  await waitFor(() => opened.queue.snapshot().every((r) => r.state === "committed" || r.state === "failed"), { what: "every command terminal" });
  await opened.runtime.stop();
  await running;

  // Group 1: the first two (the stale one rolled back); then the stale one alone; then the rest together.
  expect(groups).toEqual([["committed", "committed"], ["rejected"], ["committed", "committed"]]);
  // Only a group's first command is ever Applying: the others stay Queued until their outcome is recorded.
  expect(applying).toEqual([1, 1, 1, 1]);
  expect(opened.queue.snapshot().map((r) => r.state)).toEqual(["committed", "committed", "failed", "committed", "committed"]);
  const events = new Map<string, string[]>();
  const log: CommandEvent[] = [];
  const signal = new AbortController();
  for await (const event of opened.queue.watch({ afterPosition: 0 }, signal.signal)) {
    const id = event.record.submission.idempotencyId;
    log.push(event);
    events.set(id, [...(events.get(id) ?? []), event.kind]);
    if (event.position >= opened.queue.status().latestPosition) break;
  }
  signal.abort();
  for (const [i, s] of submissions.entries()) {
    expect(events.get(s.idempotencyId)).toEqual(["queued", "applying", i === 2 ? "failed" : "committed"]);
  }
  // One lane transaction recorded the first group and took the stale update: consecutive positions, one time.
  // (The next transaction may fall in the same millisecond: the four events
  // are taken by position from the first commit, and share its time.)
  const firstCommit = log.findIndex((f) => f.kind === "committed");
  const shared = log.slice(firstCommit, firstCommit + 4);
  expect(shared.map((e) => e.changedAt)).toEqual(shared.map(() => log[firstCommit]!.changedAt));
  expect(shared.map((e) => [submissions.findIndex((s) => s.idempotencyId === e.record.submission.idempotencyId), e.kind])).toEqual([
    [0, "committed"],
    [1, "applying"],
    [1, "committed"],
    [2, "applying"],
  ]);
  expect(shared.map((e) => e.position - shared[0]!.position)).toEqual([0, 1, 2, 3]);
  const records = opened.queue.snapshot();
  expectVerifiedHistory(reader(), [
    history(reader())[0]!.provenance,
    ...submissions.filter((_, i) => i !== 2).map((s) => s.idempotencyId),
  ]);
  for (const [i, record] of records.entries()) {
    if (i === 2) continue;
    expect(record.transactionId).toBe(history(reader()).find((t) => t.provenance === submissions[i]!.idempotencyId)!.id);
  }
});

test("a lane that fails to record a group ends the runtime with the lane's own error; the restart recovers only the first and applies nothing twice", async () => {
  const { paths, writer, reader } = open();
  const lanePath = join(paths.dir, "commands.sqlite");
  const submissions = Array.from({ length: 3 }, (_, i) => request(command.createNode({ title: `n${i}` })));
  const seed = new CommandStore(lanePath);
  seed.insertQueued(
    submissions.map((s) => ({ idempotencyId: s.idempotencyId, canonical: canonicalSubmission(s.idempotencyId, canonicalCommand(s.command), {}) })),
    Date.now(),
  );
  seed.close();

  const inner = new InThreadKwebManager(writer);
  let lock: { release(): void } | undefined;
  cleanups.push(() => lock?.release());
  const manager: KwebManager = {
    ready: () => inner.ready(),
    apply: (r) => inner.apply(r),
    close: () => inner.close(),
    groupApply: {
      // Another connection takes the lane's write lock while the group is
      // applied: recording its outcomes fails.
      apply: (requests, options) =>
        inner.groupApply.apply(requests, {
          ...options,
          afterCommit: (index, outcome) => {
            lock ??= holdWriteLock(lanePath);
            options.afterCommit?.(index, outcome);
          },
        }),
    },
  };
  const store = new CommandStore(lanePath, { busyTimeoutMs: 0 });
  const runtime = new CommandRuntime(store, manager, new DurableChanges(() => {}));
  const failure = await runtime.run().then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(failure).toBeInstanceOf(CommandStoreError);
  store.close();
  // Every command of the group has its own transaction in Kweb; none is recorded in the lane.
  expectVerifiedHistory(reader(), submissions.map((s) => s.idempotencyId));
  lock!.release();

  const opened = openCommandQueue(lanePath, inner);
  cleanups.push(() => opened.close());
  expect(opened.recovered.map((e) => e.record.submission.idempotencyId)).toEqual([submissions[0]!.idempotencyId]);
  const running = opened.runtime.run();
  await waitFor(() => opened.queue.snapshot().every((r) => r.state === "committed"), { what: "every command committed" });
  await opened.runtime.stop();
  await running;
  // Answered from history: still one transaction each, the ones the failed runtime committed.
  expectVerifiedHistory(reader(), submissions.map((s) => s.idempotencyId));
  expect(opened.queue.snapshot().map((r) => r.attempts)).toEqual([2, 1, 1]);
  expect(opened.queue.snapshot().map((r) => r.transactionId)).toEqual(history(reader()).map((t) => t.id));
});
