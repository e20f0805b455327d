import { AckPolicy, RetentionPolicy } from "@nats-io/jetstream";
import { afterAll, beforeAll, expect, test } from "vitest";
import { deadStream, queueStream, type Bus } from "../../../src/swarm-bus/index.js";
import { legacyQueueStreamName, queueMarkSubject, readMark } from "../../../src/swarm-bus/internal.js";
import { startBusHive, type BusHive } from "./bus-fixture.js";

/**
 * Marks of an earlier version. Migrations used to keep their pending mark
 * on `swarm.<swarm>.….$migration`, in the target stream, where members
 * could write it; this version keeps it on a hub-only subject the hub adds
 * to the stream. When the hub provisions a swarm whose stream an earlier
 * version created, it adds that subject and adopts an old mark that names
 * the resource's own legacy source, so a migration pending across the
 * upgrade still holds members off; an old mark naming anything else is
 * left unread.
 */

let hive: BusHive;
let hub: Bus;

beforeAll(async () => {
  hive = await startBusHive();
  hub = await hive.hubBus();
}, 60_000);

afterAll(async () => {
  await hive?.stop();
});

/** The queue stream and lane consumer an earlier version created: no hub-only mark subject. */
async function earlierQueueStream(swarm: string): Promise<string> {
  const { jsm } = await hive.admin();
  const stream = queueStream(swarm, "eng");
  await jsm.streams.add({ name: stream.name, subjects: [...stream.subjects], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(stream.name, { durable_name: "eng", ack_policy: AckPolicy.Explicit, filter_subject: `swarm.${swarm}.queue.eng.work` });
  return stream.name;
}

test("a pending mark an earlier version left is adopted at provisioning: members stay refused until the hub completes the migration", async () => {
  const target = await earlierQueueStream("up");
  const { js, jsm } = await hive.admin();
  await js.publish("swarm.up.queue.eng.$migration", JSON.stringify({ version: 1, kind: "queue", status: "pending", source: legacyQueueStreamName("swarm.up.ready.eng"), consumer: "eng", startSeq: 0 }));
  await hub.provisionSwarm({ swarm: "up" });
  expect((await jsm.streams.info(target)).config.subjects).toContain(queueMarkSubject("up", "eng"));
  expect((await readMark(jsm, target, queueMarkSubject("up", "eng")))!.mark.status).toBe("pending");
  const member = await hive.memberBus("hive-up", ["up"]);
  await expect(member.bus.forSwarm("up").queue("swarm.up.ready.eng")).rejects.toThrow("scoped queue migration is incomplete");
  // The legacy queue is gone: the repeat completes the adopted mark.
  expect(await hub.migrateQueue({ swarm: "up", name: "swarm.up.ready.eng" })).toMatchObject({ outcome: "moved", copied: 0 });
  await member.bus.forSwarm("up").queue("swarm.up.ready.eng");
});

test("an old mark that names another source is not adopted, and members are not held off by it", async () => {
  const target = await earlierQueueStream("forged");
  const { js, jsm } = await hive.admin();
  await js.publish("swarm.forged.queue.eng.$migration", JSON.stringify({ version: 1, kind: "queue", status: "pending", source: "KV_spoke-work" }));
  await jsm.streams.add({ name: deadStream("forged").name, subjects: [...deadStream("forged").subjects] });
  await js.publish("swarm.forged.dead.$migration", "not a mark");
  await hub.provisionSwarm({ swarm: "forged" });
  expect(await readMark(jsm, target, queueMarkSubject("forged", "eng"))).toBeUndefined();
  expect((await jsm.streams.info(deadStream("forged").name)).config.subjects).toContain("laneway.migration.forged.dead");
  const member = await hive.memberBus("hive-forged", ["forged"]);
  await member.bus.forSwarm("forged").queue("swarm.forged.ready.eng");
});
