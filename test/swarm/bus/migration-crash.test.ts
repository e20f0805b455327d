import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Kvm } from "@nats-io/kv";
import { deadStream, GLOBAL_STREAMS, openBus, queueStream, stateStream, type Bus, type WorkItem } from "../../../src/swarm-bus/index.js";
import { deadMarkSubject, legacyQueueStreamName, queueMarkSubject, readMark, stateMarkSubject } from "../../../src/swarm-bus/internal.js";
import { startBusHive, type BusHive } from "./bus-fixture.js";

/**
 * The hub killed (SIGKILL) in the middle of each migration, at the
 * library's pause points, then the migration repeated: it completes,
 * nothing is copied twice, nothing is lost, and the pending mark clears
 * only at the end. The hub process is test/swarm/bus/migrate-child.ts;
 * the repeat runs here with the same credential.
 */

const repoRoot = resolve(import.meta.dirname, "../../..");
let hive: BusHive;
let hub: Bus;
/** The legacy (unscoped) processes, whose queue consumers hold items for 2 s. */
let legacyHub: Bus;

beforeAll(async () => {
  hive = await startBusHive();
  hub = await hive.hubBus();
  legacyHub = await openBus({ backend: "nats", url: hive.nats.url, credentials: hive.trust.credsPaths.hub, scoped: false, bind: false, queuePolicy: { ackWaitMs: 2_000 } });
}, 60_000);

afterAll(async () => {
  await legacyHub?.close();
  await hive?.stop();
});

/** Runs the hub process until it pauses at `pauseAt`, then kills it. Returns the pause line. */
async function killHubAt(spec: Record<string, unknown>): Promise<string> {
  const child = spawn(process.execPath, ["--import", "tsx", join(repoRoot, "test/swarm/bus/migrate-child.ts"), JSON.stringify({ url: hive.nats.url, credentials: hive.trust.credsPaths.hub, ...spec })], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  let out = "";
  let err = "";
  child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
  const line = await new Promise<string>((resolveLine, reject) => {
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const match = /laneway-paused \S+ \S+/.exec(out);
      if (match) resolveLine(match[0]);
    });
    void exited.then(() => reject(new Error(`the hub process ended without pausing: ${out} ${err}`)));
  });
  child.kill("SIGKILL");
  await exited;
  return line;
}

const markOf = async (stream: string, subject: string) => (await readMark((await hive.admin()).jsm, stream, subject))?.mark.status;

async function drainQueue(swarm: string): Promise<WorkItem[]> {
  const queue = await hub.forSwarm(swarm).queue(`swarm.${swarm}.ready.eng`);
  const all: WorkItem[] = [];
  for (;;) {
    const items = await queue.takeBatch({ max: 256, maxWaitMs: 1_000 });
    if (items.length === 0) return all;
    await Promise.all(items.map((item) => item.ack()));
    all.push(...items);
  }
}

describe("migrateQueue, hub killed", () => {
  test.each([
    ["after a batch was copied, before the legacy acks", "migration-after-copy:2", 1],
    ["after a batch was taken, before it was copied", "migration-after-take:2", 2],
  ])("%s: the repeat moves every item exactly once", async (_name, pauseAt, heldAttempt) => {
    const swarm = pauseAt.includes("copy") ? "crash-q1" : "crash-q2";
    const name = `swarm.${swarm}.ready.eng`;
    const legacy = await legacyHub.queue(name);
    for (let i = 0; i < 600; i++) await legacy.offer({ event: { swarm, job: i } });
    expect(await killHubAt({ kind: "queue", swarm, name, pauseAt })).toMatch(/^laneway-paused migration-after-(copy|take) queue:257$/);
    expect(await markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("pending");
    const member = await hive.memberBus(`hive-${swarm}`, [swarm]);
    await expect(member.bus.forSwarm(swarm).queue(name)).rejects.toThrow("scoped queue migration is incomplete");

    // The repeat waits out the legacy consumer's ack wait for the batch the killed hub held.
    const result = await hub.migrateQueue({ swarm: swarm, name: name });
    expect(result.outcome).toBe("moved");
    expect(await markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("complete");
    const items = await drainQueue(swarm);
    const jobs = items.map((item) => item.event?.job as number).sort((a, b) => a - b);
    expect(jobs).toEqual(Array.from({ length: 600 }, (_, i) => i));
    // Batch 2 (jobs 256–511) was delivered to the killed hub: copied then, its attempt is exact; taken only, that delivery counts.
    const attempts = new Map(items.map((item) => [item.event?.job as number, item.attempt]));
    expect(attempts.get(300)).toBe(heldAttempt);
    expect(attempts.get(0)).toBe(1);
    expect(attempts.get(599)).toBe(1);
    expect((await (await hive.admin()).jsm.streams.info(legacyQueueStreamName(name))).state.messages).toBe(0);
  });
});

describe("migrateState, hub killed", () => {
  test.each([
    ["mid-copy", "migration-after-copy:3"],
    ["after the legacy keys were purged, before the mark completed", "migration-before-complete"],
  ])("%s: the repeat completes, every revision once", async (_name, pauseAt) => {
    const swarm = pauseAt.includes("copy") ? "crash-s1" : "crash-s2";
    const { nc, jsm } = await hive.admin();
    const kv = await new Kvm(nc).create("spoke-work", { history: 64 });
    for (let i = 0; i < 6; i++) await kv.put(`${swarm}-k${i % 2}`, `v${i}`);
    const keys = [`${swarm}-k0`, `${swarm}-k1`];
    await killHubAt({ kind: "state", swarm, bucket: "spoke-work", keys, pauseAt });
    const target = stateStream(swarm, "spoke-work").name;
    expect(await markOf(target, stateMarkSubject(swarm, "spoke-work"))).toBe("pending");

    expect(await hub.migrateState({ swarm: swarm, bucket: "spoke-work", keys: keys })).toMatchObject({ outcome: "moved", total: 6 });
    expect(await markOf(target, stateMarkSubject(swarm, "spoke-work"))).toBe("complete");
    const state = await hub.forSwarm(swarm).state("spoke-work");
    expect((await state.history(`${swarm}-k0`)).map((e) => e.string())).toEqual(["v0", "v2", "v4"]);
    expect((await state.history(`${swarm}-k1`)).map((e) => e.string())).toEqual(["v1", "v3", "v5"]);
    expect((await jsm.streams.info(target)).state.messages).toBe(7);
    expect(await kv.get(`${swarm}-k0`)).toBeNull();
  });
});

describe("migrateDead, hub killed", () => {
  test.each([
    ["mid-copy", "migration-after-copy:2"],
    ["after the legacy letters were purged, before the mark completed", "migration-before-complete"],
  ])("%s: the repeat completes, every letter once", async (_name, pauseAt) => {
    const swarm = pauseAt.includes("copy") ? "crash-d1" : "crash-d2";
    const { js, jsm } = await hive.admin();
    await jsm.streams.info(GLOBAL_STREAMS.legacyDead).catch(() => jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] }));
    for (let i = 0; i < 4; i++) await js.publish(`dead.${swarm}`, JSON.stringify({ swarm, id: i }));
    await killHubAt({ kind: "dead", swarm, pauseAt });
    expect(await markOf(deadStream(swarm).name, deadMarkSubject(swarm))).toBe("pending");

    expect(await hub.migrateDead({ swarm: swarm })).toMatchObject({ outcome: "moved" });
    expect(await markOf(deadStream(swarm).name, deadMarkSubject(swarm))).toBe("complete");
    const page = await hub.forSwarm(swarm).readDeadLetters();
    expect(page.messages.map((m) => m.event?.id)).toEqual([0, 1, 2, 3]);
  });
});
