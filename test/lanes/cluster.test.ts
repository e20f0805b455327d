/**
 * Lanes on an existing distributed engine: Laneway with `--nats-url`
 * naming every node of a real 3-node JetStream cluster and `--replicas 3`.
 *
 * - The lane stream and the KV buckets are created with three replicas;
 *   publish, batch publish and replay work.
 * - The lane stream's leader is SIGKILLed while publishers keep publishing,
 *   each retrying the same id after any failure until it succeeds (the
 *   documented client behaviour). After the election every acknowledged
 *   record is in the lane exactly once, at its acknowledged sequence with
 *   its payload, and publishing resumes.
 * - The killed node restarts and catches up: its own copy of every stream
 *   (read from its monitoring port) reaches the leader's. Then a different
 *   node is SIGKILLed: with the restarted node one of the two survivors,
 *   every record is still readable and publishing resumes again.
 *
 * How long publishes failed during each election is measured from the
 * test's own timestamps and printed for docs/operations.md; it is never
 * asserted (the time depends on the machine).
 *
 * Every failure is retried with the same id, as documented, and printed.
 * A node loss must cause nothing but broker trouble (unavailable,
 * timeout): anything else fails the test, with its message. A replicated namespace reads from the
 * leaders: a follower answering a direct get may not yet hold what the
 * leader just acknowledged, which would make a publish's read-back or
 * reservation recheck see a stale copy (a false `lane_conflict`); on a
 * healthy cluster nothing fails at all.
 */
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { LaneService, RecordKind, type LaneRecord, type PublishResponse } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { metaBucket, reservationBucket, streamName } from "../../src/lanes/index.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { removeAllNatsClusters, startNatsCluster, type NatsClusterHandle, type NatsClusterNode } from "../helpers/nats-cluster.js";
import { waitFor } from "../helpers/wait-for.js";

const NAMESPACE = "commons";
const LANE = "measurements";
const STREAM = streamName(NAMESPACE, LANE);
const RSV_STREAM = `KV_${reservationBucket(NAMESPACE)}`;
const META_STREAM = `KV_${metaBucket(NAMESPACE)}`;

let cluster: NatsClusterHandle;
let laneway: InProcessLaneway;
let atlas: Client<typeof LaneService>;
/** The test's own connection to the cluster, to read stream configuration. */
let inspectorConnection: NatsConnection;
let inspector: JetStreamManager;

/** The first node loss, for the test after it (restart that node) and the printed figures. */
let firstOutage: ({ node: string } & Outage) | undefined;

/** Everything acknowledged so far: id → the payload sent and the record answered. */
const acknowledged = new Map<string, { payload: Uint8Array; record: LaneRecord }>();

beforeAll(async () => {
  cluster = await startNatsCluster();
  laneway = await startLanewayInProcess({
    natsUrl: cluster.urls.join(","),
    args: ["--replicas", "3", "--allow-unsafe-broker"],
    lanesConfig: exampleLanesConfig(),
  });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  inspectorConnection = await connect({ servers: [...cluster.urls] });
  inspector = await jetstreamManager(inspectorConnection);
}, 120_000);

afterAll(async () => {
  await inspectorConnection?.close();
  await laneway?.stop();
  await removeAllNatsClusters();
}, 60_000);

/** A record's payload: the same bytes for the same id (retries must resend exactly what they sent). */
function payloadOf(id: string): Uint8Array {
  return Buffer.from(JSON.stringify({ id, reading: createHash("sha256").update(id).digest("hex").slice(0, 24) }), "utf8");
}

/** Every event of the lane, paging with Replay from cursor 0 to the lane's last sequence. */
async function replayAll(client: Client<typeof LaneService>): Promise<LaneRecord[]> {
  const events: LaneRecord[] = [];
  let cursor = 0n;
  for (;;) {
    const page = await pageWithRetries(client, cursor);
    events.push(...page.events);
    if (page.cursor === cursor && page.events.length === 0) {
      if (page.cursor >= page.lastSequence) return events;
      throw new Error(`replay made no progress at cursor ${cursor} (last sequence ${page.lastSequence})`);
    }
    cursor = page.cursor;
    if (cursor >= page.lastSequence) return events;
  }
}

/**
 * One Replay page; broker trouble right after an election is retried (as a
 * reader would) for up to two minutes, and printed. Replay reads over its own
 * broker connection: when that connection's node was the one killed, it
 * reconnects on its own, which can take a connect timeout (5 s) when the
 * first node it tries does not answer.
 */
async function pageWithRetries(client: Client<typeof LaneService>, cursor: bigint) {
  const giveUpAt = Date.now() + 120_000;
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.replay({ lane: LANE, cursor });
    } catch (error) {
      const failure = ConnectError.from(error);
      const reason = failure.findDetails(ErrorDetailSchema)[0]?.reason ?? "";
      console.log(`[cluster] replay from cursor ${cursor} failed (attempt ${attempt}, ${new Date().toISOString()}): ${Code[failure.code]}/${reason}: ${failure.rawMessage}`);
      if (Date.now() > giveUpAt || !["lane_unavailable", "lane_timeout"].includes(reason)) throw error;
      await sleep(200);
    }
  }
}

/** The lane holds every acknowledged record exactly once, at its sequence, with its payload — and nothing else. */
async function expectExactlyAcknowledged(client: Client<typeof LaneService>, since?: { killedAt: number }): Promise<void> {
  const events = await replayAll(client);
  if (since !== undefined) console.log(`[cluster] the whole lane replayed ${((Date.now() - since.killedAt) / 1000).toFixed(2)} s after the kill`);
  const ids = events.map((e) => e.id);
  expect(new Set(ids).size).toBe(ids.length);
  expect([...ids].sort()).toEqual([...acknowledged.keys()].sort());
  for (const event of events) {
    const acked = acknowledged.get(event.id)!;
    expect(event.sequence).toBe(acked.record.sequence);
    expect(Buffer.from(event.payload).equals(Buffer.from(acked.payload))).toBe(true);
    expect(event.project).toBe("atlas");
  }
}

/** One publish attempt's outcome, on the test's clock. */
interface Attempt {
  readonly id: string;
  readonly startedAt: number;
  readonly endedAt: number;
  /** Undefined when the attempt succeeded. */
  readonly failure: { code: string; reason: string } | undefined;
}

/** Failures other than broker trouble, with their messages. */
const unexpected: string[] = [];

/**
 * Publishes one record, retrying the same id after any failure until it is
 * acknowledged — the documented client behaviour (even for `lane_conflict`
 * "... expired or was replaced ...; retry with the same id to resolve it").
 * Every attempt is recorded in `attempts`. A failure other than broker
 * trouble is kept with its message in `unexpected`; an id that keeps
 * failing that way (20 times) fails the test: retrying did not cure it.
 */
async function publishUntilAcknowledged(id: string, payload: Uint8Array, attempts: Attempt[]): Promise<PublishResponse> {
  for (;;) {
    const startedAt = Date.now();
    try {
      const answer = await atlas.publish({ lane: LANE, id, kind: RecordKind.EVENT, schema: "reading-v1", payload });
      attempts.push({ id, startedAt, endedAt: Date.now(), failure: undefined });
      acknowledged.set(id, { payload, record: answer.record! });
      return answer;
    } catch (error) {
      const failure = ConnectError.from(error);
      const reason = failure.findDetails(ErrorDetailSchema)[0]?.reason ?? "";
      attempts.push({ id, startedAt, endedAt: Date.now(), failure: { code: Code[failure.code] ?? String(failure.code), reason } });
      if (!["lane_unavailable", "lane_timeout"].includes(reason)) {
        unexpected.push(`${id}: ${Code[failure.code]}/${reason}: ${failure.rawMessage}`);
        if (unexpected.filter((u) => u.startsWith(`${id}:`)).length >= 20) {
          throw new Error(`${id} failed 20 times with reasons other than broker trouble:\n${unexpected.join("\n")}`);
        }
      }
      await sleep(25);
    }
  }
}

/**
 * Publishers that keep publishing fresh ids, each retrying its id until it
 * is acknowledged. `stopWhen` is checked after every acknowledgement.
 */
async function publishWithRetries(options: { workers: number; prefix: string; stopWhen: () => boolean }): Promise<Attempt[]> {
  const attempts: Attempt[] = [];
  let next = 0;
  let stop = false;
  const worker = async () => {
    while (!stop) {
      const id = `${options.prefix}-${String(next++).padStart(5, "0")}`;
      try {
        await publishUntilAcknowledged(id, payloadOf(id), attempts);
      } catch (error) {
        stop = true;
        throw error;
      }
      if (options.stopWhen()) stop = true;
    }
  };
  await Promise.all(Array.from({ length: options.workers }, worker));
  return attempts;
}

/** What a node loss cost the publishers, in seconds. */
interface Outage {
  /** The longest time without any acknowledgement, around the kill. */
  readonly stalledSeconds: number;
  /** From the first failed attempt's start to the last failed attempt's end. */
  readonly failedSeconds: number;
  /** The same, for attempts that failed with `unavailable`. */
  readonly unavailableSeconds: number;
  /** Failures that were not broker trouble (unavailable, timeout), with their messages. */
  readonly notBrokerTrouble: readonly string[];
}

/** What the attempts around a node loss say, relative to the moment of the kill. */
function describeOutage(label: string, attempts: readonly Attempt[], killedAt: number): Outage {
  const failed = attempts.filter((a) => a.failure !== undefined);
  const byCode = new Map<string, Attempt[]>();
  for (const a of failed) {
    const key = `${a.failure!.code}/${a.failure!.reason}`;
    byCode.set(key, [...(byCode.get(key) ?? []), a]);
  }
  const span = (list: readonly Attempt[]) =>
    list.length === 0 ? 0 : (Math.max(...list.map((a) => a.endedAt)) - Math.min(...list.map((a) => a.startedAt))) / 1000;
  const unavailable = failed.filter((a) => a.failure!.reason === "lane_unavailable");
  // Acknowledgement times from just before the kill on; the longest gap between two of them.
  const acks = [killedAt, ...attempts.filter((a) => a.failure === undefined && a.endedAt >= killedAt).map((a) => a.endedAt)].sort((x, y) => x - y);
  let stalled = 0;
  let stallEnd = killedAt;
  for (let i = 1; i < acks.length; i++) {
    if (acks[i]! - acks[i - 1]! > stalled) {
      stalled = acks[i]! - acks[i - 1]!;
      stallEnd = acks[i]!;
    }
  }
  const rel = (t: number) => ((t - killedAt) / 1000).toFixed(2);
  const notBrokerTrouble = unexpected.splice(0);
  const lines = [
    ...notBrokerTrouble.map((u) => `[cluster]   not broker trouble: ${u}`),
    `[cluster] ${label}: ${attempts.length} attempts, ${failed.length} failed, ${new Set(attempts.map((a) => a.id)).size} ids`,
    ...[...byCode.entries()].map(
      ([code, list]) =>
        `[cluster]   ${code}: ${list.length} failures, from ${rel(Math.min(...list.map((a) => a.startedAt)))} s to ${rel(Math.max(...list.map((a) => a.endedAt)))} s after the kill`,
    ),
    `[cluster]   no acknowledgement for ${(stalled / 1000).toFixed(2)} s (until ${rel(stallEnd)} s after the kill); ` +
      `publishes failed for ${span(failed).toFixed(2)} s, with unavailable for ${span(unavailable).toFixed(2)} s`,
  ];
  console.log(lines.join("\n"));
  return { stalledSeconds: stalled / 1000, failedSeconds: span(failed), unavailableSeconds: span(unavailable), notBrokerTrouble };
}

/** The node currently leading `stream`, as the running nodes report it. */
async function leaderOf(stream: string): Promise<NatsClusterNode> {
  const name = await waitFor(
    async () => {
      for (const node of cluster.nodes.filter((n) => n.running)) {
        const leader = (await node.jsz()).streams.get(stream)?.leader;
        if (leader !== undefined && cluster.nodes.some((n) => n.name === leader && n.running)) return leader;
      }
      return undefined;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: `a leader of ${stream}` },
  );
  return cluster.node(name);
}

/** The node Laneway's NATS connection (named "laneway") is on, from each running node's connz. */
async function lanewayConnectedTo(): Promise<string | undefined> {
  for (const node of cluster.nodes.filter((n) => n.running)) {
    const body = (await (await fetch(`${node.monitorUrl}/connz`, { signal: AbortSignal.timeout(5_000) })).json()) as { connections?: { name?: string }[] };
    if ((body.connections ?? []).some((c) => c.name === "laneway")) return node.name;
  }
  return undefined;
}

/**
 * Seconds from `since` until the survivors report a leader other than
 * `victim` for each stream (polled every 100 ms from their monitoring ports).
 */
async function electionTimes(victim: NatsClusterNode, streams: readonly string[], since: number): Promise<Map<string, number>> {
  const elected = new Map<string, number>();
  await waitFor(
    async () => {
      for (const node of cluster.nodes.filter((n) => n.running && n !== victim)) {
        const jsz = await node.jsz().catch(() => undefined);
        for (const stream of streams) {
          const leader = jsz?.streams.get(stream)?.leader;
          if (!elected.has(stream) && leader !== undefined && leader !== victim.name) elected.set(stream, (Date.now() - since) / 1000);
        }
      }
      return elected.size === streams.length;
    },
    { timeoutMs: 120_000, intervalMs: 100, what: "new leaders after the kill" },
  );
  return elected;
}

/** Kills `victim` while publishers run; returns when publishing resumed after the election. */
async function killWhilePublishing(victim: NatsClusterNode, prefix: string, label: string) {
  let killedAt = 0;
  let ackedAfterKill = 0;
  const before = acknowledged.size;
  const publishing = publishWithRetries({
    workers: 4,
    prefix,
    stopWhen: () => {
      if (killedAt > 0) ackedAfterKill += 1;
      // Enough acknowledgements after the kill that publishing has clearly resumed.
      return killedAt > 0 && ackedAfterKill >= 60;
    },
  });
  await Promise.race([
    waitFor(() => acknowledged.size >= before + 40, { timeoutMs: 60_000, what: "publishing before the kill" }),
    publishing.then(() => {
      throw new Error("the publishers stopped before the kill");
    }),
  ]);
  const ledBefore = await Promise.all([STREAM, RSV_STREAM, META_STREAM].map(async (s) => (await leaderOf(s)).name === victim.name));
  const led = [STREAM, RSV_STREAM, META_STREAM].filter((_, i) => ledBefore[i]);
  const lanewayOn = await lanewayConnectedTo();
  killedAt = Date.now();
  await victim.kill("SIGKILL");
  const [attempts, elected] = await Promise.all([publishing, electionTimes(victim, led, killedAt)]);
  const names: Record<string, string> = { [STREAM]: "lane stream", [RSV_STREAM]: "reservation bucket", [META_STREAM]: "meta bucket" };
  console.log(
    `[cluster] ${label}: ${victim.name} led ${led.map((s) => names[s]).join(", ") || "nothing of the namespace"}; ` +
      `Laneway's connection was ${lanewayOn === victim.name ? "on it" : `on ${lanewayOn ?? "?"}`}; ` +
      `new leaders reported after ${[...elected.entries()].map(([s, t]) => `${names[s]} ${t.toFixed(2)} s`).join(", ") || "-"}`,
  );
  const outage = describeOutage(label, attempts, killedAt);
  // Reads go to the leaders of a replicated namespace: a node loss costs
  // unavailability and timeouts, never a false conflict or an internal error.
  expect(outage.notBrokerTrouble).toEqual([]);
  return { attempts, outage, killedAt };
}

describe("lanes on a 3-node JetStream cluster (--replicas 3)", () => {
  it("creates the lane stream and the buckets with three replicas; publish, batch publish and replay work", async () => {
    const jsz = await cluster.nodes[0]!.jsz();
    for (const stream of [STREAM, RSV_STREAM, META_STREAM]) expect(jsz.streams.has(stream)).toBe(true);
    // Every node holds its own copy of every stream.
    for (const node of cluster.nodes) {
      await waitFor(
        async () => {
          const streams = (await node.jsz()).streams;
          return [STREAM, RSV_STREAM, META_STREAM].every((s) => streams.has(s));
        },
        { what: `replicas on ${node.name}` },
      );
    }

    // The configuration asked for: three replicas of each, two followers beside the leader.
    for (const stream of [STREAM, RSV_STREAM, META_STREAM]) {
      const info = await inspector.streams.info(stream);
      expect(info.config.num_replicas).toBe(3);
      expect(info.cluster?.replicas?.length).toBe(2);
    }

    const attempts: Attempt[] = [];
    const first = await publishUntilAcknowledged("first", payloadOf("first"), attempts);
    // The same id again (same content) is the same record.
    const again = await publishUntilAcknowledged("first", payloadOf("first"), attempts);
    expect(again.duplicate).toBe(true);
    expect(again.record!.sequence).toBe(first.record!.sequence);

    const batchIds = Array.from({ length: 128 }, (_, i) => `batch-${String(i).padStart(3, "0")}`);
    const batch = await atlas.publishBatch({
      lane: LANE,
      records: batchIds.map((id) => ({ id, kind: RecordKind.EVENT, schema: "reading-v1", payload: payloadOf(id) })),
    });
    expect(batch.results).toHaveLength(batchIds.length);
    const batchFailures: string[] = [];
    for (const [i, result] of batch.results.entries()) {
      const id = batchIds[i]!;
      if (result.outcome.case === "published") {
        expect(result.outcome.value.record!.id).toBe(id);
        acknowledged.set(id, { payload: payloadOf(id), record: result.outcome.value.record! });
      } else {
        // A record's own failure: retried alone with the same id, as a client would.
        batchFailures.push(`${id}: ${result.outcome.value?.code}/${result.outcome.value?.reason}: ${result.outcome.value?.message}`);
        await publishUntilAcknowledged(id, payloadOf(id), attempts);
      }
    }
    console.log(
      `[cluster] healthy cluster: a batch of ${batchIds.length} had ${batchFailures.length} failed records; ` +
        `${attempts.filter((a) => a.failure).length} of ${attempts.length} single publishes failed\n` +
        [...batchFailures, ...unexpected.splice(0)].map((f) => `[cluster]   ${f}`).join("\n"),
    );
    // A healthy cluster fails nothing: read-backs and rechecks see what the leader acknowledged.
    expect(batchFailures).toEqual([]);
    expect(attempts.filter((a) => a.failure !== undefined)).toEqual([]);
    const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
    await expectExactlyAcknowledged(beacon);

    const leaders = await Promise.all([STREAM, RSV_STREAM, META_STREAM].map(async (s) => (await leaderOf(s)).name));
    console.log(`[cluster] leaders: lane stream ${leaders[0]}, reservations ${leaders[1]}, meta ${leaders[2]}`);
  }, 120_000);

  it("keeps every acknowledged record exactly once when the lane stream's leader is SIGKILLed mid-publishing, and publishing resumes", async () => {
    const victim = await leaderOf(STREAM);
    const { outage, killedAt } = await killWhilePublishing(victim, "during-first-kill", "SIGKILL of the lane stream's leader");
    expect(victim.running).toBe(false);
    // A new leader among the survivors.
    expect((await leaderOf(STREAM)).name).not.toBe(victim.name);
    await expectExactlyAcknowledged(atlas, { killedAt });
    firstOutage = { node: victim.name, ...outage };
  }, 300_000);

  it("restarts the killed node, which catches up; with a different node killed, everything is still there and publishing resumes", async () => {
    const restarted = cluster.node(firstOutage!.node);
    const restartedAt = Date.now();
    await restarted.restart();
    await cluster.waitReady();
    // Its own copy of every stream reaches the leader's copy.
    await waitFor(
      async () => {
        const local = (await restarted.jsz()).streams;
        for (const stream of [STREAM, RSV_STREAM, META_STREAM]) {
          const leader = await leaderOf(stream);
          const authoritative = (await leader.jsz()).streams.get(stream);
          const mine = local.get(stream);
          if (authoritative === undefined || mine === undefined) return false;
          if (mine.lastSeq !== authoritative.lastSeq || mine.messages !== authoritative.messages) return false;
        }
        return true;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: `${restarted.name} to catch up` },
    );
    const local = (await restarted.jsz()).streams.get(STREAM)!;
    expect(local.messages).toBe(acknowledged.size);
    expect(local.lastSeq).toBe(Math.max(...[...acknowledged.values()].map((a) => Number(a.record.sequence))));

    // Now a different node goes: the restarted node is one of the two that
    // remain, so every commit and every read needs its copy.
    const current = await leaderOf(STREAM);
    const second = current.name !== restarted.name ? current : cluster.nodes.find((n) => n.name !== restarted.name)!;
    console.log(
      `[cluster] ${restarted.name} caught up ${((Date.now() - restartedAt) / 1000).toFixed(2)} s after its restart began ` +
        `(${local.messages} records in its copy of the lane stream)`,
    );
    const { outage, killedAt } = await killWhilePublishing(second, "during-second-kill", `SIGKILL of ${second.name} after ${restarted.name} rejoined`);
    await expectExactlyAcknowledged(atlas, { killedAt });
    const figure = (o: Outage) =>
      `no acknowledgement for ${o.stalledSeconds.toFixed(1)} s; publishes failed for ${o.failedSeconds.toFixed(1)} s (unavailable for ${o.unavailableSeconds.toFixed(1)} s)`;
    console.log(`[cluster] figures for docs/operations.md: SIGKILL of the lane stream's leader: ${figure(firstOutage!)}; second node loss: ${figure(outage)}`);
    await second.restart();
    await cluster.waitReady();
  }, 400_000);
});
