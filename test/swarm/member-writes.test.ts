import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { HiveHubService, MigrationOutcome } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { GLOBAL_STREAMS, queueStream, type Bus, type WorkItem } from "../../src/swarm-bus/index.js";
import { legacyQueueStreamName, queueMarkSubject, readMark } from "../../src/swarm-bus/internal.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";
import { joinMember, refusedByServer, type JoinedMember } from "./joined-member.js";

/**
 * What a scoped member may write, enforced by the NATS server on the
 * credential `hive join` minted (the hub runs in Laneway with
 * AGENTIHOOKS_BUS_SCOPED=1):
 *
 * - migration marks are the hub's: a member can neither mark a pending
 *   migration of its own swarm complete nor a completed one pending — not
 *   on the hub-only mark subject, and not on the swarm-prefixed subject
 *   earlier versions used — while it still reads whether one is pending;
 * - the legacy (unscoped) resources of its swarm are not its to write,
 *   although `swarm.<swarm>.>` covers some of their subjects: execution
 *   events (stored in AGENTIHOOKS_EVENTS), ready queues (the very queue a
 *   migration moves), dead letters and the legacy KV stores are refused,
 *   and its own scoped queue, events, dead letters and state keep working.
 */

let hive: HubHive;
let laneway: InProcessLaneway;
let scratch: string;
/** The legacy (unscoped) processes that left work behind, on the hub's credential. */
let legacy: Bus;
const members: JoinedMember[] = [];

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-member-writes-"));
  hive = await startHubHive();
  legacy = await hive.hubBus({ scoped: false });
  laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
  const hub = laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
  await hub.scope({ swarms: ["rig"] });
}, 120_000);

afterAll(async () => {
  for (const member of members) await member.close();
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await hive?.stop();
  await rm(scratch, { recursive: true, force: true });
  for (const member of members) expect(logs).not.toContain(member.credential.creds);
  for (const member of members) expect(logs).not.toContain(member.secret);
});

async function join_(memberId: string, swarms: readonly string[]): Promise<JoinedMember> {
  const member = await joinMember(laneway, hive.tokens.admin, scratch, memberId, swarms);
  members.push(member);
  return member;
}

const hub = () => laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
const forged = (status: "pending" | "complete") => JSON.stringify({ version: 1, kind: "queue", status, source: legacyQueueStreamName("swarm.mig.ready.eng") });

describe("migration marks only the hub can write", () => {
  test("a member forging its swarm's queue mark in both directions is refused by the server, and its binds follow the hub's mark", async () => {
    // Legacy work of swarm mig, one item still held by a legacy consumer: the hub's migration stays pending.
    const queue = await legacy.queue("swarm.mig.ready.eng");
    await queue.offer({ event: { swarm: "mig", job: 1 } });
    await queue.offer({ event: { swarm: "mig", job: 2 } });
    const held = (await queue.take())!;
    await expect(hub().migrateQueue({ swarm: "mig", name: "swarm.mig.ready.eng" })).rejects.toThrow("legacy queue still has undelivered work");
    const { jsm: adminJsm } = await hive.admin();
    const target = queueStream("mig", "eng").name;
    expect((await readMark(adminJsm, target, queueMarkSubject("mig", "eng")))!.mark.status).toBe("pending");

    const member = await join_("hive-mig", ["mig"]);
    const { js } = await member.raw();
    // Marking the pending migration complete: refused on the hub-only subject and on the old swarm-prefixed one.
    for (const subject of [queueMarkSubject("mig", "eng"), "swarm.mig.queue.eng.$migration"]) {
      await refusedByServer(js.publish(subject, forged("complete")), subject);
    }
    expect((await readMark(adminJsm, target, queueMarkSubject("mig", "eng")))!.mark.status).toBe("pending");
    // The member still reads that the migration is pending: its bind is refused.
    const bus = await member.bus();
    await expect(bus.forSwarm("mig").queue("swarm.mig.ready.eng")).rejects.toThrow("scoped queue migration is incomplete");

    // The hub completes it.
    held.nak();
    const moved = await hub().migrateQueue({ swarm: "mig", name: "swarm.mig.ready.eng" });
    expect(moved.progress).toMatchObject({ complete: true, outcome: MigrationOutcome.MOVED });

    // Marking the completed migration pending again: refused the same way, and every member still binds.
    for (const subject of [queueMarkSubject("mig", "eng"), "swarm.mig.queue.eng.$migration", "swarm.mig.state.spoke-work.$migration", "swarm.mig.dead.$migration"]) {
      await refusedByServer(js.publish(subject, forged("pending")), subject);
    }
    expect((await readMark(adminJsm, target, queueMarkSubject("mig", "eng")))!.mark.status).toBe("complete");
    const work = await bus.forSwarm("mig").queue("swarm.mig.ready.eng");
    const items: WorkItem[] = await work.takeBatch({ max: 10, maxWaitMs: 1_000 });
    expect(items.map((item) => item.event?.job).sort()).toEqual([1, 2]);
    for (const item of items) await item.ack();
    const other = await join_("hive-mig-2", ["mig"]);
    await (await other.bus()).forSwarm("mig").queue("swarm.mig.ready.eng");
  });
});

describe("a scoped member and the legacy streams of its swarm", () => {
  let member: JoinedMember;

  beforeAll(async () => {
    // The legacy resources exist: the events and dead-letter streams (the hub keeps them), a legacy ready queue, a legacy KV store.
    await legacy.queue("swarm.rig.ready.eng");
    await legacy.deadLetter({ event: { swarm: "other", id: "keeps-the-stream" } });
    const { nc } = await hive.admin();
    await new Kvm(nc).create("hive-presence", { history: 64 });
    member = await join_("hive-rig", ["rig"]);
    const { jsm } = await hive.admin();
    await waitFor(async () => (await jsm.streams.info(GLOBAL_STREAMS.legacyEvents).catch(() => undefined)) ?? (await jsm.streams.info(GLOBAL_STREAMS.events).catch(() => undefined)), {
      what: "the legacy events stream",
    });
  });

  test("is refused its swarm's legacy events, ready queue, dead letters and legacy KV, and nothing reaches those streams", async () => {
    const { jsm: adminJsm } = await hive.admin();
    const count = async (stream: string) => (await adminJsm.streams.info(stream).catch(() => undefined))?.state.messages ?? 0;
    const events = (await adminJsm.streams.info(GLOBAL_STREAMS.legacyEvents).catch(() => undefined)) ? GLOBAL_STREAMS.legacyEvents : GLOBAL_STREAMS.events;
    const before = {
      events: await count(events),
      queue: await count(legacyQueueStreamName("swarm.rig.ready.eng")),
      dead: await count(GLOBAL_STREAMS.dead),
      kv: await count("KV_hive-presence"),
    };
    const { js } = await member.raw();
    for (const subject of [
      "swarm.rig.execution.started",
      "legacy.swarm.rig.execution.started",
      "swarm.rig.ready.eng",
      "dead.rig",
      "$KV.hive-presence.member-1",
      "$KV.spoke-work.claim-1",
    ]) {
      await refusedByServer(js.publish(subject, JSON.stringify({ swarm: "rig" })), subject);
    }
    expect({
      events: await count(events),
      queue: await count(legacyQueueStreamName("swarm.rig.ready.eng")),
      dead: await count(GLOBAL_STREAMS.dead),
      kv: await count("KV_hive-presence"),
    }).toEqual(before);
  });

  test("round-trips its own queue, events, dead letters and state with the same credential", async () => {
    const rig = (await member.bus()).forSwarm("rig");
    const queue = await rig.queue("swarm.rig.ready.eng");
    await queue.offer({ event: { swarm: "rig", job: "own" } });
    const item = (await queue.take())!;
    expect(item.event).toEqual({ swarm: "rig", job: "own" });
    await item.ack();

    const published = await rig.publish({ subject: "swarm.rig.execution.started", event: { swarm: "rig", execution: "scoped-1" } });
    expect(published.subject).toBe("swarm.rig.events.execution.started");
    const read = await rig.readEvents({ pattern: "swarm.*.execution.>" });
    expect(read.messages.map((m) => m.event?.execution)).toContain("scoped-1");

    await rig.deadLetter({ event: { swarm: "rig", id: "own-letter" } });
    expect((await rig.readDeadLetters()).messages.map((m) => m.event?.id)).toContain("own-letter");

    const state = await rig.state("hive-presence");
    const revision = await state.put({ key: "member-1", value: "here" });
    expect((await state.get("member-1"))!.revision).toBe(revision);

    // A raw publish on its own scoped subjects is stored in its own streams.
    const { js } = await member.raw();
    expect((await js.publish("swarm.rig.events.execution.finished", "{}")).stream).toBe("AGENTIHOOKS-726967-EVENTS");
  });
});
