import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { WatchPositionPrunedSchema } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { openKmapCore, PositionPrunedError, type CommandEvent, type KmapCore } from "../../src/kmap/index.js";
import { kmapClients } from "../helpers/kmap-clients.js";
import { holdWriteLock } from "../helpers/sqlite-lock.js";
import { generateTokens, startLanewayProcess } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The change log behind WatchCommands is bounded: the oldest entries are
 * pruned past a retention (a count), never those of an unfinished command,
 * and a watch from a pruned position fails with a typed error that says
 * where the log is complete from — in the library and over the wire.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function newDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), "laneway-kmap-retention-"));
  cleanups.push(() => rm(directory, { recursive: true, force: true }));
  return directory;
}

const id = (n: number) => n.toString(16).padStart(32, "0");
const createNode = (title: string) => create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title } } });

async function openCore(directory: string, eventRetention: number): Promise<KmapCore> {
  const core = await openKmapCore({ directory, eventRetention });
  void core.runtime.run();
  let closed = false;
  cleanups.push(async () => {
    if (!closed) await core.close();
    closed = true;
  });
  return core;
}

async function submitAndFinish(core: KmapCore, from: number, count: number): Promise<void> {
  for (let n = from; n < from + count; n++) await core.queue.submit({ idempotencyId: id(n), command: createNode(`n${n}`), expectedTransactionIds: {} });
  await waitFor(() => {
    const last = core.queue.get({ idempotencyId: id(from + count - 1) });
    return last?.state === "committed";
  }, { what: "the commands to commit" });
}

/** How many changes the log holds now. */
function held(core: KmapCore): number {
  const { oldestPosition, latestPosition } = core.queue.status();
  return latestPosition - oldestPosition + 1;
}

async function take(events: AsyncGenerator<CommandEvent>, count: number): Promise<CommandEvent[]> {
  const out: CommandEvent[] = [];
  for await (const event of events) {
    out.push(event);
    if (out.length === count) break;
  }
  return out;
}

test("the oldest changes are pruned past the retention; a watch from a pruned position fails with where to resume", { timeout: 60_000 }, async () => {
  const directory = await newDirectory();
  const core = await openCore(directory, 20);
  // Each command records at least its Queued and its Committed change; how
  // many Applying changes lie between depends on how the runtime grouped
  // the applies, which is timing, not contract.
  await submitAndFinish(core, 1, 30);
  // Pruning runs after each write of the runtime, so it may still be one
  // write behind when the last command shows as committed: once every
  // command has finished, the log holds exactly the retention.
  await waitFor(() => held(core) === 20, { what: "pruning to catch up" });
  const { oldestPosition, latestPosition } = core.queue.status();
  expect(latestPosition).toBeGreaterThanOrEqual(60);
  expect(latestPosition).toBeLessThanOrEqual(90);
  expect(latestPosition - oldestPosition + 1).toBeLessThanOrEqual(21);

  const signal = AbortSignal.timeout(30_000);
  const error = await take(core.queue.watch({ afterPosition: 0 }, signal), 1).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PositionPrunedError);
  expect(error).toMatchObject({ reason: "position_pruned", requestedPosition: 0, oldestPosition, resumeAfterPosition: oldestPosition - 1 });
  expect((error as Error).message).toContain(`watch after position ${oldestPosition - 1}`);

  // From where it says, the watch gets every change still held, in order.
  const resumed = await take(core.queue.watch({ afterPosition: oldestPosition - 1 }, signal), latestPosition - oldestPosition + 1);
  expect(resumed.map((e) => e.position)).toEqual(Array.from({ length: latestPosition - oldestPosition + 1 }, (_, i) => oldestPosition + i));

  // A watch of one command is refused only when that command's own changes are gone.
  const [committed] = await take(core.queue.watch({ afterPosition: 0, idempotencyId: id(30) }, signal), 1);
  expect(committed?.kind).toBe("queued");
  await expect(take(core.queue.watch({ afterPosition: 0, idempotencyId: id(1) }, signal), 1)).rejects.toBeInstanceOf(PositionPrunedError);
  // A command that does not exist yet has lost nothing either: its watch waits.
  const future = take(core.queue.watch({ afterPosition: 0, idempotencyId: id(99) }, signal), 1);
  await core.queue.submit({ idempotencyId: id(99), command: createNode("future"), expectedTransactionIds: {} });
  expect((await future)[0]?.record.submission.idempotencyId).toBe(id(99));
});

test("the changes of unfinished commands are never pruned", { timeout: 60_000 }, async () => {
  const directory = await newDirectory();
  const core = await openCore(directory, 5);
  await submitAndFinish(core, 1, 3);
  // With the Kweb file locked elsewhere, commands stay unfinished: each
  // deferred attempt adds changes, and none of theirs may go.
  const lock = holdWriteLock(join(directory, "kweb.sqlite"));
  cleanups.push(async () => lock.release());
  for (let n = 10; n < 16; n++) await core.queue.submit({ idempotencyId: id(n), command: createNode(`held ${n}`), expectedTransactionIds: {} });
  await waitFor(() => core.queue.get({ idempotencyId: id(10) })?.error?.code === "writer_unavailable", { what: "a deferred attempt" });
  const [first] = await take(core.queue.watch({ afterPosition: 0, idempotencyId: id(10) }, AbortSignal.timeout(30_000)), 1);
  expect(first?.kind).toBe("queued");
  lock.release();
  await waitFor(() => core.queue.get({ idempotencyId: id(15) })?.state === "committed", { timeoutMs: 30_000, what: "the held commands to commit" });
  await waitFor(() => core.queue.status().latestPosition - core.queue.status().oldestPosition + 1 <= 6, { what: "pruning once they finished" });
});

test("over the wire: aborted, reason position_pruned, and a WatchPositionPruned detail", { timeout: 120_000 }, async () => {
  const dataDir = await newDirectory();
  const core = await openCore(join(dataDir, "kmap"), 10);
  await submitAndFinish(core, 1, 10);
  await waitFor(() => held(core) === 10, { what: "pruning to catch up" });
  const { oldestPosition, latestPosition } = core.queue.status();
  await core.close();

  const laneway = await startLanewayProcess({ dataDir, tokens: generateTokens(), lanesConfig: false });
  cleanups.push(() => laneway.remove());
  const { commands } = kmapClients(laneway);
  const listed = await commands.listCommands({});
  expect(listed.status).toMatchObject({ oldestPosition: BigInt(oldestPosition), latestPosition: BigInt(latestPosition) });

  let error: ConnectError | undefined;
  try {
    for await (const change of commands.watchCommands({ afterPosition: 0n })) throw new Error(`unexpected change ${change.position}`);
  } catch (e) {
    error = ConnectError.from(e);
  }
  expect(error?.code).toBe(Code.Aborted);
  expect(error?.findDetails(ErrorDetailSchema)[0]).toMatchObject({ reason: "position_pruned", domain: "kmap" });
  expect(error?.findDetails(WatchPositionPrunedSchema)[0]).toMatchObject({
    requestedAfterPosition: 0n,
    oldestPosition: BigInt(oldestPosition),
    resumeAfterPosition: BigInt(oldestPosition - 1),
  });
  // Resuming where it says works.
  const signal = AbortSignal.timeout(30_000);
  const positions: bigint[] = [];
  for await (const change of commands.watchCommands({ afterPosition: BigInt(oldestPosition - 1) }, { signal })) {
    positions.push(change.position);
    if (change.position === BigInt(latestPosition)) break;
  }
  expect(positions[0]).toBe(BigInt(oldestPosition));
});
