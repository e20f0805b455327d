import { once } from "node:events";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, spawnLaneway, startLanewayProcess, collectLines, type ChildLaneway } from "../helpers/laneway.js";
import { buildLanesConfig } from "../helpers/lanes-config.js";
import { withJetStream, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { completionOf, inspectGroup, receiptOf, waitOf, workOn } from "../helpers/work.js";
import { streamName } from "../../src/lanes/index.js";

/**
 * Several Laneway processes on one namespace: one full instance (lanes,
 * Kmap, hive hub) and two lanes-only replicas (`--cores lanes`) against
 * one nats-server, publishers and participants spread over all three.
 *
 * - The full instance holds the owner lock of its data directory: a second
 *   full instance there stops at startup (exit 2, a clear message); a
 *   lanes replica on the same data directory starts (it owns nothing).
 * - A replica serves the lanes and nothing else.
 * - Under load, one replica is SIGKILLed: every publication a client saw
 *   acknowledged is in the lane exactly once, every id a publisher kept
 *   retrying ends acknowledged, and the group completes every work record
 *   (a lease whose answer died with the replica expires and is delivered
 *   again), with nothing left unfinished.
 */

const tokens = generateTokens();
const NAMESPACE = "replicas";
const config = buildLanesConfig({
  namespace: NAMESPACE,
  lanes: [{ id: "jobs", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"], groups: { workers: ["beacon"] } }],
  lease: "2s",
});

let nats: NatsServerHandle;
let full: ChildLaneway;
let replicaOne: ChildLaneway;
let replicaTwo: ChildLaneway;

beforeAll(async () => {
  nats = await startNatsServer();
  full = await startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens });
  // The first replica shares the full instance's data directory: it takes no lock.
  [replicaOne, replicaTwo] = await Promise.all([
    startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens, dataDir: full.dataDir, args: ["--cores", "lanes"] }),
    startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens, args: ["--cores", "lanes"] }),
  ]);
}, 180_000);

afterAll(async () => {
  await replicaTwo?.remove();
  await replicaOne?.remove();
  await full?.remove();
  await nats?.remove();
});

test("a second full instance on the same data directory is refused with a clear error and exit code 2", async () => {
  const child = spawnLaneway(
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", full.dataDir, "--nats-url", nats.url, "--lanes-config", `${full.dataDir}/lanes.json`],
    { ATLAS_LANE_TOKEN: tokens.atlas, BEACON_LANE_TOKEN: tokens.beacon, LANEWAY_ADMIN_TOKEN: tokens.admin },
  );
  const stderr: string[] = [];
  const stdout: string[] = [];
  collectLines(child.stderr!, stderr);
  collectLines(child.stdout!, stdout);
  const [code] = (await once(child, "exit")) as [number | null];
  expect(code).toBe(2);
  expect(stdout.some((line) => line.includes(" listening on "))).toBe(false);
  expect(stderr.join("\n")).toContain("another Laneway process already serves the single-writer cores");
  expect(stderr.join("\n")).toContain("--cores lanes");
  // The refused process changed nothing: the full instance still serves.
  const atlas = full.clients.client(LaneService, { token: tokens.atlas });
  expect((await atlas.getRegistry({})).namespace).toBe(NAMESPACE);
});

test("--cores lanes needs --nats-url, and names only cores that may run beside another process", async () => {
  for (const [args, message] of [
    [["--cores", "lanes"], "requires --nats-url"],
    [["--cores", "kmap", "--nats-url", nats.url], "--cores names kmap, which has one writer: only the full instance (--cores all) serves it"],
    [["--cores", "lanes,queues", "--nats-url", nats.url], "--cores names queues, which is not a core of this server (lanes, swarm, kmap)"],
  ] as const) {
    const child = spawnLaneway(["serve", "--listen", "127.0.0.1:0", "--data-dir", `${full.dataDir}/never`, ...args], {});
    const stderr: string[] = [];
    collectLines(child.stderr!, stderr);
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(2);
    expect(stderr.join("\n")).toContain(message);
  }
});

test("a lanes replica serves the lanes and nothing else", async () => {
  const atlas = replicaOne.clients.client(LaneService, { token: tokens.atlas });
  expect((await atlas.getRegistry({})).lanes.map((l) => l.lane)).toEqual(["jobs"]);
  const kmap = replicaOne.clients.client(KmapReadService, { token: tokens.admin });
  const error = await kmap.listNodes({}).then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );
  expect(error?.code).toBe(Code.Unimplemented);
  // The full instance serves it.
  const fullKmap = full.clients.client(KmapReadService, { token: tokens.admin });
  await fullKmap.listNodes({});
});

test("publishers and participants spread over two replicas and the full instance; a replica SIGKILLed mid-load loses nothing acknowledged", async () => {
  const servers = [full, replicaOne, replicaTwo];
  const publishers = servers.map((s) => s.clients.client(LaneService, { token: tokens.atlas }));
  const workers = servers.map((s) => s.clients.client(LaneService, { token: tokens.beacon }));
  let killed = false;
  const alive = (index: number) => !(killed && servers[index] === replicaTwo);
  const PER_PUBLISHER = 40;
  const acknowledged = new Map<string, bigint>();
  const failures = { publish: 0, claim: 0 };

  // Each publisher starts on its own process and moves on to the next after any failure, retrying the same id.
  const publisher = async (index: number) => {
    let at = index % servers.length;
    for (let n = 0; n < PER_PUBLISHER; n++) {
      const id = `p${index}-${n}`;
      for (;;) {
        if (!alive(at)) at = (at + 1) % servers.length;
        try {
          const answer = await publishers[at]!.publish(workOn("jobs", id), { timeoutMs: 20_000 });
          acknowledged.set(id, answer.record!.sequence);
          break;
        } catch {
          failures.publish += 1;
          at = (at + 1) % servers.length;
        }
      }
    }
  };
  const total = 6 * PER_PUBLISHER;
  let acked = 0;
  let done = false;
  const worker = async (index: number) => {
    let at = index % servers.length;
    while (!done) {
      if (!alive(at)) at = (at + 1) % servers.length;
      try {
        const { work } = await workers[at]!.claimBatch({ lane: "jobs", group: "workers", maxRecords: 8, wait: waitOf(500) }, { timeoutMs: 20_000 });
        for (const w of work) {
          await workers[at]!.ack({ lane: "jobs", group: "workers", ...receiptOf(w) }, { timeoutMs: 20_000 });
          acked += 1;
        }
      } catch {
        failures.claim += 1;
        at = (at + 1) % servers.length;
      }
    }
  };
  const load = Promise.all(Array.from({ length: 6 }, (_, i) => publisher(i)));
  const participants = Promise.all(Array.from({ length: 3 }, (_, i) => worker(i)));

  // Mid-load: a third of the publications are acknowledged and some work is done.
  await waitFor(() => acknowledged.size >= total / 3 && acked > 0, { timeoutMs: 120_000, intervalMs: 20, what: "the load to be under way" });
  killed = true;
  await replicaTwo.kill("SIGKILL");
  await load;
  // The group completes every acknowledged record (an ack whose answer was lost still counts: ask the group).
  const inspector = full.clients.client(LaneService, { token: tokens.beacon });
  const group = await waitFor(
    async () => {
      const state = await inspectGroup(inspector, "jobs", "workers");
      const all = [...acknowledged.values()].every((sequence) => completionOf(state, sequence) !== undefined);
      return all && state.deliveries.length === 0 ? state : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 250, what: "every work record to be completed" },
  );
  done = true;
  await participants;
  console.log(`[replicas] ${total} publications, ${acked} acks answered; ${failures.publish} publish and ${failures.claim} claim/ack failures retried elsewhere`);

  // Every id acknowledged, each at its own sequence, and the stream holds exactly those records.
  expect(acknowledged.size).toBe(total);
  expect(new Set(acknowledged.values()).size).toBe(total);
  const stored = await withJetStream(nats.url, async (jsm) => (await jsm.streams.info(streamName(NAMESPACE, "jobs"))).state.messages);
  expect(stored).toBe(total);
  // The group completed every acknowledged record and has nothing unfinished.
  expect(group.deliveries).toEqual([]);
  for (const sequence of acknowledged.values()) expect(completionOf(group, sequence), `sequence ${sequence}`).toBeDefined();
  expect(acked).toBeGreaterThan(0);

  // A SIGKILLed full instance leaves no lock behind: the next one on its data directory starts and serves.
  await full.kill("SIGKILL");
  const next = await startLanewayProcess({ natsUrl: nats.url, lanesConfig: config, tokens, dataDir: full.dataDir });
  try {
    const after = await inspectGroup(next.clients.client(LaneService, { token: tokens.beacon }), "jobs", "workers");
    expect(after.deliveries).toEqual([]);
  } finally {
    await next.remove();
  }
}, 400_000);
