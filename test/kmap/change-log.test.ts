import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { ChangeFeed } from "../../src/kmap/change-feed.js";
import { type CommandEvent, type CommandQueue, type KwebManager } from "../../src/kmap/index.js";
import { openCommandQueue } from "../../src/kmap/internal.js";

/**
 * The change log behind WatchCommands: a watcher far behind reads SQLite, a
 * watcher that keeps up reads the feed's memory, and both see the same
 * changes in position order; a filtered watcher sees only its command's.
 * The runtime does not run here: every change is a `queued` one.
 */

const idle: KwebManager = {
  ready: () => new Promise(() => {}),
  apply: () => Promise.reject(new Error("the runtime does not run in this test")),
  close: async () => {},
};

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

const id = (n: number) => n.toString(16).padStart(32, "0");

async function submitMany(lane: CommandQueue, from: number, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: count }, (_, i) =>
      lane.submit({
        idempotencyId: id(from + i),
        command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: `n${from + i}` } } }),
        expectedTransactionIds: {},
      }),
    ),
  );
}

async function take(events: AsyncGenerator<CommandEvent>, count: number): Promise<CommandEvent[]> {
  const out: CommandEvent[] = [];
  for await (const event of events) {
    out.push(event);
    if (out.length === count) break;
  }
  return out;
}

test("watchers far behind, keeping up, and filtered all see the log in order", async () => {
  const dir = await mkdtemp(join(tmpdir(), "laneway-kmap-log-"));
  dirs.push(dir);
  const { queue: lane, close } = openCommandQueue(join(dir, "commands.sqlite"), idle);
  const total = ChangeFeed.RECENT * 2 + 52; // more than memory keeps
  await submitMany(lane, 1, total);
  const signal = AbortSignal.timeout(60_000);

  const fromStart = await take(lane.watch({ afterPosition: 0 }, signal), total);
  expect(fromStart.map((e) => e.position)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  expect(fromStart.map((e) => e.record.submission.idempotencyId)).toEqual(Array.from({ length: total }, (_, i) => id(i + 1)));

  const recent = await take(lane.watch({ afterPosition: total - 100 }, signal), 100);
  expect(recent).toEqual(fromStart.slice(-100));

  const filtered = lane.watch({ afterPosition: 0, idempotencyId: id(7) }, signal);
  const [only] = await take(filtered, 1);
  expect(only?.record.submission.idempotencyId).toBe(id(7));

  // A watcher at the end waits, then receives each new change.
  const live = take(lane.watch({ afterPosition: total }, signal), 5);
  await submitMany(lane, total + 1, 5);
  expect((await live).map((e) => e.position)).toEqual([1, 2, 3, 4, 5].map((n) => total + n));
  close();
});
