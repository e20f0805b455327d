import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import {
  exampleLanesConfig,
  generateTokens,
  startLanewayInProcess,
  startLanewayProcess,
  type ChildLaneway,
  type InProcessLaneway,
  type TestTokens,
} from "../helpers/laneway.js";
import { eventOn, eventsWithId, expectLaneError, published, reasonOf, recordFields, replayAll, text } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { processState, waitUntilPaused } from "../helpers/pause-points.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Publication across processes, with independent `laneway serve` child
 * processes on one test-owned nats-server:
 *
 * - pending-publish recovery: a process stopped at a pause point between
 *   the reservation and the append, or between the append and the
 *   response, is SIGKILLed; a restarted Laneway, retried with the same
 *   key, completes with the original content, and the lane holds exactly
 *   one record for it;
 * - concurrent mismatched publications of one key from two processes:
 *   exactly one wins, the other gets `lane_conflict`;
 * - delayed publication across reservation expiry: a publisher stopped
 *   after reserving resumes after its reservation expired and another
 *   process published the key with other content; it fails explicitly,
 *   never with a false success, and the persisted record is the other one.
 */

let nats: NatsServerHandle;
const started: ChildLaneway[] = [];
const pendingConfig = exampleLanesConfig({ namespace: "pending" });
const pendingTokens = generateTokens();
// Reservations and records of this namespace are retained for 15 s: short
// enough that the tests' waits for them to expire stay short, long enough
// that what must happen while one lives (the refusal right after the pause,
// the checks after the paused publisher resumes) is done inside it on a busy
// machine. Its operation_timeout is the longest allowed, so that a paused
// publisher's call is still within it when it resumes (however long a busy
// machine takes to get there) and it meets the fence, not its deadline.
const delayedConfig = exampleLanesConfig({ namespace: "delayed", retention: "15s", operation_timeout: "5m" });
const delayedTokens = generateTokens();
const pausePoints = ["publish-after-reserve", "publish-after-append"] as const;
let pendingDataDir: string;

const pendingRequest = (point: string) => eventOn(`pending-${point}`, { point, celsius: 19 }, { provenance: "https://sensors.example.net/atlas/pending" });
/** What the callers of the killed processes got, by pause point. */
const killedCalls = new Map<string, unknown>();
/** The Laneway started after the kills, on the first killed process's data directory. */
let restarted: ChildLaneway;
/** A second Laneway on the same namespace, running throughout. */
let peer: ChildLaneway;
let slow: ChildLaneway;
/** The other publisher of the delayed scenario: a Laneway in this process (another process than the paused ones). */
let fast: InProcessLaneway;
type Settled = Promise<{ ok: true; response: unknown } | { ok: false; error: ConnectError }>;
let slowCall: Settled;
let refusedWhileReserved: ConnectError;
/** A delayed publisher paused after its append reached the stream. */
let slowAppend: ChildLaneway;
let slowAppendCall: Settled;

function settle(call: Promise<unknown>): Settled {
  return call.then(
    (response) => ({ ok: true as const, response }),
    (error: unknown) => ({ ok: false as const, error: ConnectError.from(error) }),
  );
}

async function laneway(options: { config: Record<string, unknown>; tokens: TestTokens; dataDir?: string; pauseAt?: string }): Promise<ChildLaneway> {
  const child = await startLanewayProcess({
    natsUrl: nats.url,
    lanesConfig: options.config,
    tokens: options.tokens,
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
    ...(options.pauseAt ? { env: { LANEWAY_PAUSE_AT: options.pauseAt } } : {}),
  });
  started.push(child);
  return child;
}

const atlasOf = (process: ChildLaneway | InProcessLaneway) => process.clients.client(LaneService, { token: process.tokens.atlas });

beforeAll(async () => {
  nats = await startNatsServer();
  pendingDataDir = await mkdtemp(join(tmpdir(), "laneway-lanes-pending-"));
  // Every process this file needs before the crashes starts at once: a
  // child process spends seconds loading, and they do not interfere.
  const [afterReserve, afterAppend, peerProcess, slowProcess, fastLaneway, slowAppendProcess] = await Promise.all([
    laneway({ config: pendingConfig, tokens: pendingTokens, dataDir: pendingDataDir, pauseAt: "publish-after-reserve" }),
    laneway({ config: pendingConfig, tokens: pendingTokens, pauseAt: "publish-after-append" }),
    laneway({ config: pendingConfig, tokens: pendingTokens }),
    laneway({ config: delayedConfig, tokens: delayedTokens, pauseAt: "publish-after-reserve" }),
    startLanewayInProcess({ natsUrl: nats.url, lanesConfig: delayedConfig, tokens: delayedTokens }),
    laneway({ config: delayedConfig, tokens: delayedTokens, pauseAt: "publish-after-append" }),
  ]);
  slowAppend = slowAppendProcess;
  peer = peerProcess;
  slow = slowProcess;
  fast = fastLaneway;

  // The delayed publisher stops right after reserving; its reservation
  // starts expiring now, while the crash scenarios below run.
  slowCall = settle(atlasOf(slow).publish(eventOn("delayed-one", { from: "slow" })));
  slowAppendCall = settle(atlasOf(slowAppend).publish(eventOn("delayed-two", { from: "slow" })));
  await waitUntilPaused(slow);
  // While the reservation lives, other content for the key is refused (asked
  // at once, before anything else can let the reservation run out).
  try {
    await atlasOf(fast).publish(eventOn("delayed-one", { from: "fast" }));
  } catch (error) {
    refusedWhileReserved = ConnectError.from(error);
  }
  await waitUntilPaused(slowAppend);

  // Each pending publisher stops at its point and is killed there.
  for (const [point, process] of [
    [pausePoints[0], afterReserve],
    [pausePoints[1], afterAppend],
  ] as const) {
    killedCalls.set(
      point,
      atlasOf(process)
        .publish(pendingRequest(point))
        .then(() => "succeeded", (error: unknown) => ConnectError.from(error)),
    );
    const paused = await waitUntilPaused(process);
    expect(paused).toEqual({ point, id: `measurements.atlas.pending-${point}` });
    await process.kill("SIGKILL");
    killedCalls.set(point, await killedCalls.get(point));
  }
  restarted = await laneway({ config: pendingConfig, tokens: pendingTokens, dataDir: pendingDataDir });
}, 180_000);

afterAll(async () => {
  await Promise.all(started.map((p) => p.remove()));
  await fast?.stop();
  await nats?.remove();
  if (pendingDataDir) await rm(pendingDataDir, { recursive: true, force: true });
});

test("a publisher paused after reserving resumes after its reservation expired and another process published the key: it fails explicitly, and the other record persists", async () => {
  const id = "delayed-one";
  expect({ code: Code[refusedWhileReserved?.code], reason: refusedWhileReserved && reasonOf(refusedWhileReserved) }).toEqual({
    code: Code[Code.Aborted],
    reason: "lane_conflict",
  });
  // The other process wins once the paused reservation has expired; every
  // refusal before that is an explicit conflict.
  const refusals = new Set<string>();
  const winner = await waitFor(
    async () => {
      try {
        return await atlasOf(fast).publish(eventOn(id, { from: "fast" }));
      } catch (error) {
        refusals.add(reasonOf(ConnectError.from(error)) ?? "none");
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 200, what: "the paused reservation to expire" },
  );
  expect([...refusals].filter((r) => r !== "lane_conflict")).toEqual([]);
  expect(winner.duplicate).toBe(false);
  expect(text(winner.record?.payload)).toBe('{"from":"fast"}');

  // The paused publisher resumes: its request must fail, explicitly.
  process.kill(slow.pid, "SIGCONT");
  await waitFor(async () => (await processState(slow.pid)) !== "T", { what: "the paused process to continue" });
  const outcome = await slowCall;
  expect(outcome.ok, "a fenced publication must never succeed").toBe(false);
  if (!outcome.ok) expect({ code: Code[outcome.error.code], reason: reasonOf(outcome.error) }).toEqual({ code: Code[Code.Aborted], reason: "lane_conflict" });

  // The persisted record is the other process's, as both processes see it.
  for (const client of [atlasOf(fast), atlasOf(slow)]) {
    expect((await eventsWithId(client, "measurements", id)).map(recordFields)).toEqual([published(winner)]);
  }
  // Retrying the fenced content on the resumed process is a conflict, not a success.
  await expectLaneError(() => atlasOf(slow).publish(eventOn(id, { from: "slow" })), Code.Aborted, "lane_conflict");
});

test("a publisher paused after its append resumes after its reservation and record expired and another process published the key: the reservation recheck fails it explicitly", async () => {
  const id = "delayed-two";
  const refusals = new Set<string>();
  const winner = await waitFor(
    async () => {
      try {
        return await atlasOf(fast).publish(eventOn(id, { from: "fast" }));
      } catch (error) {
        refusals.add(reasonOf(ConnectError.from(error)) ?? "none");
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 200, what: "the paused reservation and record to expire" },
  );
  expect([...refusals].filter((r) => r !== "lane_conflict")).toEqual([]);
  expect(text(winner.record?.payload)).toBe('{"from":"fast"}');

  // The paused publisher read its own record back before it stopped; only
  // the recheck of its reservation stands between it and a false success.
  process.kill(slowAppend.pid, "SIGCONT");
  const outcome = await slowAppendCall;
  expect(outcome.ok, "a fenced publication must never succeed").toBe(false);
  if (!outcome.ok) {
    expect({ code: Code[outcome.error.code], reason: reasonOf(outcome.error) }).toEqual({ code: Code[Code.Aborted], reason: "lane_conflict" });
    expect(outcome.error.rawMessage).toContain("retry with the same id");
  }
  for (const client of [atlasOf(fast), atlasOf(slowAppend)]) {
    expect((await eventsWithId(client, "measurements", id)).map(recordFields)).toEqual([published(winner)]);
  }
  // Retried as advised, the fenced content resolves to an explicit conflict with the persisted record.
  await expectLaneError(() => atlasOf(slowAppend).publish(eventOn(id, { from: "slow" })), Code.Aborted, "lane_conflict");
});

describe("pending-publish recovery", () => {
  test.each([
    { point: pausePoints[0], duplicate: false },
    { point: pausePoints[1], duplicate: true },
  ])("a process killed at $point: the retry on a restarted Laneway completes with the original content, once", async ({ point, duplicate }) => {
    // The caller never got a success from the killed process.
    expect(killedCalls.get(point)).toBeInstanceOf(ConnectError);
    const request = pendingRequest(point);
    const client = atlasOf(restarted);
    // Other content under the pending key is refused: the reservation fences it.
    await expectLaneError(() => client.publish({ ...request, payload: Buffer.from('{"other":true}') }), Code.Aborted, "lane_conflict");
    const retried = await client.publish(request);
    expect(published(retried)).toMatchObject({ id: request.id, project: "atlas", payload: text(request.payload), provenance: request.provenance, schema: request.schema });
    // After the append the record existed before the retry: the retry reports it as a duplicate.
    expect(retried.duplicate).toBe(duplicate);
    // Any process on the namespace now answers with the same record.
    const again = await atlasOf(peer).publish(request);
    expect(again.duplicate).toBe(true);
    expect(published(again)).toEqual(published(retried));
    expect((await eventsWithId(client, "measurements", request.id)).map(recordFields)).toEqual([published(retried)]);
  });
});

describe("two processes on one broker", () => {
  test("concurrent mismatched publications of the same keys: exactly one wins each key, the other gets lane_conflict, one record each", async () => {
    const clients = { left: atlasOf(restarted), right: atlasOf(peer) };
    const keys = Array.from({ length: 24 }, (_, i) => `race-${i}`);
    const outcomes = await Promise.all(
      keys.map(async (id) => {
        const [l, r] = await Promise.allSettled([
          clients.left.publish(eventOn(id, { from: "left" })),
          clients.right.publish(eventOn(id, { from: "right" })),
        ]);
        return { id, l, r };
      }),
    );
    const events = await replayAll(clients.left, "measurements");
    for (const { id, l, r } of outcomes) {
      const settled = [l, r];
      const winners = settled.filter((s) => s.status === "fulfilled");
      const losers = settled.filter((s): s is PromiseRejectedResult => s.status === "rejected");
      expect(winners, id).toHaveLength(1);
      const loser = ConnectError.from(losers[0]!.reason);
      expect({ code: Code[loser.code], reason: reasonOf(loser) }, id).toEqual({ code: Code[Code.Aborted], reason: "lane_conflict" });
      const winner = (winners[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof clients.left.publish>>>).value;
      expect(events.events.filter((e) => e.id === id).map(recordFields), id).toEqual([published(winner)]);
    }
    // The other process reads the same lane.
    expect((await replayAll(clients.right, "measurements")).events.map(recordFields)).toEqual(events.events.map(recordFields));

    // Identical concurrent publications both succeed with the one record.
    const same = await Promise.all(
      keys.slice(0, 8).map((id) => Promise.all([clients.left.publish(eventOn(`same-${id}`, { n: 1 })), clients.right.publish(eventOn(`same-${id}`, { n: 1 }))])),
    );
    for (const [a, b] of same) {
      expect(published(a)).toEqual(published(b));
      expect([a.duplicate, b.duplicate].filter((d) => !d).length).toBeLessThanOrEqual(1);
    }
  });
});
