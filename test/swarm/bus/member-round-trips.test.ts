import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Kvm } from "@nats-io/kv";
import { RetentionPolicy } from "@nats-io/jetstream";
import {
  BUS_TEXTS,
  BusResourceMissingError,
  deadStream,
  eventsStream,
  GLOBAL_STREAMS,
  MigrationRefusedError,
  queueStream,
  STATE_REVISIONS_PER_KEY,
  StateRevisionConflictError,
  stateStream,
  type Bus,
  type SwarmBus,
} from "../../../src/swarm-bus/index.js";
import { refusal, startBusHive, text, type BusHive, type MemberBus } from "./bus-fixture.js";

/**
 * The scoped bus against a real nats-server in operator mode: the hub
 * (its service credential, scoped, provisioning) creates swarm `rig`'s
 * streams; a member of `rig` holding only a credential minted with its
 * scoped grant, in bind mode, round-trips its lane queue, dead letters,
 * state and events. An unscoped (legacy) member works beside it on the
 * same server, on the legacy resources.
 */

let hive: BusHive;
let hub: Bus;
let member: MemberBus;
let rig: SwarmBus;

beforeAll(async () => {
  hive = await startBusHive();
  hub = await hive.hubBus();
  await hub.provisionSwarm({ swarm: "rig" });
  member = await hive.memberBus("hive-rig", ["rig"]);
  rig = member.bus.forSwarm("rig");
}, 60_000);

afterAll(async () => {
  await hive?.stop();
});

describe("a scoped member in bind mode, with only its minted grant", () => {
  test("offers and takes work on its lane queue: at least once, ack and nak, with attempt counts", async () => {
    const queue = await rig.queue("swarm.rig.ready.eng");
    expect(queue.stream).toBe(queueStream("rig", "eng").name);
    expect(queue.consumerName).toBe("eng");
    const offered = await queue.offer({ event: { swarm: "rig", job: 1 } });
    await queue.offer({ event: { swarm: "rig", job: 2 } });

    const first = (await queue.take())!;
    expect(first.seq).toBe(offered.seq);
    expect(first.event).toEqual({ swarm: "rig", job: 1 });
    expect(first.attempt).toBe(1);
    first.nak();
    const again = (await queue.take())!;
    expect(again.seq).toBe(offered.seq);
    expect(again.attempt).toBe(2);
    expect(again.deliveryCount).toBe(2);
    await again.ack();

    const second = (await queue.take())!;
    expect(second.event).toEqual({ swarm: "rig", job: 2 });
    expect(second.attempt).toBe(1);
    await second.ack();
    expect(await queue.take({ maxWaitMs: 1_000 })).toBeUndefined();
  });

  test("takes batches from each of its lanes", async () => {
    for (const lane of ["ci", "plan"] as const) {
      const queue = await rig.queue(`swarm.rig.ready.${lane}`);
      for (let i = 0; i < 5; i++) await queue.offer({ event: { swarm: "rig", lane, i } });
      const items = await queue.takeBatch({ max: 5, maxWaitMs: 2_000 });
      expect(items.map((item) => item.event?.i)).toEqual([0, 1, 2, 3, 4]);
      await Promise.all(items.map((item) => item.ack()));
    }
  });

  test("dead-letters an event and reads it back", async () => {
    const published = await rig.deadLetter({ event: { swarm: "rig", id: "e-1" }, reason: "handler failed" });
    expect(published.stream).toBe(deadStream("rig").name);
    expect(published.subject).toBe("swarm.rig.dead.event");
    const page = await rig.readDeadLetters();
    expect(page.messages.map((m) => [m.subject, m.event])).toEqual([["dead.rig", { swarm: "rig", id: "e-1" }]]);
    expect(page.messages[0]!.headers?.get("Agentihooks-Dead-Reason")).toBe("handler failed");
  });

  test("puts and gets state with per-key revisions, 64 kept, read by message get", async () => {
    const state = await rig.state("spoke-work");
    expect(state.stream).toBe(stateStream("rig", "spoke-work").name);
    const r1 = await state.create({ key: "claim-1", value: "v1" });
    const r2 = await state.update({ key: "claim-1", value: "v2", revision: r1 });
    expect(r2).toBeGreaterThan(r1);
    const entry = (await state.get("claim-1"))!;
    expect([entry.string(), entry.revision]).toEqual(["v2", r2]);
    const stale = await refusal(state.update({ key: "claim-1", value: "v3", revision: r1 }));
    expect(stale).toBeInstanceOf(StateRevisionConflictError);
    expect(await refusal(state.create({ key: "claim-1", value: "again" }))).toBeInstanceOf(StateRevisionConflictError);

    for (let i = 0; i < 70; i++) await state.put({ key: "claim-2", value: `rev-${i}` });
    const history = await state.history("claim-2");
    expect(history).toHaveLength(STATE_REVISIONS_PER_KEY);
    expect(history[0]!.string()).toBe("rev-6");
    expect(history.at(-1)!.string()).toBe("rev-69");

    await state.delete({ key: "claim-1" });
    expect(await state.get("claim-1")).toBeUndefined();
    expect((await state.entry("claim-1"))!.operation).toBe("DEL");
    expect(await state.get("never-written")).toBeUndefined();
  });

  test("publishes events under its logical subjects and reads them back", async () => {
    const started = await rig.publish({ subject: "swarm.rig.execution.started", event: { swarm: "rig", execution: "x-1" } });
    expect(started.stream).toBe(eventsStream("rig").name);
    expect(started.subject).toBe("swarm.rig.events.execution.started");
    await rig.publish({ subject: "swarm.rig.execution.finished", event: { swarm: "rig", execution: "x-1" } });
    const page = await rig.readEvents({ pattern: "swarm.*.execution.>" });
    expect(page.messages.map((m) => [m.subject, m.event?.execution])).toEqual([
      ["swarm.rig.execution.started", "x-1"],
      ["swarm.rig.execution.finished", "x-1"],
    ]);
    const onlyStarted = await rig.readEvents({ pattern: "swarm.rig.execution.started" });
    expect(onlyStarted.messages).toHaveLength(1);
    const next = await rig.readEvents({ pattern: "swarm.*.execution.>", fromSeq: page.nextSeq });
    expect(next.messages).toEqual([]);
  });

  test("the root bus of a member serves the lane queue named in full, and its views", async () => {
    const queue = await member.bus.queue("swarm.rig.ready.plan");
    await queue.offer({ event: { swarm: "rig", via: "root" } });
    const item = (await rig.queue("swarm.rig.ready.plan").then((q) => q.take()))!;
    expect(item.event).toEqual({ swarm: "rig", via: "root" });
    await item.ack();
  });

  test("the server itself refuses the same member on another swarm's resources", async () => {
    await hub.provisionSwarm({ swarm: "other" });
    const nc = await member.raw();
    const { jetstream } = await import("@nats-io/jetstream");
    const js = jetstream(nc, { timeout: 5_000 });
    const denied = await refusal(js.publish("swarm.other.queue.eng.work", "{}"));
    expect(`${denied.message} ${(denied.cause as Error | undefined)?.message ?? ""}`).toContain("Permissions Violation");
  });

  test("bind mode never creates: a swarm the hub has not provisioned is missing", async () => {
    const fresh = await hive.memberBus("hive-fresh", ["unprovisioned"]);
    const error = await refusal(fresh.bus.forSwarm("unprovisioned").queue("swarm.unprovisioned.ready.eng"));
    expect(error).toBeInstanceOf(BusResourceMissingError);
    expect(error.message).toBe("the 'eng' queue stream of swarm 'unprovisioned' does not exist; the hub provisions it");
  });
});

describe("a legacy (unscoped) bus beside a scoped one on the same server", () => {
  test("an unscoped member publishes on the legacy subjects and dead-letters into the shared stream while the scoped member works", async () => {
    const legacyHub = await hive.hubBus({ scoped: false });
    // The legacy processes' streams, as they exist on a server before scoping.
    const { jsm } = await hive.admin();
    await jsm.streams.add({ name: GLOBAL_STREAMS.legacyEvents, subjects: ["swarm.*.execution.>"] });
    await jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
    // The hub at start: the legacy events stream now also holds legacy.swarm.>.
    await legacyHub.readEvents({ pattern: "swarm.*.execution.>" });
    expect((await jsm.streams.info(GLOBAL_STREAMS.legacyEvents)).config.subjects).toEqual(["swarm.*.execution.>", "legacy.swarm.>"]);
    await legacyHub.state("spoke-pending");

    const legacy = await hive.memberBus("hive-legacy", "unscoped");
    const published = await legacy.bus.publish({ subject: "swarm.rig.execution.started", event: { swarm: "rig", execution: "old-1" } });
    expect([published.stream, published.subject]).toEqual([GLOBAL_STREAMS.legacyEvents, "legacy.swarm.rig.execution.started"]);
    const dead = await legacy.bus.deadLetter({ event: { swarm: "rig", id: "old" } });
    expect([dead.stream, dead.subject]).toEqual([GLOBAL_STREAMS.legacyDead, "dead.rig"]);
    const legacyState = await legacy.bus.state("spoke-pending");
    expect(legacyState.stream).toBe("KV_spoke-pending");
    const revision = await legacyState.put({ key: "claim-9", value: "legacy" });
    expect((await legacyState.get("claim-9"))!.revision).toBe(revision);

    // The scoped member at the same time, on its own streams.
    const queue = await rig.queue("swarm.rig.ready.eng");
    await queue.offer({ event: { swarm: "rig", job: "beside" } });
    const item = (await queue.take())!;
    expect(item.event).toEqual({ swarm: "rig", job: "beside" });
    await item.ack();
    const scopedEvents = await rig.readEvents({ pattern: "swarm.*.execution.>" });
    expect(scopedEvents.messages.map((m) => m.event?.execution)).not.toContain("old-1");

    // The hub reads both legacy subjects back as the logical one.
    const legacyEvents = await legacyHub.readEvents({ pattern: "swarm.*.execution.>" });
    expect(legacyEvents.messages.map((m) => [m.subject, m.storedSubject])).toEqual([["swarm.rig.execution.started", "legacy.swarm.rig.execution.started"]]);
    expect((await legacyHub.forSwarm("rig").readDeadLetters()).messages.map((m) => m.event)).toEqual([{ swarm: "rig", id: "old" }]);
    // And the kv is a real JetStream KV bucket.
    const { nc } = await hive.admin();
    expect(text((await (await new Kvm(nc).open("spoke-pending")).get("claim-9"))!.value)).toBe("legacy");
  });
});

describe("legacy names stay selected while present", () => {
  test("an existing underscore stream and its consumer cursor are bound instead of a new stream", async () => {
    const { jsm, js } = await hive.admin();
    const q = queueStream("legacy-names", "eng");
    await jsm.streams.add({ name: q.legacyName, subjects: [...q.subjects], retention: RetentionPolicy.Workqueue });
    await jsm.consumers.add(q.legacyName, { durable_name: "eng", ack_policy: "explicit" as never, filter_subject: "swarm.legacy-names.queue.eng.work" });
    await js.publish("swarm.legacy-names.queue.eng.work", JSON.stringify({ swarm: "legacy-names", n: 1 }));
    const hubView = hub.forSwarm("legacy-names");
    expect((await hubView.queue("swarm.legacy-names.ready.eng")).stream).toBe(q.legacyName);
    expect((await hubView.publish({ subject: "swarm.legacy-names.execution.started", event: { swarm: "legacy-names" } })).stream).toBe(eventsStream("legacy-names").name);
    await expect(jsm.streams.info(q.name)).rejects.toThrow();

    const m = await hive.memberBus("hive-legacy-names", ["legacy-names"]);
    const queue = await m.bus.forSwarm("legacy-names").queue("swarm.legacy-names.ready.eng");
    expect(queue.stream).toBe(q.legacyName);
    const item = (await queue.take())!;
    expect(item.event).toEqual({ swarm: "legacy-names", n: 1 });
    await item.ack();
  });

  test("AGENTIHOOKS_DEAD is selected while present; a new deployment gets AGENTIHOOKS-DEAD", async () => {
    const fresh = await startBusHive();
    try {
      const legacyHub = await fresh.hubBus({ scoped: false });
      const dead = await legacyHub.deadLetter({ event: { swarm: "rig", id: 1 } });
      expect(dead.stream).toBe(GLOBAL_STREAMS.dead);
      const events = await legacyHub.publish({ subject: "swarm.rig.execution.started", event: { swarm: "rig" } });
      expect(events.stream).toBe(GLOBAL_STREAMS.events);
    } finally {
      await fresh.stop();
    }
    // On the shared hive, the underscore streams exist and stay selected.
    const legacyHub = await hive.hubBus({ scoped: false });
    expect((await legacyHub.deadLetter({ event: { swarm: "demo", id: 2 } })).stream).toBe(GLOBAL_STREAMS.legacyDead);
  });
});

describe("legacy state requires explicit key ownership", () => {
  test("a scoped state stream is not created over a legacy KV bucket that still holds entries", async () => {
    const { nc } = await hive.admin();
    const kv = await new Kvm(nc).create("hive-presence", { history: 64 });
    await kv.put("member-1", "here");
    const error = await refusal(hub.forSwarm("ownership").state("hive-presence"));
    expect(error).toBeInstanceOf(MigrationRefusedError);
    expect(error.message).toBe(BUS_TEXTS.legacyStateOwnership);
    expect(error.message).toBe("legacy state requires explicit key ownership");
    // Provisioning creates everything else and reports the same refusal.
    const provisioning = await refusal(hub.provisionSwarm({ swarm: "ownership" }));
    expect(provisioning.message).toBe("legacy state requires explicit key ownership");
    const { jsm } = await hive.admin();
    await expect(jsm.streams.info(stateStream("ownership", "hive-presence").name)).rejects.toThrow();
    expect((await jsm.streams.info(stateStream("ownership", "spoke-work").name)).config.max_msgs_per_subject).toBe(64);
    // Migrating the keys the swarm owns creates it.
    await hub.migrateState({ swarm: "ownership", bucket: "hive-presence", keys: [] });
    await hub.forSwarm("ownership").state("hive-presence");
  });
});
