import { afterAll, beforeAll, describe, expect, test } from "vitest";
import {
  BUS_TEXTS,
  BusPermissionError,
  BusRefusedError,
  MigrationRefusedError,
  type Bus,
  type SwarmBus,
  type WorkQueue,
} from "../../../src/swarm-bus/index.js";
import { refusal, startBusHive, type BusHive, type MemberBus } from "./bus-fixture.js";

/**
 * Every refusal of the specification, with its exact text, from a member
 * of swarm `rig` holding its minted credential. The refusals are the
 * bus's own, raised before anything reaches the server: the member's
 * connection sends no message for them (its outbound message count does
 * not move), and the text is the bus's, not the server's permissions
 * violation.
 */

let hive: BusHive;
let hub: Bus;
let member: MemberBus;
let rig: SwarmBus;
let queue: WorkQueue;

beforeAll(async () => {
  hive = await startBusHive();
  hub = await hive.hubBus();
  await hub.provisionSwarm({ swarm: "rig" });
  await hub.provisionSwarm({ swarm: "other" });
  member = await hive.memberBus("hive-rig", ["rig"]);
  rig = member.bus.forSwarm("rig");
  queue = await rig.queue("swarm.rig.ready.eng");
}, 60_000);

afterAll(async () => {
  await hive?.stop();
});

/** The member connection's outbound message count. */
const sent = () => member.bus.connection.connection().stats().outMsgs;

const cases: [string, () => unknown, string, new (...args: never[]) => Error][] = [
  ["a subject of another swarm", () => rig.publish({ subject: "swarm.other.execution.started", event: { swarm: "rig" } }), "subject 'swarm.other.execution.started' does not belong to swarm 'rig'", BusRefusedError],
  ["an event of another swarm, on publish", () => rig.publish({ subject: "swarm.rig.execution.started", event: { swarm: "other" } }), "event swarm 'other' does not match bus swarm 'rig'", BusRefusedError],
  ["an event of another swarm, on offer", () => queue.offer({ event: { swarm: "other", job: 1 } }), "event swarm 'other' does not match bus swarm 'rig'", BusRefusedError],
  ["an event of another swarm, dead-lettered", () => rig.deadLetter({ event: { swarm: "other" } }), "event swarm 'other' does not match bus swarm 'rig'", BusRefusedError],
  ["a root queue that is not a lane queue name", () => member.bus.queue("eng"), "select a swarm before opening a scoped queue", BusRefusedError],
  ["another swarm's queue", () => rig.queue("swarm.other.ready.eng"), "queue 'swarm.other.ready.eng' does not belong to swarm 'rig'", BusRefusedError],
  ["a lane other than eng, ci or plan", () => rig.queue("swarm.rig.ready.deploy"), "queue 'swarm.rig.ready.deploy' does not belong to swarm 'rig'", BusRefusedError],
  ["a view asked for another swarm", () => rig.forSwarm("other"), "a scoped bus cannot change its swarm", BusRefusedError],
  ["state through the root bus", () => member.bus.state("spoke-work"), "select a swarm before opening scoped state", BusPermissionError],
  ["migration by a member (bind, no provisioning)", () => member.bus.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.eng" }), "migration requires privileged provisioning", BusPermissionError],
];

describe("refusals, before anything reaches the server", () => {
  test.each(cases)("%s", async (_name, call, message, type) => {
    const before = sent();
    const error = await refusal(call);
    expect(error.message).toBe(message);
    expect(error).toBeInstanceOf(type);
    expect(sent()).toBe(before);
  });

  test("the texts are the specification's", () => {
    expect(BUS_TEXTS.selectSwarmForState).toBe("select a swarm before opening scoped state");
    expect(BUS_TEXTS.queueMigrationIncomplete).toBe("scoped queue migration is incomplete");
    expect(BUS_TEXTS.stateMigrationIncomplete).toBe("scoped state migration is incomplete");
  });

  test("state through the root bus is a permission error (reason swarm_forbidden), and a view gets it", async () => {
    const error = await refusal(member.bus.state("spoke-work"));
    expect(error.reason).toBe("swarm_forbidden");
    await rig.state("spoke-work");
  });

  test("a view of the same swarm is the same view", () => {
    expect(rig.forSwarm("rig")).toBe(rig);
  });

  test("migration on a bus without scoping", async () => {
    const unscopedHub = await hive.hubBus({ scoped: false });
    for (const call of [() => unscopedHub.migrateDead({ swarm: "rig" }), () => unscopedHub.migrateState({ swarm: "rig", bucket: "spoke-work", keys: ["k"] }), () => unscopedHub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.eng" })]) {
      const error = await refusal(call);
      expect(error).toBeInstanceOf(MigrationRefusedError);
      expect(error.message).toBe("scoped migration is not enabled");
    }
    const unscopedMember = await hive.memberBus("hive-legacy", "unscoped");
    expect((await refusal(unscopedMember.bus.migrateDead({ swarm: "rig" }))).message).toBe("migration requires privileged provisioning");
  });

  test("the server is the enforcement behind the bus: the raw member connection is refused on another swarm", async () => {
    const nc = await member.raw();
    const { jetstream } = await import("@nats-io/jetstream");
    const error = await refusal(jetstream(nc, { timeout: 5_000 }).publish("swarm.other.execution.started", "{}"));
    expect(`${error.message} ${(error.cause as Error | undefined)?.message ?? ""}`).toContain('Permissions Violation for Publish to "swarm.other.execution.started"');
  });
});
