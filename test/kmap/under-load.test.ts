import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CommandSchema, CommandState } from "../../gen/laneway/kmap/v1/command_pb.js";
import { CommandEventKind, KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { kmapClients, waitUntilTerminal } from "../helpers/kmap-clients.js";
import { holdWriteLockInProcess, type ExternalLock } from "../helpers/kmap-external-lock.js";
import { historyId, writeCommandHistory } from "../helpers/kmap-history.js";
import { rawWatch, type RawWatch } from "../helpers/kmap-raw-watch.js";
import { generateTokens, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The Kmap command lane under load, with `laneway serve` as a child process
 * and the load coming from this one: the runtime keeps applying while
 * submissions flood in; a lock another process holds on either SQLite file
 * delays only Kmap work; the backlog is bounded; and replays of a long
 * change log share the event loop. Nothing is timed: each test asserts an
 * order of events ("answered while the submission was still waiting",
 * "committed before the flood was over").
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function start(options: { lanes?: boolean; args?: string[]; dataDir?: string } = {}): Promise<ChildLaneway> {
  const laneway = await startLanewayProcess({
    ...(options.lanes ? {} : { lanesConfig: false as const }),
    ...(options.args ? { args: options.args } : {}),
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
    tokens: generateTokens(),
  });
  cleanups.push(() => laneway.remove());
  return laneway;
}

const newId = () => randomBytes(16).toString("hex");
const createNode = (title: string) => create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title } } });

function reasonOf(error: unknown): string | undefined {
  return ConnectError.from(error).findDetails(ErrorDetailSchema)[0]?.reason;
}

function logLines(laneway: ChildLaneway): Record<string, unknown>[] {
  return laneway.stderr.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

/** Tracks whether a promise has settled, so a test can assert what happened before it did. */
function track<T>(promise: Promise<T>): { readonly settled: boolean; readonly promise: Promise<T> } {
  let settled = false;
  const tracked = promise.finally(() => (settled = true));
  tracked.catch(() => {});
  return {
    get settled() {
      return settled;
    },
    promise: tracked,
  };
}

test("64 submitters flood the lane while a watcher sees commands reach Committed throughout the flood", { timeout: 180_000 }, async () => {
  const laneway = await start();
  const { commands } = kmapClients(laneway);
  const submitters = 64;
  const perSubmitter = 12;
  const total = submitters * perSubmitter;

  // The watcher keeps every Queued and Committed change, in the change log's order.
  const changes: { position: bigint; kind: CommandEventKind; sequence: bigint; id: string }[] = [];
  let committed = 0;
  const watchAbort = new AbortController();
  const watching = (async () => {
    for await (const change of commands.watchCommands({ afterPosition: 0n }, { signal: watchAbort.signal })) {
      if (change.kind !== CommandEventKind.QUEUED && change.kind !== CommandEventKind.COMMITTED) continue;
      changes.push({ position: change.position, kind: change.kind, sequence: change.record!.sequence, id: change.record!.submission!.idempotencyId });
      if (change.kind === CommandEventKind.COMMITTED && ++committed === total) return;
    }
  })().catch((error: unknown) => {
    if (!watchAbort.signal.aborted) throw error;
  });

  const ids: string[] = [];
  await Promise.all(
    Array.from({ length: submitters }, async (_, s) => {
      for (let i = 0; i < perSubmitter; i++) {
        const idempotencyId = newId();
        ids.push(idempotencyId);
        const response = await commands.submitCommand({ idempotencyId, command: createNode(`flood ${s}.${i}`) });
        expect(response.existing).toBe(false);
      }
    }),
  );
  await waitUntilTerminal(commands, ids, 120_000);
  await watching;
  watchAbort.abort();

  const positions = changes.map((c) => c.position);
  expect(positions).toEqual([...positions].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
  const queued = changes.filter((c) => c.kind === CommandEventKind.QUEUED);
  const commits = changes.filter((c) => c.kind === CommandEventKind.COMMITTED);
  // Every submission was queued once, in submission order, and committed exactly once, in that same order.
  expect(new Set(queued.map((c) => c.id))).toEqual(new Set(ids));
  expect(queued.map((c) => c.sequence)).toEqual(Array.from({ length: total }, (_, i) => BigInt(i + 1)));
  expect(commits.map((c) => c.id)).toEqual(queued.map((c) => c.id));
  // Commands kept reaching Committed while submissions poured in, in the
  // change log's own order (the server's, not when this process heard of
  // it): between the first and last queueing of every quarter of the flood,
  // not only once it was over. (With at most 64 submissions in flight, a
  // quarter's 192 queueings span at least three of the lane's group commits,
  // and the runtime takes its turn between two of them.)
  const quarters = [0, 1, 2, 3].map((q) => {
    const from = changes.indexOf(queued[(q * total) / 4]!);
    const to = changes.indexOf(queued[((q + 1) * total) / 4 - 1]!);
    return changes.slice(from, to).filter((c) => c.kind === CommandEventKind.COMMITTED).length;
  });
  expect(quarters.slice(1).every((n) => n > 0), `commits within each quarter of the queueings: ${quarters.join(", ")}`).toBe(true);
});

describe("a lock another process holds on a Kmap SQLite file delays only Kmap work", () => {
  for (const file of ["commands.sqlite", "kweb.sqlite"] as const) {
    test(`${file}: health, reflection, lanes and Kmap reads answer while a submission waits`, { timeout: 120_000 }, async () => {
      const laneway = await start({ lanes: true });
      const { commands, read } = kmapClients(laneway);
      const first = newId();
      await commands.submitCommand({ idempotencyId: first, command: createNode("before the lock") });
      const committed = (await waitUntilTerminal(commands, [first])).get(first)!;
      expect(committed.state).toBe(CommandState.COMMITTED);

      const lock: ExternalLock = await holdWriteLockInProcess(join(laneway.dataDir, "kmap", file));
      let released = false;
      cleanups.push(async () => {
        if (!released) await lock.release();
      });
      // On the lane's database the submission waits for the lock (in the
      // worker thread, up to the lane's busy timeout); on the Kweb file it is
      // stored at once and its apply waits (writer unavailable, retried).
      const second = newId();
      const submitted = track(commands.submitCommand({ idempotencyId: second, command: createNode("during the lock") }));
      const applied = track(waitUntilTerminal(commands, [second], 120_000));

      const health = laneway.clients.client(Health, { protocol: "grpc" });
      const reflection = laneway.clients.client(ServerReflection, { protocol: "grpc" });
      const lanes = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
      // On the lane's database the submission waits at most the lane's 5 s
      // busy timeout; every answer below must come before it does.
      expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      expect((await health.check({ service: KmapCommandService.typeName })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      for await (const answer of reflection.serverReflectionInfo(
        (async function* () {
          yield { messageRequest: { case: "listServices" as const, value: "" } };
        })(),
      )) {
        expect(answer.messageResponse.case).toBe("listServicesResponse");
      }
      expect((await lanes.getRegistry({})).project).toBe("atlas");
      expect((await read.getNode({ nodeId: committed.createdNodeId })).node?.title).toBe("before the lock");
      expect((await commands.getCommand({ idempotencyId: first })).record?.state).toBe(CommandState.COMMITTED);
      // All of that was answered while the Kmap work was still held up.
      if (file === "commands.sqlite") expect(submitted.settled).toBe(false);
      else expect((await submitted.promise).existing).toBe(false);
      expect(applied.settled).toBe(false);

      await lock.release();
      released = true;
      // The lane's busy timeout may have run out while the lock was held:
      // then the submission was refused as unavailable and nothing was
      // stored, and it is submitted again.
      try {
        await submitted.promise;
      } catch (error) {
        expect(ConnectError.from(error).code).toBe(Code.Unavailable);
        expect(reasonOf(error)).toBe("unavailable");
        await commands.submitCommand({ idempotencyId: second, command: createNode("during the lock") });
      }
      expect((await waitUntilTerminal(commands, [second], 120_000)).get(second)?.state).toBe(CommandState.COMMITTED);
      expect((await health.check({ service: KmapCommandService.typeName })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    });
  }
});

test("the backlog limit: submissions past it are refused at once with backlog_full, the accepted ones all commit", { timeout: 120_000 }, async () => {
  const limit = 12;
  const laneway = await start({ args: ["--kmap-max-pending", String(limit)] });
  const { commands } = kmapClients(laneway);
  // While the Kweb file is locked elsewhere nothing can finish, so the
  // backlog fills up and stays full.
  const lock = await holdWriteLockInProcess(join(laneway.dataDir, "kmap", "kweb.sqlite"));
  let released = false;
  cleanups.push(async () => {
    if (!released) await lock.release();
  });

  const accepted: string[] = [];
  for (let i = 0; i < limit; i++) {
    const idempotencyId = newId();
    await commands.submitCommand({ idempotencyId, command: createNode(`accepted ${i}`) });
    accepted.push(idempotencyId);
  }
  const refusedIds = [newId(), newId(), newId()];
  const refusals = await Promise.all(
    refusedIds.map((idempotencyId, i) =>
      commands.submitCommand({ idempotencyId, command: createNode(`refused ${i}`) }).then(
        () => undefined,
        (error: unknown) => ConnectError.from(error),
      ),
    ),
  );
  for (const error of refusals) {
    expect(error?.code).toBe(Code.ResourceExhausted);
    expect(reasonOf(error)).toBe("backlog_full");
    expect(error?.rawMessage).toContain(`${limit} commands are waiting`);
  }
  // The refusals came while the lock still held every accepted command back.
  const listed = await commands.listCommands({});
  expect(listed.records.map((r) => r.submission!.idempotencyId)).toEqual(accepted);
  expect(listed.records.every((r) => r.state === CommandState.QUEUED || r.state === CommandState.APPLYING)).toBe(true);
  expect(listed.status).toMatchObject({ pendingCommands: BigInt(limit), maxPendingCommands: BigInt(limit) });
  // Repeating an accepted submission still answers with its record.
  const again = await commands.submitCommand({ idempotencyId: accepted[0]!, command: createNode("accepted 0") });
  expect(again.existing).toBe(true);
  // Nothing refused was stored.
  for (const idempotencyId of refusedIds) {
    await expect(commands.getCommand({ idempotencyId })).rejects.toMatchObject({ code: Code.NotFound });
  }
  await waitFor(() => logLines(laneway).some((l) => l.level === "warn" && String(l.msg).includes("backlog is full")), { what: "the backlog log line" });
  expect(logLines(laneway).find((l) => String(l.msg).includes("backlog is full"))).toMatchObject({ pending: limit, maxPending: limit });

  await lock.release();
  released = true;
  const records = await waitUntilTerminal(commands, accepted, 120_000);
  expect(accepted.map((id) => records.get(id)!.state)).toEqual(accepted.map(() => CommandState.COMMITTED));
  // With room again, a new submission is accepted.
  const later = newId();
  expect((await commands.submitCommand({ idempotencyId: later, command: createNode("later") })).existing).toBe(false);
  expect((await commands.listCommands({})).status?.maxPendingCommands).toBe(BigInt(limit));
});

describe("replays of a long change log share the event loop", () => {
  const commandsInHistory = 34_000; // 102,000 change-log entries

  async function startWithHistory(): Promise<{ laneway: ChildLaneway; latest: number }> {
    const dataDir = await mkdtemp(join(tmpdir(), "laneway-kmap-history-"));
    cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
    const latest = writeCommandHistory(dataDir, commandsInHistory);
    expect(latest).toBeGreaterThanOrEqual(100_000);
    return { laneway: await start({ dataDir }), latest };
  }

  test("eight watches replaying 100,000+ changes: health and GetCommand answer before the replays finish", { timeout: 180_000 }, async () => {
    const { laneway, latest } = await startWithHistory();
    const watches: RawWatch[] = Array.from({ length: 8 }, () => rawWatch(laneway.url, laneway.tokens.admin, { afterPosition: 0 }));
    cleanups.push(async () => {
      for (const watch of watches) watch.destroy();
    });
    await waitFor(() => watches.every((w) => w.received > 0), { timeoutMs: 60_000, what: "every replay to be under way" });

    const { commands } = kmapClients(laneway);
    const health = laneway.clients.client(Health, { protocol: "grpc" });
    const replaysDone = () => watches.filter((w) => w.lastPosition >= latest).length;
    for (let i = 0; i < 5; i++) {
      expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      const { record } = await commands.getCommand({ idempotencyId: historyId(commandsInHistory - i) });
      expect(record?.state).toBe(CommandState.COMMITTED);
      expect(replaysDone(), `answered while ${watches.map((w) => w.lastPosition).join(", ")} of ${latest} were replayed`).toBe(0);
    }
    // A replay runs to the end: every change, once (the others are let go
    // here; replaying 800,000 messages proves nothing more).
    for (const watch of watches.slice(1)) watch.destroy();
    await waitFor(() => watches[0]!.lastPosition >= latest, { timeoutMs: 150_000, what: "the replay to reach the end" });
    expect(watches[0]!.received).toBe(latest);
  });

  test("a client that goes away in the middle of a replay ends it quietly", { timeout: 120_000 }, async () => {
    const { laneway, latest } = await startWithHistory();
    const watches = Array.from({ length: 4 }, () => rawWatch(laneway.url, laneway.tokens.admin, { afterPosition: 0 }));
    await waitFor(() => watches.every((w) => w.received > 1_000), { timeoutMs: 60_000, what: "the replays to be under way" });
    for (const watch of watches) {
      expect(watch.lastPosition).toBeLessThan(latest);
      watch.destroy();
    }
    // The server carries on serving, and later watches replay from the start.
    const { commands } = kmapClients(laneway);
    const after = rawWatch(laneway.url, laneway.tokens.admin, { afterPosition: latest - 10 });
    cleanups.push(async () => after.destroy());
    await waitFor(() => after.lastPosition === latest, { what: "a new watch to replay the end of the log" });
    expect((await commands.getCommand({ idempotencyId: historyId(1) })).record?.state).toBe(CommandState.COMMITTED);

    laneway.clients.closeAll();
    after.destroy();
    expect((await laneway.kill("SIGTERM")).code).toBe(0);
    // Nothing but structured log lines, none at error level, no stack trace, no path.
    const lines = laneway.stderr.filter((line) => line.trim() !== "");
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    expect(logLines(laneway).filter((l) => l.level === "error")).toEqual([]);
    expect(laneway.stderr.join("\n")).not.toContain(laneway.dataDir);
    expect(laneway.stderr.join("\n")).not.toMatch(/\n\s+at /);
  });
});
