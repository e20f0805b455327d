import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, test } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { CommandSchema, type Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import type { Worker } from "node:worker_threads";
import { EmbeddedKwebManager, type KwebWorkerData } from "../../src/kmap/kweb/index.js";
import {
  FIRST_RETRY_DELAY_MS,
  KwebTaskError,
  MAX_RETRY_DELAY_MS,
  openKmapCore,
  type CommandRecord,
  type KmapCore,
} from "../../src/kmap/index.js";
import { openCommandQueue, WorkerLane, type ApplyFaults } from "../../src/kmap/internal.js";
import { ManualClock } from "../helpers/manual-clock.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The runtime against real SQLite files and the real embedded Kweb: strict
 * submission order, writer outages that hold later commands, terminal
 * failures that do not, the bounded backoff schedule (on an injected
 * clock, never with sleeps), the in-memory wake-up, and a manager failure
 * that ends the runtime and is recovered exactly once. The clock and the
 * apply faults pass through to the lane in the Kweb worker thread, whose
 * own manager (group apply and all) applies every command, so these run
 * the production path.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function openCore(options: { clock: ManualClock; applyFaults?: ApplyFaults; directory?: string }) {
  const directory = options.directory ?? (await mkdtemp(join(tmpdir(), "laneway-kmap-runtime-")));
  if (!options.directory) cleanups.push(() => rm(directory, { recursive: true, force: true }));
  const core = await openKmapCore({ directory, clock: options.clock, ...(options.applyFaults ? { applyFaults: options.applyFaults } : {}) });
  // The seams keep the production topology: the lane runs in the Kweb worker thread.
  expect(core.runtime).toBeInstanceOf(WorkerLane);
  let closed = false;
  const close = async () => {
    if (!closed) await core.close();
    closed = true;
  };
  cleanups.push(close);
  const running = core.runtime.run().then(
    () => undefined,
    (error: unknown) => error,
  );
  return { core, directory, running, close };
}

function command(operation: MessageInitShape<typeof CommandSchema>["operation"]): Command {
  return create(CommandSchema, { operation });
}

let counter = 0;
function freshId(): string {
  counter += 1;
  return counter.toString(16).padStart(32, "0");
}

async function submit(core: KmapCore, operation: MessageInitShape<typeof CommandSchema>["operation"], expected: Record<string, string> = {}) {
  const idempotencyId = freshId();
  await core.queue.submit({ idempotencyId, command: command(operation), expectedTransactionIds: expected });
  return idempotencyId;
}

function recordOf(core: KmapCore, id: string): CommandRecord {
  return core.queue.get({ idempotencyId: id })!;
}

function terminal(core: KmapCore, id: string): Promise<CommandRecord> {
  return waitFor(() => {
    const record = recordOf(core, id);
    return record.state === "committed" || record.state === "failed" ? record : undefined;
  }, { what: `command ${id} to finish` });
}

const missingNode = "ffffffffffffffffffffffffffffffff";

describe("order", () => {
  test("a new submission is applied at once, without the clock moving", async () => {
    const clock = new ManualClock();
    const { core } = await openCore({ clock });
    const id = await submit(core, { case: "createNode", value: { kind: "topic", title: "Rivers" } });
    const record = await terminal(core, id);
    expect(record.state).toBe("committed");
    expect(record.attempts).toBe(1);
    expect(record.createdNodeId).toMatch(/^[0-9a-f]{32}$/);
    expect(core.reader.getNode({ nodeId: record.createdNodeId! })?.visibleTransactionId).toBe(record.transactionId);
  });

  test("terminal failures do not block later commands", async () => {
    const clock = new ManualClock();
    const { core } = await openCore({ clock });
    const missing = await submit(core, { case: "updateNode", value: { nodeId: missingNode, title: "x" } });
    const selfLinkParent = await submit(core, { case: "createNode", value: { kind: "topic", title: "A" } });
    const later = await submit(core, { case: "createNode", value: { kind: "topic", title: "B" } });
    const failed = await terminal(core, missing);
    expect(failed.state).toBe("failed");
    expect(failed.error).toEqual({ code: "missing_node", message: `node ${missingNode} does not exist` });
    expect((await terminal(core, selfLinkParent)).state).toBe("committed");
    expect((await terminal(core, later)).state).toBe("committed");

    const created = recordOf(core, selfLinkParent).createdNodeId!;
    const selfLink = await submit(core, { case: "linkNodes", value: { fromId: created, toId: created, linkType: "cites" } });
    const stale = await submit(core, { case: "updateNode", value: { nodeId: created, title: "A2" } }, { [created]: "0".repeat(32) });
    const after = await submit(core, { case: "updateNode", value: { nodeId: created, title: "A3" } });
    expect((await terminal(core, selfLink)).error?.code).toBe("invalid_input");
    expect((await terminal(core, stale)).error?.code).toBe("stale_revision");
    expect((await terminal(core, after)).state).toBe("committed");
    expect(core.reader.getNode({ nodeId: created })?.title).toBe("A3");
  });

  test("a writer outage holds the command and every later one until it clears, then all apply in order", async () => {
    const clock = new ManualClock();
    const { core, directory } = await openCore({ clock });
    // A real second writer: another connection holds the Kweb file's write lock.
    const blocker = new Database(join(directory, "kweb.sqlite"));
    cleanups.push(async () => blocker.close());
    blocker.exec("BEGIN IMMEDIATE");

    const first = await submit(core, { case: "createNode", value: { kind: "topic", title: "first" } });
    const second = await submit(core, { case: "createNode", value: { kind: "topic", title: "second" } });
    const third = await submit(core, { case: "createNode", value: { kind: "topic", title: "third" } });

    const deferred = await waitFor(() => {
      const record = recordOf(core, first);
      return record.state === "queued" && record.attempts === 1 ? record : undefined;
    }, { what: "the first retry to be scheduled" });
    expect(deferred.error?.code).toBe("writer_unavailable");
    expect(deferred.nextAttemptAt! - deferred.updatedAt).toBe(FIRST_RETRY_DELAY_MS);
    await waitFor(() => clock.sleeping === 1, { what: "the runtime to wait on the clock" });
    expect(recordOf(core, second)).toMatchObject({ state: "queued", attempts: 0 });
    expect(recordOf(core, third)).toMatchObject({ state: "queued", attempts: 0 });

    // Still locked at the first retry: the head is deferred again, with a doubled delay.
    clock.advance(FIRST_RETRY_DELAY_MS);
    const again = await waitFor(() => (recordOf(core, first).attempts === 2 && recordOf(core, first).state === "queued" ? recordOf(core, first) : undefined), {
      what: "the second retry",
    });
    expect(again.nextAttemptAt! - again.updatedAt).toBe(2 * FIRST_RETRY_DELAY_MS);
    expect(recordOf(core, second).attempts).toBe(0);

    blocker.exec("ROLLBACK");
    await waitFor(() => clock.sleeping === 1, { what: "the runtime to wait for the next retry" });
    clock.advance(2 * FIRST_RETRY_DELAY_MS);
    const records = [await terminal(core, first), await terminal(core, second), await terminal(core, third)];
    expect(records.map((r) => r.state)).toEqual(["committed", "committed", "committed"]);
    const sequences = records.map((r) => core.reader.getTransaction({ transactionId: r.transactionId! })!.sequence);
    expect(sequences).toEqual([1, 2, 3]);
  });
});

describe("backoff", () => {
  test("doubles from one second and is bounded at 60 seconds", async () => {
    const clock = new ManualClock();
    let outages = 9;
    const { core } = await openCore({
      clock,
      applyFaults: { before: () => (outages-- > 0 ? "writer_unavailable" : undefined) },
    });
    const id = await submit(core, { case: "createNode", value: { kind: "topic", title: "patient" } });
    const delays: number[] = [];
    for (let attempt = 1; attempt <= 9; attempt++) {
      const record = await waitFor(() => {
        const r = recordOf(core, id);
        return r.state === "queued" && r.attempts === attempt ? r : undefined;
      }, { what: `retry ${attempt}` });
      delays.push(record.nextAttemptAt! - record.updatedAt);
      await waitFor(() => clock.sleeping === 1, { what: "the runtime to wait on the clock" });
      // One millisecond early changes nothing: the head is not due yet.
      clock.advance(record.nextAttemptAt! - clock.now() - 1);
      expect(recordOf(core, id).attempts).toBe(attempt);
      clock.advance(1);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
    expect(Math.max(...delays)).toBe(MAX_RETRY_DELAY_MS);
    const record = await terminal(core, id);
    expect(record).toMatchObject({ state: "committed", attempts: 10, error: undefined });
  });
});

describe("group apply under injected faults", () => {
  test("an outage behind the head of a group ends the group before that command; it leads the next attempt and every command commits once, in order", async () => {
    const clock = new ManualClock();
    const asked: string[] = [];
    const refuse = new Set<string>();
    const { core } = await openCore({
      clock,
      applyFaults: {
        before: (idempotencyId) => {
          asked.push(idempotencyId);
          return refuse.delete(idempotencyId) ? "writer_unavailable" : undefined;
        },
      },
    });
    // The head meets an outage first, so that the two behind it are queued
    // and due together when it is retried: the retry leads a group of three.
    const first = freshId();
    const second = freshId();
    const third = freshId();
    refuse.add(first);
    refuse.add(second);
    await core.queue.submit({ idempotencyId: first, command: command({ case: "createNode", value: { kind: "topic", title: "first" } }), expectedTransactionIds: {} });
    await waitFor(() => (recordOf(core, first).state === "queued" && recordOf(core, first).attempts === 1 ? true : undefined), { what: "the head's retry" });
    await waitFor(() => clock.sleeping === 1, { what: "the runtime to wait on the clock" });
    for (const [id, title] of [[second, "second"], [third, "third"]] as const) {
      await core.queue.submit({ idempotencyId: id, command: command({ case: "createNode", value: { kind: "topic", title } }), expectedTransactionIds: {} });
    }
    clock.advance(FIRST_RETRY_DELAY_MS);
    const records = [await terminal(core, first), await terminal(core, second), await terminal(core, third)];
    expect(records.map((r) => r.state)).toEqual(["committed", "committed", "committed"]);
    // The second was cut from the group before anything of it was written:
    // not an attempt of its own, and no retry.
    expect(records.map((r) => r.attempts)).toEqual([2, 1, 1]);
    expect(records[1]!.error).toBeUndefined();
    expect(asked).toEqual([first, first, second, second, third]);
    const sequences = records.map((r) => core.reader.getTransaction({ transactionId: r.transactionId! })!.sequence);
    expect(sequences).toEqual([1, 2, 3]);
    expect(core.reader.listTransactions({ limit: 10, provenance: second }).transactions).toHaveLength(1);
  });
});

describe("failures of the runtime itself", () => {
  test("a manager failure ends the runtime; reopening recovers the record and applies it exactly once", async () => {
    const clock = new ManualClock();
    const directory = await mkdtemp(join(tmpdir(), "laneway-kmap-runtime-"));
    cleanups.push(() => rm(directory, { recursive: true, force: true }));
    // The manager commits the command in Kweb, then fails before answering:
    // the worst moment, seen from the lane.
    const failedAfter: string[] = [];
    const first = await openCore({
      clock,
      directory,
      applyFaults: {
        after: (idempotencyId) => {
          failedAfter.push(idempotencyId);
          return "fail";
        },
      },
    });
    const id = await submit(first.core, { case: "createNode", value: { kind: "topic", title: "once" } });
    const error = await first.running;
    expect(error).toBeInstanceOf(KwebTaskError);
    expect(failedAfter).toEqual([id]);
    expect(recordOf(first.core, id).state).toBe("applying");
    await first.close();

    const second = await openCore({ clock, directory });
    const record = await terminal(second.core, id);
    expect(record.state).toBe("committed");
    const history = second.core.reader.listTransactions({ limit: 10, provenance: id });
    expect(history.transactions).toHaveLength(1);
    expect(history.transactions[0]!.id).toBe(record.transactionId);
    const kinds: string[] = [];
    for await (const event of second.core.queue.watch({ afterPosition: 0, idempotencyId: id }, AbortSignal.timeout(60_000))) {
      kinds.push(event.kind);
      if (event.kind === "committed") break;
    }
    expect(kinds).toEqual(["queued", "applying", "recovered", "applying", "committed"]);
  });

  test("a Kweb writer thread that dies while the runtime is idle ends the runtime at once", async () => {
    const directory = await mkdtemp(join(tmpdir(), "laneway-kmap-runtime-"));
    cleanups.push(() => rm(directory, { recursive: true, force: true }));
    class ObservedManager extends EmbeddedKwebManager {
      worker: Worker | undefined;
      protected override spawnWorker(workerData: KwebWorkerData): Worker {
        this.worker = super.spawnWorker(workerData);
        return this.worker;
      }
    }
    const manager = new ObservedManager({ databasePath: join(directory, "kweb.sqlite"), signingKeyPath: join(directory, "signing-key.pem") });
    const opened = openCommandQueue(join(directory, "commands.sqlite"), manager, { clock: new ManualClock() });
    cleanups.push(async () => {
      await manager.close();
      opened.close();
    });
    const running = opened.runtime.run().then(
      () => undefined,
      (error: unknown) => error,
    );
    await manager.ready();
    await manager.worker!.terminate();
    const error = await running;
    expect(error).toBeInstanceOf(KwebTaskError);
    expect((error as KwebTaskError).cause).toMatchObject({ failure: "worker_stopped" });
  });
});
