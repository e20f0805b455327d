import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { MigrationOutcome } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { queueStream, type WorkItem } from "../../src/swarm-bus/index.js";
import { legacyQueueStreamName, queueMarkSubject } from "../../src/swarm-bus/internal.js";
import { startCrashHarness, type CrashHarness } from "./bus/migration-crash-harness.js";

/**
 * Crash safety of MigrateQueue (state and dead letters: hub-migration-crash.test.ts): the Laneway server running the hub
 * (AGENTIHOOKS_BUS_SCOPED=1) is SIGKILLed in the middle of each migration
 * — at the library's pause points, named in LANEWAY_PAUSE_AT — and
 * Laneway is started again on the same data directory: a member binding
 * meanwhile gets the incomplete-migration error, the pending mark stays
 * until the repeat finishes, the repeat completes, nothing is copied
 * twice and nothing is lost.
 */

let harness: CrashHarness;

beforeAll(async () => {
  harness = await startCrashHarness();
}, 60_000);

afterAll(async () => {
  await harness?.stop();
});

describe("queue", () => {
  test.each([
    ["after a batch was copied, before its legacy acks", "migration-after-copy:2", "crash-q1", 1],
    ["after a batch was taken, before it was copied", "migration-after-take:2", "crash-q2", 2],
  ])("killed %s: the repeat moves every item exactly once", async (_name, pauseAt, swarm, heldAttempt) => {
    const name = `swarm.${swarm}.ready.eng`;
    const queue = await harness.legacy.queue(name);
    for (let i = 0; i < 600; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => queue.offer({ event: { swarm, job: i + j } })));
    const paused = await harness.killDuring({ case: "queue", value: { swarm, name } }, pauseAt);
    expect(paused).toEqual({ point: pauseAt.split(":")[0], id: "queue:257" });
    expect(await harness.markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("pending");
    const member = await harness.hive.memberBus(`hive-${swarm}`, [swarm]);
    await expect(member.bus.forSwarm(swarm).queue(name)).rejects.toThrow("scoped queue migration is incomplete");

    // The repeat waits out the legacy consumer's ack wait for the batch the killed hub held.
    const result = await harness.afterRestart((hub) => hub.migrateQueue({ swarm, name }));
    expect(result.progress).toMatchObject({ complete: true, outcome: MigrationOutcome.MOVED });
    expect(await harness.markOf(queueStream(swarm, "eng").name, queueMarkSubject(swarm, "eng"))).toBe("complete");
    const scoped = await member.bus.forSwarm(swarm).queue(name);
    const items: WorkItem[] = [];
    for (;;) {
      const batch = await scoped.takeBatch({ max: 256, maxWaitMs: 1_000 });
      if (batch.length === 0) break;
      await Promise.all(batch.map((item) => item.ack()));
      items.push(...batch);
    }
    expect(items.map((item) => item.event?.job as number).sort((a, b) => a - b)).toEqual(Array.from({ length: 600 }, (_, i) => i));
    // Batch 2 (jobs 256–511) was delivered to the killed hub: copied then, its attempt is exact; taken only, that delivery counts.
    expect(items.find((item) => item.event?.job === 300)!.attempt).toBe(heldAttempt);
    expect(items.find((item) => item.event?.job === 0)!.attempt).toBe(1);
    expect(items.find((item) => item.event?.job === 599)!.attempt).toBe(1);
    expect((await (await harness.hive.admin()).jsm.streams.info(legacyQueueStreamName(name))).state.messages).toBe(0);
  });
});
