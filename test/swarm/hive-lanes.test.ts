import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, RecordKind, type LaneRecord } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { hiveBrokerSetup, initHive } from "../../src/swarm/index.js";
import { GLOBAL_STREAMS, openBus } from "../../src/swarm-bus/index.js";
import { HIVE_SCHEMAS, hiveLanesSettingsFromEnv } from "../../src/client/hive-lanes/index.js";
import { startLanewayInProcess, startLanewayProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";
import { jetStreamOf, SecretLedger, startHive, type HiveUnderTest } from "./hive-fixture.js";
import { buildLanesConfig } from "../helpers/lanes-config.js";

/**
 * The hive as a lane participant (the lanes specification's "Hive
 * adapter"): a Laneway serving the lane `governor` (with its own
 * nats-server, which the last test stops), and two hubs that join it as
 * ordinary projects through HIVE_LANES_*:
 *
 * - `hive` claims in the group `governors` and answers snapshot requests of
 *   atlas only (HIVE_LANES_SNAPSHOT_PROJECTS=atlas);
 * - `quiet` claims in the group `observers` without an allowlist, so it has
 *   no snapshot handler and every record it claims is nacked unexecuted.
 *
 * - `keeper` (one test) is a hub running as `laneway serve` in a child
 *   process, claiming in the group `keepers` with the allowlist
 *   atlas,beacon: the whole path as an operator runs it.
 *
 * Every group gets its own delivery of each work record, so one request is
 * seen by every hub.
 */

const LANE = "governor";
const hiveToken = randomBytes(32).toString("hex");
const quietToken = randomBytes(32).toString("hex");
const keeperToken = randomBytes(32).toString("hex");
const secrets = new SecretLedger();

let lanesNats: NatsServerHandle;
let lanes: InProcessLaneway;
let hive: HiveUnderTest;
let quiet: HiveUnderTest;

const lane = (token: string): Client<typeof LaneService> => lanes.clients.client(LaneService, { token, protocol: "connect-binary" });

interface Event {
  readonly record: LaneRecord;
  readonly payload: Record<string, unknown>;
}

/** Every event of the lane (atlas subscribes). */
async function events(): Promise<Event[]> {
  const out: Event[] = [];
  let cursor = 0n;
  for (;;) {
    const page = await lane(lanes.tokens.atlas).replay({ lane: LANE, cursor });
    out.push(...page.events.map((record) => ({ record, payload: JSON.parse(new TextDecoder().decode(record.payload)) as Record<string, unknown> })));
    if (page.cursor >= page.lastSequence || page.cursor === cursor) return out;
    cursor = page.cursor;
  }
}

async function snapshotsFor(requestId: string, publisher = "hive"): Promise<Event[]> {
  return (await events()).filter(
    (e) => e.record.schema === HIVE_SCHEMAS.snapshot && e.record.project === publisher && (e.payload["request"] as { id?: string }).id === requestId,
  );
}

async function requestSnapshot(token: string, id: string, payload = "{}"): Promise<bigint> {
  const published = await lane(token).publish({ lane: LANE, id, kind: RecordKind.WORK, schema: HIVE_SCHEMAS.snapshotRequest, payload: new TextEncoder().encode(payload) });
  return published.record!.sequence;
}

/** The delivery of `sequence` in a group, as the group's member inspects it: its unfinished state, or ACKED once the completion history holds it. */
async function delivery(token: string, group: string, sequence: bigint) {
  const inspected = await lane(token).inspectGroup({ lane: LANE, group });
  const g = inspected.group!;
  const unfinished = g.deliveries.find((d) => d.sequence === sequence);
  if (unfinished !== undefined) return unfinished;
  const completed = g.completions.some((b) => b.ranges.some((r) => r.first <= sequence && sequence <= r.last));
  // The completion history keeps neither the holder nor (at attempt 1) the attempt.
  return completed ? { sequence, project: "", state: DeliveryState.ACKED, attempt: 0 } : undefined;
}

/** Waits until the group nacked the delivery (a retry is scheduled, or it was claimed again). */
async function nacked(token: string, group: string, sequence: bigint) {
  return waitFor(
    async () => {
      const d = await delivery(token, group, sequence);
      return d !== undefined && (d.state === DeliveryState.RETRY_SCHEDULED || d.attempt >= 2) ? d : undefined;
    },
    { what: `the ${group} group to nack sequence ${sequence}` },
  );
}

function adapterEnv(token: string, group: string): Record<string, string> {
  return { HIVE_LANES_ADDRESS: lanes.url, HIVE_LANES_TOKEN: token, HIVE_LANES_LANE: LANE, HIVE_LANES_GROUP: group };
}

function logLines(laneway: InProcessLaneway): Record<string, unknown>[] {
  return laneway.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
}

beforeAll(async () => {
  secrets.add(hiveToken, quietToken, keeperToken);
  lanesNats = await startNatsServer();
  lanes = await startLanewayInProcess({
    natsUrl: lanesNats.url,
    lanesConfig: buildLanesConfig({
      namespace: "governance",
      projects: ["atlas", "beacon", { project: "hive", token_env: "HIVE_PROJECT_TOKEN" }, { project: "quiet", token_env: "QUIET_PROJECT_TOKEN" }, { project: "keeper", token_env: "KEEPER_PROJECT_TOKEN" }],
      lanes: [
        {
          id: LANE,
          owner: "hive",
          publishers: ["atlas", "beacon", "hive", "quiet", "keeper"],
          subscribers: ["atlas", "hive", "quiet", "keeper"],
          groups: { governors: ["hive"], observers: ["quiet"], keepers: ["keeper"] },
        },
      ],
      retry_delay: "200ms",
      max_retry_delay: "1s",
    }),
    env: { HIVE_PROJECT_TOKEN: hiveToken, QUIET_PROJECT_TOKEN: quietToken, KEEPER_PROJECT_TOKEN: keeperToken },
  });
  secrets.add(lanes.tokens.atlas, lanes.tokens.beacon);
  hive = await startHive({ env: { ...adapterEnv(hiveToken, "governors"), HIVE_LANES_SNAPSHOT_PROJECTS: "atlas" } });
  quiet = await startHive({ env: adapterEnv(quietToken, "observers") });
}, 120_000);

afterAll(async () => {
  const hiveLogs = hive?.laneway.logs.join("") ?? "";
  const quietLogs = quiet?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await quiet?.stop();
  await lanes?.stop();
  await lanesNats?.remove();
  for (const logs of [hiveLogs, quietLogs]) {
    expect(secrets.leaked(logs)).toEqual([]);
    // Neither the lane's address nor its broker's appear in a hub's log.
    expect(logs).not.toContain(lanes.url);
    expect(logs).not.toContain(lanesNats.url);
  }
});

test("a scope change, an invite and a retirement appear as hive-governor-mode-change-v1 events on the lane, in commit order", async () => {
  const early = await hive.hub().invite({ memberId: "hive-early" });
  await hive.hub().scope({ swarms: ["rig"] });
  const listed = await hive.hub().invite({ memberId: "hive-a", swarms: ["rig"] });
  await hive.hub().retireMember({ memberId: "hive-early" });
  secrets.add(early.inviteSecret, listed.inviteSecret);

  const changes = await waitFor(async () => {
    const found = (await events()).filter((e) => e.record.schema === HIVE_SCHEMAS.modeChange && e.record.project === "hive");
    return found.length >= 4 ? found : undefined;
  });
  expect(changes.map((e) => e.payload)).toMatchObject([
    { version: 1, change: "invite", memberId: "hive-early", scoped: false, listed: false, swarms: [] },
    { version: 1, change: "scope", created: true, swarms: ["rig"], listedMembers: ["hive-early"] },
    { version: 1, change: "invite", memberId: "hive-a", scoped: true, listed: true, swarms: ["rig"] },
    { version: 1, change: "retire", memberId: "hive-early", revokedKeys: 0 },
  ]);
  for (const e of changes) {
    expect(e.record.kind).toBe(RecordKind.EVENT);
    expect(e.record.id).toMatch(/^mode-change-[0-9a-f]{40}$/);
    expect(Date.parse(String(e.payload["committedAt"]))).not.toBeNaN();
  }
});

test("an allowlisted publisher's request is answered with a correlated hive-governor-snapshot-v1 event, then acked", async () => {
  const sequence = await requestSnapshot(lanes.tokens.atlas, "ask-one");
  const [snapshot] = await waitFor(async () => {
    const found = await snapshotsFor("ask-one");
    return found.length > 0 ? found : undefined;
  });
  expect(snapshot!.record.kind).toBe(RecordKind.EVENT);
  expect(snapshot!.payload).toMatchObject({
    version: 1,
    request: { project: "atlas", id: "ask-one", sequence: sequence.toString() },
    state: {
      scopingEnabled: true,
      members: [{ memberId: "hive-a", scoped: true, swarms: ["rig"], refused: false, lastMintedAt: null }],
      retired: [{ memberId: "hive-early", revokedKeys: 0 }],
      migrations: [],
    },
  });
  // The correlation: the record id is derived from the payload, which names the request.
  expect(snapshot!.record.id).toBe(`snapshot-${createHash("sha256").update(snapshot!.record.payload).digest("hex").slice(0, 40)}`);
  await waitFor(async () => (await delivery(hiveToken, "governors", sequence))?.state === DeliveryState.ACKED, { what: "the request to be acked" });
  expect(logLines(hive.laneway).find((l) => l["msg"] === "hive governor snapshot published")).toMatchObject({
    requester: "atlas",
    request: "ask-one",
    event: snapshot!.record.id,
  });
});

test("a request from a project that is not allowlisted is nacked and never executed", async () => {
  const sequence = await requestSnapshot(lanes.tokens.beacon, "ask-beacon");
  const nack = await nacked(hiveToken, "governors", sequence);
  expect(nack.project).toBe("hive");
  expect(nack.state).not.toBe(DeliveryState.ACKED);
  // Never executed: no snapshot names it, and the handler never saw it.
  expect(await snapshotsFor("ask-beacon")).toEqual([]);
  expect(logLines(hive.laneway).filter((l) => l["request"] === "ask-beacon")).toEqual([]);
});

test("a request that is not {} fails and is nacked", async () => {
  const sequence = await requestSnapshot(lanes.tokens.atlas, "ask-bad", '{"include":"secrets"}');
  await nacked(hiveToken, "governors", sequence);
  expect(await snapshotsFor("ask-bad")).toEqual([]);
  expect(logLines(hive.laneway).find((l) => l["request"] === "ask-bad")).toMatchObject({
    level: "warn",
    msg: "a hive governor snapshot request failed; it is nacked",
    requester: "atlas",
    reason: "a hive governor snapshot request must contain {}",
  });
  expect((await delivery(hiveToken, "governors", sequence))?.state).not.toBe(DeliveryState.ACKED);
});

test("work of any other schema, even from an allowlisted publisher, is nacked and never executed", async () => {
  const published = await lane(lanes.tokens.atlas).publish({
    lane: LANE,
    id: "merge-one",
    kind: RecordKind.WORK,
    schema: "hive-governor-merge-v1",
    payload: new TextEncoder().encode("{}"),
  });
  const sequence = published.record!.sequence;
  const nack = await nacked(hiveToken, "governors", sequence);
  expect(nack.state).not.toBe(DeliveryState.ACKED);
  // Never executed: no handler ran (no log line names it) and nothing was published for it.
  expect(logLines(hive.laneway).filter((l) => l["request"] === "merge-one")).toEqual([]);
  expect(await snapshotsFor("merge-one")).toEqual([]);
});

test("without HIVE_LANES_SNAPSHOT_PROJECTS no snapshot handler is registered: even an allowlisted-elsewhere request is nacked", async () => {
  expect(logLines(quiet.laneway).find((l) => l["msg"] === "the hive joined its lane as a participant")).toMatchObject({
    lane: LANE,
    group: "observers",
    snapshotProjects: 0,
  });
  const sequence = await requestSnapshot(lanes.tokens.atlas, "ask-quiet");
  // The hive of the allowlist answers it in its own group …
  await waitFor(async () => (await snapshotsFor("ask-quiet")).length > 0);
  // … while the hub without an allowlist nacks its delivery unexecuted.
  await nacked(quietToken, "observers", sequence);
  expect(await snapshotsFor("ask-quiet", "quiet")).toEqual([]);
  expect(logLines(quiet.laneway).filter((l) => l["msg"] === "hive governor snapshot published")).toEqual([]);
});

test("a snapshot reports the hub's migration marks: pending while an import copies, complete once it finished", async () => {
  // Two letters of swarm rig in the legacy dead-letter stream, moved by the hub's bus (its own credential, provisioning).
  const { js, jsm } = await jetStreamOf(await hive.hubConnection());
  await jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
  for (const id of [1, 2]) await js.publish("dead.rig", JSON.stringify({ swarm: "rig", id }));
  const bus = await openBus({ backend: "nats", url: hive.nats.url, credentials: hive.trust.credsPaths.hub, scoped: true, bind: false });
  const migrationsOf = (e: Event) => (e.payload["state"] as { migrations: unknown }).migrations;
  try {
    let during: Event | undefined;
    const result = await bus.migrateDead({ swarm: "rig",
      // After the first letter is copied (the mark is pending), a snapshot is asked for and awaited.
      onProgress: async () => {
        if (during !== undefined) return;
        await requestSnapshot(lanes.tokens.atlas, "ask-migrating");
        during = await waitFor(async () => (await snapshotsFor("ask-migrating"))[0], { what: "the snapshot taken during the migration" });
      },
    });
    expect(result).toMatchObject({ outcome: "moved", copied: 2 });
    expect(migrationsOf(during!)).toEqual([{ swarm: "rig", kind: "dead", resource: "dead", status: "pending" }]);
  } finally {
    await bus.close();
  }
  await requestSnapshot(lanes.tokens.atlas, "ask-migrated");
  const after = await waitFor(async () => (await snapshotsFor("ask-migrated"))[0], { what: "the snapshot after the migration" });
  expect(migrationsOf(after)).toEqual([{ swarm: "rig", kind: "dead", resource: "dead", status: "complete" }]);
});

test("end to end through `laneway serve`: a hub process with HIVE_LANES_* publishes its mode changes, answers its allowlist, and stops on SIGTERM", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-hive-serve-"));
  await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  const setup = (await hiveBrokerSetup(dataDir))!;
  const nats = await startNatsServer({ extraConfig: await setup.config(join(dataDir, "nats-jwt")) });
  const keeper = await startLanewayProcess({
    natsUrl: nats.url,
    dataDir,
    lanesConfig: false,
    env: { ...adapterEnv(keeperToken, "keepers"), HIVE_LANES_SNAPSHOT_PROJECTS: "atlas,beacon" },
  });
  try {
    secrets.add(keeper.tokens.admin);
    const hub = keeper.clients.client(HiveHubService, { token: keeper.tokens.admin, protocol: "connect-json" });
    const invite = await hub.invite({ memberId: "hive-k" });
    secrets.add(invite.inviteSecret);
    const change = await waitFor(
      async () =>
        (await events()).find((e) => e.record.project === "keeper" && e.record.schema === HIVE_SCHEMAS.modeChange && e.payload["memberId"] === "hive-k"),
      { what: "the keeper's invite on the lane" },
    );
    expect(change.payload).toMatchObject({ version: 1, change: "invite", memberId: "hive-k", scoped: false, listed: false });

    // beacon is on this hub's allowlist (and not on hive's, which nacks the same request in its own group).
    const sequence = await requestSnapshot(lanes.tokens.beacon, "ask-keeper");
    const [snapshot] = await waitFor(async () => {
      const found = await snapshotsFor("ask-keeper", "keeper");
      return found.length > 0 ? found : undefined;
    });
    expect(snapshot!.payload).toMatchObject({
      request: { project: "beacon", id: "ask-keeper", sequence: sequence.toString() },
      state: { scopingEnabled: false, members: [{ memberId: "hive-k", scoped: false }], retired: [], migrations: [] },
    });
    await waitFor(async () => (await delivery(keeperToken, "keepers", sequence))?.state === DeliveryState.ACKED, { what: "the keeper to ack the request" });
    await nacked(hiveToken, "governors", sequence);
    expect(await snapshotsFor("ask-keeper")).toEqual([]);

    // SIGTERM while the participant waits in a claim: the process still exits cleanly.
    expect(await keeper.kill("SIGTERM")).toEqual({ code: 0, signal: null });
    const output = [...keeper.stdout, ...keeper.stderr].join("\n");
    expect(output).toContain("the hive joined its lane as a participant");
    expect(secrets.leaked(output)).toEqual([]);
    expect(output).not.toContain(lanes.url);
    expect(output).not.toContain(lanesNats.url);
  } finally {
    await keeper.remove();
    await nats.remove();
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("the adapter's settings: all four together, and refusals that name the variable without echoing a value", () => {
  const base = { HIVE_LANES_ADDRESS: "http://127.0.0.1:7600", HIVE_LANES_TOKEN: hiveToken, HIVE_LANES_LANE: LANE, HIVE_LANES_GROUP: "governors" };
  expect(hiveLanesSettingsFromEnv({})).toBeUndefined();
  expect(hiveLanesSettingsFromEnv({ ...base, HIVE_LANES_SNAPSHOT_PROJECTS: "atlas, beacon,atlas" })).toMatchObject({ lane: LANE, group: "governors", snapshotProjects: ["atlas", "beacon"] });
  expect(hiveLanesSettingsFromEnv(base)?.snapshotProjects).toEqual([]);
  const refusal = (env: Record<string, string>) => {
    try {
      hiveLanesSettingsFromEnv(env);
    } catch (error) {
      return (error as Error).message;
    }
    return "accepted";
  };
  expect(refusal({ HIVE_LANES_SNAPSHOT_PROJECTS: "atlas" })).toBe(
    "the hive lane adapter needs HIVE_LANES_ADDRESS, HIVE_LANES_TOKEN, HIVE_LANES_LANE, HIVE_LANES_GROUP together; HIVE_LANES_ADDRESS, HIVE_LANES_TOKEN, HIVE_LANES_LANE, HIVE_LANES_GROUP are not set",
  );
  expect(refusal({ ...base, HIVE_LANES_TOKEN: "short" })).toBe("HIVE_LANES_TOKEN must be 32 to 4096 bytes, got 5");
  expect(refusal({ ...base, HIVE_LANES_ADDRESS: `http://hive:${hiveToken}@lanes.example` })).toBe("HIVE_LANES_ADDRESS must not hold credentials: the token goes in HIVE_LANES_TOKEN");
  expect(refusal({ ...base, HIVE_LANES_ADDRESS: "nats://127.0.0.1:4222" })).toBe("HIVE_LANES_ADDRESS must be an http:// or https:// URL");
  expect(refusal({ ...base, HIVE_LANES_SNAPSHOT_PROJECTS: "atlas,Beacon" })).toMatch(/^HIVE_LANES_SNAPSHOT_PROJECTS must list project ids/);
});

test("a partial HIVE_LANES_* set stops the server from starting, naming the variables", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-hive-partial-"));
  try {
    const outcome = await startLanewayInProcess({ natsUrl: lanesNats.url, dataDir, lanesConfig: false, env: { HIVE_LANES_LANE: LANE, HIVE_LANES_TOKEN: hiveToken } }).then(
      async (started) => {
        await started.stop();
        return "started";
      },
      (error: unknown) => (error as Error).message,
    );
    expect(outcome).toBe(
      "the hive hub cannot start: the hive lane adapter needs HIVE_LANES_ADDRESS, HIVE_LANES_TOKEN, HIVE_LANES_LANE, HIVE_LANES_GROUP together; HIVE_LANES_ADDRESS, HIVE_LANES_GROUP are not set",
    );
    expect(secrets.leaked(outcome)).toEqual([]);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a lane failure during a mode change logs that durable delivery was not confirmed, and the hub state change stands", async () => {
  await lanesNats.stop();
  try {
    const invite = await hive.hub().invite({ memberId: "hive-b", swarms: ["rig"] });
    secrets.add(invite.inviteSecret);
    const line = await waitFor(() =>
      logLines(hive.laneway).find((l) => l["msg"] === "durable delivery of the hive governor mode change was not confirmed; the hub state change stands"),
    );
    expect(line).toMatchObject({ level: "warn", change: "invite", member: "hive-b" });
    expect(String(line["event"])).toMatch(/^mode-change-[0-9a-f]{40}$/);
    // The hub change stands: the member is listed and scoped.
    const listing = await hive.hub().listMembers({});
    expect(listing.members.map((m) => [m.memberId, m.swarms])).toEqual([
      ["hive-a", ["rig"]],
      ["hive-b", ["rig"]],
    ]);
  } finally {
    await lanesNats.restart();
  }
  // Once the lane is back, the next change is published again.
  await waitFor(() => events().then(() => true, () => false), { timeoutMs: 60_000, what: "the lane to serve again" });
  await hive.hub().retireMember({ memberId: "hive-b" });
  await waitFor(
    async () => (await events()).some((e) => e.record.schema === HIVE_SCHEMAS.modeChange && e.payload["change"] === "retire" && e.payload["memberId"] === "hive-b"),
    { timeoutMs: 60_000, what: "the retirement's event after the lane came back" },
  );
  // The unconfirmed invite was never pretended: no event of it exists.
  expect((await events()).filter((e) => e.payload["change"] === "invite" && e.payload["memberId"] === "hive-b")).toEqual([]);
});
