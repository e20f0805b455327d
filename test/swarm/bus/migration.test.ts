import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Kvm, type KV } from "@nats-io/kv";
import { headers as natsHeaders } from "@nats-io/transport-node";
import type { MigrationProgress } from "../../../src/swarm/index.js";
import { deadStream, GLOBAL_STREAMS, MigrationIncompleteError, MigrationRefusedError, queueStream, stateStream, type Bus, type WorkItem } from "../../../src/swarm-bus/index.js";
import { BUS_HEADERS, deadMarkSubject, queueMarkSubject, readMark, stateMarkSubject } from "../../../src/swarm-bus/internal.js";
import { refusal, startBusHive, text, type BusHive } from "./bus-fixture.js";

/**
 * Migration on the hub's root bus (scoped, provisioning), against an
 * operator-mode nats-server, with members holding minted credentials:
 * each call moves what it should and refuses what it should, a repeat is
 * a no-op, a write during the copy is detected, an interrupted run
 * resumes without copying twice, and a member binding before completion
 * gets the incomplete-migration error.
 *
 * An interrupted run is simulated in-process by a progress callback that
 * throws (copies made, pending mark written, source partly cleaned); the
 * hub killed by SIGKILL mid-copy is the crash suite's (issue 12, part 2).
 */

let hive: BusHive;
let hub: Bus;
let legacyHub: Bus;
let kvm: Kvm;

beforeAll(async () => {
  hive = await startBusHive();
  hub = await hive.hubBus();
  legacyHub = await hive.hubBus({ scoped: false });
  const { nc } = await hive.admin();
  kvm = new Kvm(nc);
}, 60_000);

afterAll(async () => {
  await hive?.stop();
});

class Interrupted extends Error {}
const interruptAfter = (n: number) => (p: MigrationProgress) => {
  if (p.copied + p.skipped >= n) throw new Interrupted(`interrupted after ${n}`);
};

async function legacyBucket(bucket: string): Promise<KV> {
  return kvm.create(bucket, { history: 64 });
}

describe("migrateState", () => {
  test("moves every retained revision of the named keys, revisions continuing past the legacy high-water mark; a repeat is a no-op", async () => {
    const kv = await legacyBucket("spoke-work");
    await kv.put("claim-1", "a");
    await kv.put("claim-2", "x");
    await kv.put("claim-1", "b");
    await kv.delete("claim-1");
    await kv.put("claim-1", "c");
    await kv.put("not-rig", "kept");
    const highWater = (await (await hive.admin()).jsm.streams.info("KV_spoke-work")).state.last_seq;

    const progress: MigrationProgress[] = [];
    const { jsm } = await hive.admin();
    const marks: string[] = [];
    const result = await hub.migrateState({ swarm: "rig", bucket: "spoke-work", keys: ["claim-1", "claim-2"],
      onProgress: async (p) => {
        progress.push(p);
        marks.push((await readMark(jsm, stateStream("rig", "spoke-work").name, stateMarkSubject("rig", "spoke-work")))!.mark.status);
      },
    });
    // Pending during the whole copy, complete after it.
    expect(marks).toEqual(["pending", "pending", "pending", "pending", "pending"]);
    expect((await readMark(jsm, stateStream("rig", "spoke-work").name, stateMarkSubject("rig", "spoke-work")))!.mark.status).toBe("complete");
    expect(result).toMatchObject({ outcome: "moved", copied: 5, skipped: 0, total: 5, target: stateStream("rig", "spoke-work").name, source: "KV_spoke-work" });
    expect(progress.map((p) => `${p.copied}/${p.total}`)).toEqual(["1/5", "2/5", "3/5", "4/5", "5/5"]);

    const member = await hive.memberBus("hive-rig", ["rig"]);
    const state = await member.bus.forSwarm("rig").state("spoke-work");
    const history = await state.history("claim-1");
    expect(history.map((e) => [e.operation, e.string()])).toEqual([
      ["PUT", "a"],
      ["PUT", "b"],
      ["DEL", ""],
      ["PUT", "c"],
    ]);
    expect(history.every((e) => e.revision > highWater)).toBe(true);
    expect((await state.get("claim-2"))!.string()).toBe("x");
    // A member writes on: the revision continues from the copies.
    const next = await state.update({ key: "claim-1", value: "d", revision: history.at(-1)!.revision });
    expect(next).toBeGreaterThan(history.at(-1)!.revision);

    // The legacy bucket keeps only keys the swarm does not own.
    expect(await kv.get("claim-1")).toBeNull();
    expect(text((await kv.get("not-rig"))!.value)).toBe("kept");

    const repeat = await hub.migrateState({ swarm: "rig", bucket: "spoke-work", keys: ["claim-2", "claim-1"] });
    expect(repeat).toMatchObject({ outcome: "already-complete", copied: 0 });
    expect((await state.history("claim-1")).length).toBe(5);

    const changed = await refusal(hub.migrateState({ swarm: "rig", bucket: "spoke-work", keys: ["claim-1"] }));
    expect(changed).toBeInstanceOf(MigrationRefusedError);
    expect(changed.message).toBe("state migration ownership or source revisions changed");
  });

  test("a key written during the copy is detected; the mark stays pending and members are refused", async () => {
    const kv = await legacyBucket("spoke-pending");
    await kv.put("w-1", "one");
    await kv.put("w-2", "two");
    let raced = false;
    const error = await refusal(
      hub.migrateState({ swarm: "racing", bucket: "spoke-pending", keys: ["w-1", "w-2"],
        onProgress: async () => {
          if (raced) return;
          raced = true;
          await kv.put("w-2", "written during the copy");
        },
      }),
    );
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe("legacy state changed during migration");
    // Nothing was removed from the source.
    expect(text((await kv.get("w-1"))!.value)).toBe("one");

    const member = await hive.memberBus("hive-racing", ["racing"]);
    const incomplete = await refusal(member.bus.forSwarm("racing").state("spoke-pending"));
    expect(incomplete).toBeInstanceOf(MigrationIncompleteError);
    expect(incomplete.message).toBe("scoped state migration is incomplete");

    const repeat = await refusal(hub.migrateState({ swarm: "racing", bucket: "spoke-pending", keys: ["w-1", "w-2"] }));
    expect(repeat.message).toBe("state migration ownership or source revisions changed");
  });

  test("an interrupted copy resumes: nothing copied twice, nothing lost, the mark clears only at the end", async () => {
    const kv = await legacyBucket("hive-executions");
    for (let i = 0; i < 6; i++) await kv.put(`e-${i % 3}`, `v${i}`);
    const keys = ["e-0", "e-1", "e-2"];
    await expect(hub.migrateState({ swarm: "resumed", bucket: "hive-executions", keys, onProgress: interruptAfter(4) })).rejects.toBeInstanceOf(Interrupted);
    const { jsm } = await hive.admin();
    const target = stateStream("resumed", "hive-executions").name;
    expect((await readMark(jsm, target, stateMarkSubject("resumed", "hive-executions")))!.mark.status).toBe("pending");
    const member = await hive.memberBus("hive-resumed", ["resumed"]);
    await expect(member.bus.forSwarm("resumed").state("hive-executions")).rejects.toThrow("scoped state migration is incomplete");

    const result = await hub.migrateState({ swarm: "resumed", bucket: "hive-executions", keys: keys });
    expect(result).toMatchObject({ outcome: "moved", copied: 2, skipped: 4, total: 6 });
    expect((await readMark(jsm, target, stateMarkSubject("resumed", "hive-executions")))!.mark.status).toBe("complete");
    const state = await member.bus.forSwarm("resumed").state("hive-executions");
    for (const [key, values] of [
      ["e-0", ["v0", "v3"]],
      ["e-1", ["v1", "v4"]],
      ["e-2", ["v2", "v5"]],
    ] as const) {
      expect((await state.history(key)).map((e) => e.string())).toEqual(values);
    }
    // 6 copies and the mark: nothing twice.
    expect((await jsm.streams.info(target)).state.messages).toBe(7);
  });

  test("a target that already has live writes is refused", async () => {
    const live = hub.forSwarm("live");
    const state = await live.state("execution-starts");
    await state.put({ key: "started-1", value: "live write" });
    const kv = await legacyBucket("execution-starts");
    await kv.put("started-0", "legacy");
    const error = await refusal(hub.migrateState({ swarm: "live", bucket: "execution-starts", keys: ["started-0"] }));
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe("the scoped state stream already has live writes");
  });
});

/** A legacy worker's view of legacy queue `name`. */
async function legacyQueue(name: string) {
  return legacyHub.queue(name);
}

async function drain(items: Promise<WorkItem[]>): Promise<WorkItem[]> {
  const taken = await items;
  await Promise.all(taken.map((item) => item.ack()));
  return taken;
}

describe("migrateQueue", () => {
  test("moves every undelivered message, keeping each one's delivery attempt count; a repeat is a no-op", async () => {
    const legacy = await legacyQueue("swarm.rig.ready.eng");
    // Job 1 was tried twice before the migration (alone in the queue, so each take is its redelivery).
    await legacy.offer({ event: { swarm: "rig", job: 1 } });
    for (let attempt = 1; attempt <= 2; attempt++) {
      const item = (await legacy.take())!;
      expect([item.event?.job, item.attempt]).toEqual([1, attempt]);
      item.nak();
    }
    for (let i = 2; i <= 5; i++) await legacy.offer({ event: { swarm: "rig", job: i } });

    const progress: string[] = [];
    const { jsm } = await hive.admin();
    const target = queueStream("rig", "eng").name;
    const markStatus = async () => (await readMark(jsm, target, queueMarkSubject("rig", "eng")))!.mark.status;
    const result = await hub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.eng",
      onProgress: async (p) => {
        progress.push(`${p.copied}/${p.total}`);
        expect(await markStatus()).toBe("pending");
      },
    });
    expect(await markStatus()).toBe("complete");
    expect(result).toMatchObject({ outcome: "moved", copied: 5, skipped: 0, total: 5, target: queueStream("rig", "eng").name, source: "AGENTIHOOKS_QUEUE_swarm_rig_ready_eng" });
    expect(progress.at(-1)).toBe("5/5");

    const member = await hive.memberBus("hive-rig-q", ["rig"]);
    const queue = await member.bus.forSwarm("rig").queue("swarm.rig.ready.eng");
    const items = await drain(queue.takeBatch({ max: 10, maxWaitMs: 1_000 }));
    expect(items.map((item) => [item.event?.job, item.attempt]).sort()).toEqual([
      [1, 3],
      [2, 1],
      [3, 1],
      [4, 1],
      [5, 1],
    ]);
    expect(items.every((item) => item.priorAttempts === item.attempt - 1)).toBe(true);

    expect(await hub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.eng" })).toMatchObject({ outcome: "already-complete", copied: 0 });
    expect(await queue.take({ maxWaitMs: 1_000 })).toBeUndefined();
    // What stays: the latest mark (older ones pruned), and nothing in the legacy queue.
    expect((await jsm.streams.info(target)).state.messages).toBe(1);
    expect((await jsm.streams.info("AGENTIHOOKS_QUEUE_swarm_rig_ready_eng")).state.messages).toBe(0);
  });

  test("work for another swarm is refused; the member is refused until the migration completes", async () => {
    const legacy = await legacyQueue("swarm.rig.ready.ci");
    await legacy.offer({ event: { swarm: "rig", job: "a" } });
    await legacy.offer({ event: { swarm: "other", job: "foreign" } });
    await legacy.offer({ event: { swarm: "rig", job: "b" } });
    const error = await refusal(hub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.ci" }));
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe("legacy queue changed or contains work for another swarm");

    const member = await hive.memberBus("hive-rig-ci", ["rig"]);
    const incomplete = await refusal(member.bus.forSwarm("rig").queue("swarm.rig.ready.ci"));
    expect(incomplete).toBeInstanceOf(MigrationIncompleteError);
    expect(incomplete.message).toBe("scoped queue migration is incomplete");

    // The operator removes the foreign work; the repeat finishes the move.
    const foreign = (await legacy.take())!;
    expect(foreign.event).toEqual({ swarm: "other", job: "foreign" });
    await foreign.ack();
    expect(await hub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.ci" })).toMatchObject({ outcome: "moved", copied: 1, skipped: 0 });
    const items = await drain((await member.bus.forSwarm("rig").queue("swarm.rig.ready.ci")).takeBatch({ max: 10, maxWaitMs: 1_000 }));
    expect(items.map((item) => item.event?.job)).toEqual(["a", "b"]);
  });

  test("new work past the start point is refused", async () => {
    const legacy = await legacyQueue("swarm.fresh.ready.plan");
    await legacy.offer({ event: { swarm: "fresh", job: 1 } });
    await legacy.offer({ event: { swarm: "fresh", job: 2 } });
    let offered = false;
    const error = await refusal(
      hub.migrateQueue({ swarm: "fresh", name: "swarm.fresh.ready.plan",
        onProgress: async () => {
          if (offered) return;
          offered = true;
          await legacy.offer({ event: { swarm: "fresh", job: "late" } });
        },
      }),
    );
    expect(error.message).toBe("legacy queue changed or contains work for another swarm");
    const { jsm } = await hive.admin();
    expect((await readMark(jsm, queueStream("fresh", "plan").name, queueMarkSubject("fresh", "plan")))!.mark.status).toBe("pending");
    // The late work is still in the legacy queue, not lost.
    const late = (await legacy.take())!;
    expect(late.event).toEqual({ swarm: "fresh", job: "late" });
  });

  test("work still held by a consumer is refused until it is released", async () => {
    const legacy = await legacyQueue("swarm.held.ready.eng");
    await legacy.offer({ event: { swarm: "held", job: 1 } });
    await legacy.offer({ event: { swarm: "held", job: 2 } });
    const held = (await legacy.take())!;
    const error = await refusal(hub.migrateQueue({ swarm: "held", name: "swarm.held.ready.eng" }));
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe("legacy queue still has undelivered work");
    const member = await hive.memberBus("hive-held", ["held"]);
    await expect(member.bus.forSwarm("held").queue("swarm.held.ready.eng")).rejects.toThrow("scoped queue migration is incomplete");

    await held.ack();
    expect(await hub.migrateQueue({ swarm: "held", name: "swarm.held.ready.eng" })).toMatchObject({ outcome: "moved", copied: 0, skipped: 0 });
    const items = await drain((await member.bus.forSwarm("held").queue("swarm.held.ready.eng")).takeBatch({ max: 10, maxWaitMs: 1_000 }));
    expect(items.map((item) => item.event?.job)).toEqual([2]);
  });

  test("an interrupted move resumes without copying twice", async () => {
    const legacy = await legacyQueue("swarm.resumed.ready.eng");
    for (let i = 0; i < 8; i++) await legacy.offer({ event: { swarm: "resumed", job: i } });
    await expect(hub.migrateQueue({ swarm: "resumed", name: "swarm.resumed.ready.eng", onProgress: interruptAfter(3) })).rejects.toBeInstanceOf(Interrupted);
    const result = await hub.migrateQueue({ swarm: "resumed", name: "swarm.resumed.ready.eng" });
    expect(result.outcome).toBe("moved");
    const member = await hive.memberBus("hive-resumed-q", ["resumed"]);
    const items = await drain((await member.bus.forSwarm("resumed").queue("swarm.resumed.ready.eng")).takeBatch({ max: 20, maxWaitMs: 1_000 }));
    expect(items.map((item) => item.event?.job).sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  test("an aborted signal stops the move at the next message; the mark stays pending and a repeat moves the rest once", async () => {
    const legacy = await legacyQueue("swarm.stopped.ready.eng");
    for (let i = 0; i < 6; i++) await legacy.offer({ event: { swarm: "stopped", job: i } });
    const call = new AbortController();
    const seen: number[] = [];
    const stopped = await refusal(
      hub.migrateQueue(
        {
          swarm: "stopped",
          name: "swarm.stopped.ready.eng",
          onProgress: (p) => {
            seen.push(p.copied + p.skipped);
            call.abort();
          },
        },
        call.signal,
      ),
    );
    expect(stopped.reason).toBe("swarm_unavailable");
    expect(stopped.message).toBe("the migration was stopped because its call ended; repeat it to resume");
    // The abort came during the first message's report: no later message was reported.
    expect(seen).toEqual([1]);
    const { jsm } = await hive.admin();
    expect((await readMark(jsm, queueStream("stopped", "eng").name, queueMarkSubject("stopped", "eng")))!.mark.status).toBe("pending");
    expect((await hub.migrateQueue({ swarm: "stopped", name: "swarm.stopped.ready.eng" })).outcome).toBe("moved");
    const member = await hive.memberBus("hive-stopped-q", ["stopped"]);
    const items = await drain((await member.bus.forSwarm("stopped").queue("swarm.stopped.ready.eng")).takeBatch({ max: 20, maxWaitMs: 1_000 }));
    expect(items.map((item) => item.event?.job).sort()).toEqual([0, 1, 2, 3, 4, 5]);
  });
});

describe("migrateDead", () => {
  test("moves every letter of the swarm from AGENTIHOOKS_DEAD into its own stream; a repeat is a no-op", async () => {
    const { jsm, js } = await hive.admin();
    await jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
    const h = natsHeaders();
    h.set("Agentihooks-Dead-Reason", "timeout");
    await js.publish("dead.rig", JSON.stringify({ swarm: "rig", id: 1 }), { headers: h });
    await js.publish("dead.other", JSON.stringify({ swarm: "other", id: 9 }));
    await js.publish("dead.rig", JSON.stringify({ swarm: "rig", id: 2 }));
    await js.publish("dead.rig", JSON.stringify({ swarm: "rig", id: 3 }));

    const statuses: string[] = [];
    const result = await hub.migrateDead({ swarm: "rig",
      onProgress: async () => void statuses.push((await readMark(jsm, deadStream("rig").name, deadMarkSubject("rig")))!.mark.status),
    });
    expect(statuses).toEqual(["pending", "pending", "pending"]);
    expect((await readMark(jsm, deadStream("rig").name, deadMarkSubject("rig")))!.mark.status).toBe("complete");
    expect(result).toMatchObject({ outcome: "moved", copied: 3, total: 3, source: GLOBAL_STREAMS.legacyDead, target: deadStream("rig").name });
    const member = await hive.memberBus("hive-rig-dead", ["rig"]);
    const page = await member.bus.forSwarm("rig").readDeadLetters();
    expect(page.messages.map((m) => [m.subject, m.event?.id])).toEqual([
      ["dead.rig", 1],
      ["dead.rig", 2],
      ["dead.rig", 3],
    ]);
    expect(page.messages[0]!.headers?.get("Agentihooks-Dead-Reason")).toBe("timeout");
    // Only the other swarm's letter stays behind.
    const left = await jsm.streams.info(GLOBAL_STREAMS.legacyDead, { subjects_filter: ">" });
    expect(left.state.subjects).toEqual({ "dead.other": 1 });

    expect(await hub.migrateDead({ swarm: "rig" })).toMatchObject({ outcome: "already-complete", copied: 0 });
    expect((await member.bus.forSwarm("rig").readDeadLetters()).messages).toHaveLength(3);
  });

  test("an interrupted move resumes without copying twice; a retained copy that differs from its source is refused", async () => {
    const { js, jsm } = await hive.admin();
    const seqs: number[] = [];
    for (let i = 0; i < 4; i++) seqs.push((await js.publish("dead.crashy", JSON.stringify({ swarm: "crashy", id: i }))).seq);
    await expect(hub.migrateDead({ swarm: "crashy", onProgress: interruptAfter(2) })).rejects.toBeInstanceOf(Interrupted);
    const result = await hub.migrateDead({ swarm: "crashy" });
    expect(result).toMatchObject({ outcome: "moved", copied: 2, skipped: 2, total: 4 });
    const target = deadStream("crashy").name;
    const page = await hub.forSwarm("crashy").readDeadLetters();
    expect(page.messages.map((m) => m.event?.id)).toEqual([0, 1, 2, 3]);

    // A copy that differs from its source.
    const source = (await js.publish("dead.tampered", JSON.stringify({ swarm: "tampered", id: "original" }))).seq;
    await js.publish("dead.tampered", JSON.stringify({ swarm: "tampered", id: "second" }));
    await expect(hub.migrateDead({ swarm: "tampered", onProgress: interruptAfter(1) })).rejects.toBeInstanceOf(Interrupted);
    const forged = natsHeaders();
    forged.set(BUS_HEADERS.migratedFrom, `${GLOBAL_STREAMS.legacyDead}/${source}`);
    const tamperedTarget = deadStream("tampered").name;
    await jsm.streams.purge(tamperedTarget, { filter: "swarm.tampered.dead.event" });
    await js.publish("swarm.tampered.dead.event", JSON.stringify({ swarm: "tampered", id: "changed" }), { headers: forged });
    const error = await refusal(hub.migrateDead({ swarm: "tampered" }));
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe(`a retained dead letter copy differs from its source (legacy sequence ${source})`);
    expect(target).not.toBe(tamperedTarget);
  });
});
