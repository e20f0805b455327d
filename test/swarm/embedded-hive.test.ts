import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { HealthCheckResponse_ServingStatus, Health } from "../../gen/grpc/health/v1/health_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { streamName } from "../../src/lanes/index.js";
import { initHive } from "../../src/swarm/index.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { connectWithCreds, jetStreamOf, SecretLedger } from "./hive-fixture.js";

/**
 * The embedded default with the hive enabled: `hive init` makes the
 * embedded nats-server start in operator mode. Laneway's own connection is
 * a service user of its own account, so lanes keep working — including the
 * records written before the hive existed, whose store moves into that
 * account — while hive members, in the hive account, reach none of the
 * lanes' streams.
 */

let dataDir: string;
let laneway: InProcessLaneway;
const tokens = generateTokens();
const secrets = new SecretLedger();

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "laneway-embedded-hive-"));
  // Lanes first, without a hive: the records live in the global account.
  const before = await startLanewayInProcess({ dataDir, tokens });
  const atlas = before.clients.client(LaneService, { token: tokens.atlas });
  await atlas.publish({ lane: "measurements", id: "before-the-hive", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([1]) });
  await before.stop();

  const created = await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  expect(created.created).toBe(true);
  laneway = await startLanewayInProcess({ dataDir, tokens });
}, 120_000);

afterAll(async () => {
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await rm(dataDir, { recursive: true, force: true });
  expect(secrets.leaked(logs)).toEqual([]);
});

test("hive init keeps every key and credential private to the data directory", async () => {
  for (const file of ["keys/operator.nk", "keys/hive-account.nk", "keys/system-account.nk", "keys/laneway-account.nk", "creds/hub.creds", "creds/system.creds", "creds/laneway.creds", "records/nats-signer.json", "hub-state.json"]) {
    expect((await stat(join(dataDir, "hive", file))).mode & 0o777, file).toBe(0o600);
  }
  expect((await stat(join(dataDir, "hive"))).mode & 0o777).toBe(0o700);
  // A second init changes nothing.
  expect((await initHive(dataDir)).created).toBe(false);
});

test("lanes keep working in operator mode, with the records written before the hive", async () => {
  expect(laneway.logs.join("")).toContain("the JetStream store moved into Laneway's own account");
  const atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
  await atlas.publish({ lane: "measurements", id: "beside-the-hive", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([2]) });
  const page = await atlas.replay({ lane: "measurements" });
  expect(page.events.map((e) => e.id)).toEqual(["before-the-hive", "beside-the-hive"]);
  const health = laneway.clients.client(Health);
  expect((await health.check({ service: HiveHubService.typeName })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
});

test("a hive member on the embedded server reaches none of the lanes' streams", async () => {
  const hub = laneway.clients.client(HiveHubService, { token: tokens.admin });
  await hub.scope({ swarms: ["rig"] });
  const invite = await hub.invite({ memberId: "hive-a", swarms: ["rig"] });
  secrets.add(invite.inviteSecret);
  const credential = (await laneway.clients.client(HiveMemberService, { token: invite.inviteSecret }).join({})).credential!;
  secrets.add(credential.creds);
  expect(credential.busUrl).toBe(laneway.server.embeddedNatsUrl);

  const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
  try {
    const { jsm } = await jetStreamOf(nc);
    const lane = streamName("commons", "measurements");
    for (const [attempt, subject] of [
      [jsm.streams.info(lane), `$JS.API.STREAM.INFO.${lane}`],
      [jsm.streams.getMessage(lane, { seq: 1 }), `$JS.API.STREAM.MSG.GET.${lane}`],
      [nc.request("$JS.API.STREAM.NAMES", new Uint8Array(), { timeout: 5_000 }), "$JS.API.STREAM.NAMES"],
      [nc.request("laneway.commons.measurements.rec.atlas.x", new Uint8Array(), { timeout: 5_000 }), "laneway.commons.measurements.rec.atlas.x"],
    ] as const) {
      const error = (await (attempt as Promise<unknown>).then(
        () => undefined,
        (e: unknown) => e,
      )) as (Error & { cause?: Error }) | undefined;
      expect(`${error?.message} ${error?.cause?.message ?? ""}`).toContain(`Permissions Violation for Publish to "${subject}"`);
    }
  } finally {
    await nc.close();
  }
});
