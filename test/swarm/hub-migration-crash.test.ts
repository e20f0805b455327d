import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Kvm } from "@nats-io/kv";
import { MigrationOutcome } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { deadStream, GLOBAL_STREAMS, stateStream } from "../../src/swarm-bus/index.js";
import { deadMarkSubject, stateMarkSubject } from "../../src/swarm-bus/internal.js";
import { startCrashHarness, type CrashHarness } from "./bus/migration-crash-harness.js";

/**
 * Crash safety of the migration RPCs (state and dead letters here; queues in
 * hub-migration-crash-queue.test.ts): the Laneway server running the hub
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

describe("state", () => {
  test.each([
    ["mid-copy", "migration-after-copy:3", "crash-s1"],
    ["after the copy and the legacy purge, before the mark completed", "migration-before-complete", "crash-s2"],
  ])("killed %s: the repeat completes with every revision once", async (_name, pauseAt, swarm) => {
    const { nc, jsm } = await harness.hive.admin();
    const kv = await new Kvm(nc).create("spoke-pending", { history: 64 });
    for (let i = 0; i < 6; i++) await kv.put(`${swarm}-k${i % 2}`, `v${i}`);
    const keys = [`${swarm}-k0`, `${swarm}-k1`];
    const paused = await harness.killDuring({ case: "state", value: { swarm, bucket: "spoke-pending", keys } }, pauseAt);
    expect(paused.point).toBe(pauseAt.split(":")[0]);
    const target = stateStream(swarm, "spoke-pending").name;
    // The mark is still pending, even when everything was copied and purged.
    expect(await harness.markOf(target, stateMarkSubject(swarm, "spoke-pending"))).toBe("pending");
    const member = await harness.hive.memberBus(`hive-${swarm}`, [swarm]);
    await expect(member.bus.forSwarm(swarm).state("spoke-pending")).rejects.toThrow("scoped state migration is incomplete");

    const result = await harness.afterRestart((hub) => hub.migrateState({ swarm, bucket: "spoke-pending", keys }));
    expect(result.progress).toMatchObject({ total: 6n, complete: true, outcome: MigrationOutcome.MOVED });
    expect(await harness.markOf(target, stateMarkSubject(swarm, "spoke-pending"))).toBe("complete");
    const state = await member.bus.forSwarm(swarm).state("spoke-pending");
    expect((await state.history(`${swarm}-k0`)).map((e) => e.string())).toEqual(["v0", "v2", "v4"]);
    expect((await state.history(`${swarm}-k1`)).map((e) => e.string())).toEqual(["v1", "v3", "v5"]);
    // Six copies and the mark: nothing twice.
    expect((await jsm.streams.info(target)).state.messages).toBe(7);
    expect(await kv.get(`${swarm}-k0`)).toBeNull();
  });
});

test("dead letters: killed mid-copy, the repeat completes with every letter once", async () => {
  const swarm = "crash-d";
  const { js, jsm } = await harness.hive.admin();
  for (let i = 0; i < 4; i++) await js.publish(`dead.${swarm}`, JSON.stringify({ swarm, id: i }));
  const paused = await harness.killDuring({ case: "dead", value: { swarm } }, "migration-after-copy:2");
  expect(paused.point).toBe("migration-after-copy");
  expect(await harness.markOf(deadStream(swarm).name, deadMarkSubject(swarm))).toBe("pending");

  const result = await harness.afterRestart((hub) => hub.migrateDead({ swarm }));
  expect(result.progress).toMatchObject({ total: 4n, complete: true, outcome: MigrationOutcome.MOVED, sourceStream: GLOBAL_STREAMS.legacyDead });
  expect(result.progress!.copied + result.progress!.skipped).toBe(4n);
  expect(result.progress!.skipped).toBe(2n);
  expect(await harness.markOf(deadStream(swarm).name, deadMarkSubject(swarm))).toBe("complete");
  const member = await harness.hive.memberBus(`hive-${swarm}`, [swarm]);
  const page = await member.bus.forSwarm(swarm).readDeadLetters();
  expect(page.messages.map((m) => m.event?.id)).toEqual([0, 1, 2, 3]);
  // Four letters and the mark.
  expect((await jsm.streams.info(deadStream(swarm).name)).state.messages).toBe(5);
  expect((await jsm.streams.info(GLOBAL_STREAMS.legacyDead, { subjects_filter: `dead.${swarm}` })).state.messages).toBe(0);
});
