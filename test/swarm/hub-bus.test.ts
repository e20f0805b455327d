import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { AckPolicy } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { createLogger } from "../../src/log/logger.js";
import { BrokerConnection } from "../../src/nats/index.js";
import { HubBus } from "../../src/swarm/index.js";
import { eventsStream, GLOBAL_STREAMS, stateStream, SWARM_STATE_BUCKETS, swarmStreams } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";

/**
 * The hub's bus inside Laneway (src/swarm/hub-bus.ts), against an
 * operator-mode nats-server the test starts: without
 * AGENTIHOOKS_BUS_SCOPED the hub touches no stream; with it the hub
 * creates each member swarm's streams at start (state streams too, except
 * over a legacy bucket that still holds entries: `legacy state requires
 * explicit key ownership`), updates the legacy events stream to both
 * subjects while keeping its name and its durable's cursor, keeps an
 * underscore-named per-swarm stream selected, and fans in the legacy and
 * every per-swarm events stream — creating a swarm's streams before it
 * acknowledges that swarm's first event.
 */

let hive: HubHive;
let laneway: InProcessLaneway | undefined;

const ALPHA = "alpha";
const BETA = "beta";
const GAMMA = "gamma";
const DELTA = "delta";

beforeAll(async () => {
  hive = await startHubHive();
  // What older processes left on the server before this hub version.
  const { nc, js, jsm } = await hive.admin();
  await jsm.streams.add({ name: GLOBAL_STREAMS.legacyEvents, subjects: ["swarm.*.execution.>"] });
  await js.publish(`swarm.${ALPHA}.execution.started`, JSON.stringify({ swarm: ALPHA, n: 1 }));
  await js.publish(`swarm.${ALPHA}.execution.finished`, JSON.stringify({ swarm: ALPHA, n: 2 }));
  // An old hub durable on the original subject alone, which already handled the first event.
  await jsm.consumers.add(GLOBAL_STREAMS.legacyEvents, { durable_name: "laneway-hub", ack_policy: AckPolicy.Explicit, filter_subject: "swarm.*.execution.>" });
  const old = await js.consumers.get(GLOBAL_STREAMS.legacyEvents, "laneway-hub");
  const first = await old.next({ expires: 5_000 });
  await first!.ackAck();
  // An underscore-named per-swarm events stream.
  const beta = eventsStream(BETA);
  await jsm.streams.add({ name: beta.legacyName, subjects: [...beta.subjects] });
  await js.publish(`swarm.${BETA}.events.execution.started`, JSON.stringify({ swarm: BETA }));
  // Legacy state with entries: no scoped spoke-work stream may be created over it.
  const kv = await new Kvm(nc).create("spoke-work", { history: 64 });
  await kv.put(`${GAMMA}-claim`, "held");
}, 60_000);

afterAll(async () => {
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await hive?.stop();
  for (const secret of hive?.secrets ?? []) expect(logs).not.toContain(secret);
  expect(logs).not.toContain(hive?.nats.url ?? "nats://");
});

const streamExists = async (name: string) => {
  const { jsm } = await hive.admin();
  return jsm.streams.info(name).then(
    () => true,
    () => false,
  );
};

function logLines(msg: string): Record<string, unknown>[] {
  return (laneway?.logs ?? [])
    .flatMap((chunk) => chunk.split("\n"))
    .filter((line) => line.includes(msg))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.msg === msg);
}

const fannedIn = () => logLines("hub event fanned in");

/** Whether the hub creates this stream: every one but the spoke-work state stream, whose legacy bucket (shared by all swarms) still holds an entry. */
const creatable = (stream: { kind: string; bucket?: string }) => !(stream.kind === "state" && stream.bucket === "spoke-work");

async function expectProvisioned(swarm: string): Promise<void> {
  for (const stream of swarmStreams(swarm)) expect(await streamExists(stream.name), stream.name).toBe(creatable(stream));
}

describe("the hub's bus", () => {
  test("without AGENTIHOOKS_BUS_SCOPED the hub creates no per-swarm stream and leaves the legacy stream alone", async () => {
    laneway = await hive.startInProcess();
    const hub = laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
    await hub.invite({ memberId: "hive-a" });
    const scoped = await hub.scope({ swarms: [ALPHA, GAMMA] });
    expect(scoped.members.map((m) => [m.memberId, m.swarms])).toEqual([["hive-a", [ALPHA, GAMMA]]]);
    const { jsm } = await hive.admin();
    expect((await jsm.streams.info(GLOBAL_STREAMS.legacyEvents)).config.subjects).toEqual(["swarm.*.execution.>"]);
    for (const stream of swarmStreams(ALPHA)) expect(await streamExists(stream.name), stream.name).toBe(false);
    await laneway.stop();
    laneway = undefined;
  });

  test("scoped: member swarms are provisioned at start, the legacy names stay selected, and no state stream is created over a non-empty legacy bucket", async () => {
    laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
    // Both member swarms: events, dead letters, the three lane queues and the state streams — but not
    // over KV_spoke-work, which still holds an entry (the refusal is logged once per swarm).
    for (const swarm of [ALPHA, GAMMA]) {
      const refusal = await waitFor(() => logLines("a swarm's state stream was not created over legacy state").find((l) => l.swarm === swarm), {
        what: `the legacy state refusal for ${swarm}`,
      });
      expect(refusal.problem).toBe("legacy state requires explicit key ownership");
      await expectProvisioned(swarm);
    }

    // The legacy events stream keeps its underscore name and now holds both subjects.
    const { jsm } = await hive.admin();
    await waitFor(async () => (await jsm.streams.info(GLOBAL_STREAMS.legacyEvents)).config.subjects?.length === 2, { what: "the subject update" });
    expect((await jsm.streams.info(GLOBAL_STREAMS.legacyEvents)).config.subjects).toEqual(["swarm.*.execution.>", "legacy.swarm.>"]);
    expect(await streamExists(GLOBAL_STREAMS.events)).toBe(false);
    // The old durable is accepted as it is, with its cursor; a companion reads the prefixed subject.
    const durable = await waitFor(async () => {
      const info = await jsm.consumers.info(GLOBAL_STREAMS.legacyEvents, "laneway-hub");
      return info.ack_floor.stream_seq === 2 ? info : undefined;
    }, { what: "the legacy durable to reach the second event" });
    expect(durable.config.filter_subject).toBe("swarm.*.execution.>");
    expect((await jsm.consumers.info(GLOBAL_STREAMS.legacyEvents, "laneway-hub-legacy")).config.filter_subject).toBe("legacy.swarm.>");
    const legacyEvents = fannedIn().filter((l) => l.stream === GLOBAL_STREAMS.legacyEvents);
    expect(legacyEvents.map((l) => l.seq)).toEqual([2]);
  });

  test("fan-in: the underscore-named per-swarm stream stays selected, and a swarm's streams exist before its event is acknowledged", async () => {
    const beta = eventsStream(BETA);
    const { jsm } = await hive.admin();
    await waitFor(async () => (await jsm.consumers.info(beta.legacyName, "laneway-hub")).ack_floor.stream_seq === 1, { what: "beta's event to be handled" });
    // Acknowledged only after beta's state streams were created.
    for (const bucket of SWARM_STATE_BUCKETS) expect(await streamExists(stateStream(BETA, bucket).name), bucket).toBe(bucket !== "spoke-work");
    expect(await streamExists(beta.name)).toBe(false);
    expect(fannedIn().find((l) => l.stream === beta.legacyName)).toMatchObject({ subject: `swarm.${BETA}.execution.started`, swarm: BETA });
  });

  test("fan-in: events of legacy publishers (both subjects) and of a swarm's own stream reach the hub", async () => {
    const { js, jsm } = await hive.admin();
    await js.publish(`legacy.swarm.${DELTA}.execution.started`, JSON.stringify({ swarm: DELTA }));
    await js.publish(`swarm.${GAMMA}.execution.started`, JSON.stringify({ swarm: GAMMA }));
    await js.publish(`swarm.${ALPHA}.events.execution.started`, JSON.stringify({ swarm: ALPHA, n: 3 }));
    const delta = await waitFor(() => fannedIn().find((l) => l.swarm === DELTA), { what: "delta's legacy event" });
    expect(delta).toMatchObject({ stream: GLOBAL_STREAMS.legacyEvents, subject: `swarm.${DELTA}.execution.started` });
    // Delta is in no member's list: its streams were created before its event was acknowledged.
    await expectProvisioned(DELTA);
    const alpha = await waitFor(() => fannedIn().find((l) => l.stream === eventsStream(ALPHA).name), { what: "alpha's own event" });
    expect(alpha).toMatchObject({ subject: `swarm.${ALPHA}.execution.started`, swarm: ALPHA, seq: 1 });
    await waitFor(() => fannedIn().find((l) => l.swarm === GAMMA && l.stream === GLOBAL_STREAMS.legacyEvents), { what: "gamma's legacy event" });
    // Gamma's event was handled even though its spoke-work state stays in the legacy bucket until migrated.
    expect(await streamExists(stateStream(GAMMA, "spoke-work").name)).toBe(false);
    expect((await jsm.consumers.info(eventsStream(ALPHA).name, "laneway-hub")).num_ack_pending).toBe(0);
  });

  test("a swarm given by a scope change is provisioned while the hub runs", async () => {
    const hub = laneway!.clients.client(HiveHubService, { token: hive.tokens.admin });
    await hub.invite({ memberId: "hive-b", swarms: ["epsilon"] });
    await waitFor(() => logLines("swarm streams provisioned").find((l) => l.swarm === "epsilon") ?? logLines("a swarm's state stream was not created over legacy state").find((l) => l.swarm === "epsilon"), { what: "epsilon's provisioning" });
    await expectProvisioned("epsilon");
    // Its events stream is fanned in at once.
    const { js } = await hive.admin();
    await js.publish("swarm.epsilon.events.execution.started", JSON.stringify({ swarm: "epsilon" }));
    await waitFor(() => fannedIn().find((l) => l.swarm === "epsilon"), { what: "epsilon's event" });
  });

  test("the swarms events may name are bounded: past the bound an event is handled, its swarm gets no streams, and one warning is logged", async () => {
    const logs: string[] = [];
    const broker = await BrokerConnection.open({ servers: [hive.nats.url], credentialsFile: hive.trust.credsPaths.hub, name: "bound-test" });
    const hubBus = await HubBus.open({
      broker,
      mode: { scoped: true, bind: false, legacy: false },
      log: createLogger({ level: "debug", write: (line) => logs.push(line) }),
      memberSwarms: async () => [],
      maxSwarms: 2,
    });
    try {
      await hubBus.ensureSwarm("bound-one");
      await hubBus.ensureSwarm("bound-two");
      await hubBus.ensureSwarm("bound-three");
      await hubBus.ensureSwarm("bound-four");
      expect(hubBus.status().provisioned).toEqual(["bound-one", "bound-two"]);
      expect(await streamExists(eventsStream("bound-two").name)).toBe(true);
      expect(await streamExists(eventsStream("bound-three").name)).toBe(false);
      const warnings = logs.filter((line) => line.includes("the hub provisions no more swarms"));
      expect(warnings).toHaveLength(1);
      expect(JSON.parse(warnings[0]!)).toMatchObject({ level: "warn", bound: 2 });
    } finally {
      await hubBus.close();
      await broker.close();
    }
  });
});
