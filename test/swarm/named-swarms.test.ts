import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import { EVENT_ONLY_STREAM_DESCRIPTION } from "../../src/swarm/index.js";
import { deadStream, eventsStream, swarmStreams } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";
import { joinMember, type JoinedMember } from "./joined-member.js";

/**
 * Swarms come from the operator. An unscoped member may publish an event
 * naming any swarm (its grant allows `swarm.*.execution.>`); the hub still
 * handles and counts such an event and creates that swarm's streams, but
 * the swarm is not one the operator named, so `hive scope` and `hive
 * invite` without `--swarm` never grant it. What they grant is every swarm
 * named in member_swarms or by a hub command, and every swarm whose
 * streams exist for another reason than an event (created by the operator,
 * by an earlier deployment, by the hub for a named swarm).
 */

let hive: HubHive;
let laneway: InProcessLaneway;
let scratch: string;
const members: JoinedMember[] = [];
const hub = () => laneway.clients.client(HiveHubService, { token: hive.tokens.admin });

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-named-swarms-"));
  hive = await startHubHive();
  laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
  // A swarm an earlier deployment left streams for: in the store.
  const { jsm } = await hive.admin();
  await jsm.streams.add({ name: deadStream("old").name, subjects: [...deadStream("old").subjects] });
}, 120_000);

afterAll(async () => {
  for (const member of members) await member.close();
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await hive?.stop();
  await rm(scratch, { recursive: true, force: true });
  for (const member of members) expect(logs).not.toContain(member.credential.creds);
});

test("an event naming a swarm nobody named is handled and counted, its streams are created, and scope and invite without swarms never grant it", async () => {
  // Invited before member_swarms exists: an unscoped member, allowed swarm.*.execution.>.
  const publisher = await joinMember(laneway, hive.tokens.admin, scratch, "hive-legacy");
  members.push(publisher);
  expect(publisher.credential.scoped).toBe(false);
  const { js } = await publisher.raw();
  await waitFor(() => js.publish("swarm.invented.execution.started", JSON.stringify({ swarm: "invented" })).then(() => true), { what: "the legacy events stream" });

  // Handled and counted, with streams that grant nothing.
  const listed = await waitFor(async () => {
    const swarms = await hub().listSwarms({});
    return swarms.unnamed.find((u) => u.swarm === "invented" && u.events >= 1n) ? swarms : undefined;
  }, { what: "the hub to handle the invented swarm's event" });
  expect(listed.defaultSwarms).toEqual(["old"]);
  const { jsm } = await hive.admin();
  for (const stream of swarmStreams("invented")) {
    if (stream.kind === "state") continue;
    expect((await jsm.streams.info(stream.name)).config.description, stream.name).toBe(EVENT_ONLY_STREAM_DESCRIPTION);
  }

  // The operator names rig; scope and invite without swarms grant the named swarms and the store, not the invented one.
  const named = await hub().nameSwarms({ swarms: ["rig"] });
  expect(named.swarms?.defaultSwarms).toEqual(["old", "rig"]);
  expect((await jsm.streams.info(eventsStream("rig").name)).config.description ?? "").toBe("");
  const scoped = await hub().scope({});
  expect(scoped.swarms).toEqual(["old", "rig"]);
  expect(scoped.members.map((m) => [m.memberId, m.swarms])).toEqual([["hive-legacy", ["old", "rig"]]]);
  const invited = await hub().invite({ memberId: "hive-new" });
  expect(invited).toMatchObject({ scoped: true, listed: true, swarms: ["old", "rig"] });

  // The same through the CLI.
  let stdout = "";
  const code = await runCli(["hive", "swarms"], {
    env: { LANEWAY_ADDRESS: laneway.url, LANEWAY_TOKEN: hive.tokens.admin },
    stdout: (t) => void (stdout += t),
    stderr: () => {},
    signal: new AbortController().signal,
  });
  expect(code).toBe(0);
  const printed = JSON.parse(stdout) as { defaultSwarms: string[]; named: { swarm: string; inRecord?: boolean; byCommand?: boolean; inStore?: boolean }[]; unnamed: { swarm: string }[] };
  expect(printed.defaultSwarms).toEqual(["old", "rig"]);
  expect(printed.named).toEqual([
    { swarm: "old", inRecord: true, inStore: true },
    { swarm: "rig", inRecord: true, byCommand: true, inStore: true },
  ]);
  expect(printed.unnamed.map((u) => u.swarm)).toEqual(["invented"]);
});

test("a swarm named by scope, invite or a migration is granted by default from then on", async () => {
  await hub().scope({ swarms: ["ops"] });
  await hub().migrateDead({ swarm: "archive" });
  const invited = await hub().invite({ memberId: "hive-later" });
  expect(invited.swarms).toEqual(["archive", "old", "ops", "rig"]);
  const listing = await hub().listSwarms({});
  expect(listing.defaultSwarms).toEqual(["archive", "old", "ops", "rig"]);
  expect(listing.unnamed.map((u) => u.swarm)).toEqual(["invented"]);
});
