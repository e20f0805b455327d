import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { HiveHubService, MigrationOutcome, type MigrateRequestSchema } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { legacyQueueStreamName, openBus, queueMarkSubject, readMark, type Bus, type WorkItem } from "../../src/swarm/bus/index.js";
import { GLOBAL_STREAMS, queueStream } from "../../src/swarm/index.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";

/**
 * Crash safety of MigrateQueue (state and dead letters: hub-migration-crash.test.ts): the Laneway server running the hub
 * (AGENTIHOOKS_BUS_SCOPED=1) is SIGKILLed in the middle of each migration
 * — at the library's pause points, named in LANEWAY_PAUSE_AT — and
 * Laneway is started again on the same data directory: a member binding
 * meanwhile gets the incomplete-migration error, the pending mark stays
 * until the repeat finishes, the repeat completes, nothing is copied
 * twice and nothing is lost.
 */

let hive: HubHive;
/** The legacy (unscoped) processes; their queue consumers hold a delivered item for 2 s. */
let legacy: Bus;

beforeAll(async () => {
  hive = await startHubHive();
  // Legacy names stay selected while present: the hubs use this underscore-named dead-letter stream.
  await (await hive.admin()).jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
  legacy = await openBus({ backend: "nats", url: hive.nats.url, credentials: hive.trust.credsPaths.hub, scoped: false, bind: false, queuePolicy: { ackWaitMs: 2_000 } });
}, 60_000);

afterAll(async () => {
  await legacy?.close();
  await hive?.stop();
});

/** Starts Laneway with the pause point, runs the migration until it pauses there, and kills Laneway. Returns the pause. */
async function killDuring(migration: MessageInitShape<typeof MigrateRequestSchema>["migration"], pauseAt: string): Promise<{ point: string; id: string }> {
  const child = await hive.startChild({ AGENTIHOOKS_BUS_SCOPED: "1", LANEWAY_PAUSE_AT: pauseAt });
  const call = (async () => {
    for await (const _ of child.hub().migrate({ migration }));
  })();
  call.catch(() => undefined);
  const paused = await child.paused();
  await child.kill("SIGKILL");
  await expect(call).rejects.toThrow();
  return paused;
}

/** Laneway started again on the same data directory; runs `body` with its hub client. */
async function afterRestart<T>(body: (hub: Client<typeof HiveHubService>) => Promise<T>): Promise<T> {
  const laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
  try {
    return await body(laneway.clients.client(HiveHubService, { token: hive.tokens.admin }));
  } finally {
    await laneway.stop();
  }
}

const markOf = async (stream: string, subject: string) => (await readMark((await hive.admin()).jsm, stream, subject))?.mark.status;

describe("queue", () => {
  test.each([
    ["after a batch was copied, before its legacy acks", "migration-after-copy:2", "crash-q1", 1],
    ["after a batch was taken, before it was copied", "migration-after-take:2", "crash-q2", 2],
  ])("killed %s: the repeat moves every item exactly once", async (_name, pauseAt, swarm, heldAttempt) => {
    const name = `swarm.${swarm}.ready.eng`;
    const queue = await legacy.queue(name);
    for (let i = 0; i < 600; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => queue.offer({ swarm, job: i + j })));
    const paused = await killDuring({ case: "queue", value: { swarm, name } }, pauseAt);
    expect(paused).toEqual({ point: pauseAt.split(":")[0], id: "queue:257" });
    expect(await markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("pending");
    const member = await hive.memberBus(`hive-${swarm}`, [swarm]);
    await expect(member.bus.forSwarm(swarm).queue(name)).rejects.toThrow("scoped queue migration is incomplete");

    // The repeat waits out the legacy consumer's ack wait for the batch the killed hub held.
    const result = await afterRestart((hub) => hub.migrateQueue({ swarm, name }));
    expect(result.progress).toMatchObject({ complete: true, outcome: MigrationOutcome.MOVED });
    expect(await markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("complete");
    const scoped = await member.bus.forSwarm(swarm).queue(name);
    const items: WorkItem[] = [];
    for (;;) {
      const batch = await scoped.takeBatch(256, { maxWaitMs: 1_000 });
      if (batch.length === 0) break;
      await Promise.all(batch.map((item) => item.ack()));
      items.push(...batch);
    }
    expect(items.map((item) => item.event?.job as number).sort((a, b) => a - b)).toEqual(Array.from({ length: 600 }, (_, i) => i));
    // Batch 2 (jobs 256–511) was delivered to the killed hub: copied then, its attempt is exact; taken only, that delivery counts.
    expect(items.find((item) => item.event?.job === 300)!.attempt).toBe(heldAttempt);
    expect(items.find((item) => item.event?.job === 0)!.attempt).toBe(1);
    expect(items.find((item) => item.event?.job === 599)!.attempt).toBe(1);
    expect((await (await hive.admin()).jsm.streams.info(legacyQueueStreamName(name))).state.messages).toBe(0);
  });
});
