import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createUser } from "@nats-io/nkeys";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { connect, nkeyAuthenticator } from "@nats-io/transport-node";
import { runCli } from "../../src/cli/main.js";
import { lanesBrokerPermissions, streamName } from "../../src/lanes/index.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * With `--nats-url`, Laneway needs exactly the permissions docs/operations.md
 * lists and `laneway lanes broker-permissions` prints (lanesBrokerPermissions): a server whose only user holds exactly
 * those serves publication, batches, replay, follow, duplicates,
 * conflicts and work claims — any missing grant would fail one of them — and the same
 * credential cannot, for example, delete a lane's stream.
 */

const NAMESPACE = "commons";
let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let seed: Uint8Array;

beforeAll(async () => {
  const user = createUser();
  seed = user.getSeed();
  // What `laneway lanes broker-permissions` prints is what the server grants.
  let printed = "";
  const code = await runCli(["lanes", "broker-permissions", NAMESPACE], {
    env: {},
    stdout: (t) => (printed += t),
    stderr: () => {},
    signal: new AbortController().signal,
  });
  expect(code).toBe(0);
  const permissions = JSON.parse(printed) as { publish: { allow: string[] }; subscribe: { allow: string[] } };
  expect(permissions.publish.allow).toEqual(lanesBrokerPermissions(NAMESPACE).publish);
  nats = await startNatsServer({
    extraConfig: {
      authorization: {
        users: [{ nkey: user.getPublicKey(), permissions }],
      },
    },
  });
  const seedFile = join(nats.storeDir, "laneway.nk");
  await writeFile(seedFile, new TextDecoder().decode(user.getSeed()), { mode: 0o600 });
  laneway = await startLanewayInProcess({
    natsUrl: nats.url,
    args: ["--nats-credentials-env", "LANEWAY_TEST_NATS_SEED"],
    env: { LANEWAY_TEST_NATS_SEED: seedFile },
  });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

test("publication, batches, duplicates, conflicts, replay, follow and work claims work with exactly the documented permissions", async () => {
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, protocol: "grpc" });
  const first = await atlas.publish({ lane: "measurements", id: "p-one", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([1]) });
  expect(first.record?.sequence).toBe(1n);
  const again = await atlas.publish({ lane: "measurements", id: "p-one", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([1]) });
  expect(again.duplicate).toBe(true);
  await expect(atlas.publish({ lane: "measurements", id: "p-one", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([2]) })).rejects.toMatchObject({
    rawMessage: expect.stringContaining("already published"),
  });
  const batch = await beacon.publishBatch({
    lane: "measurements",
    records: [
      { id: "b-one", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([3]) },
      { id: "b-two", kind: RecordKind.WORK, schema: "probe-v1", payload: new Uint8Array([4]) },
    ],
  });
  expect(batch.results.map((r) => r.outcome.case)).toEqual(["published", "published"]);
  const page = await beacon.replay({ lane: "measurements" });
  expect(page.events.map((e) => e.id).sort()).toEqual(["b-one", "p-one"]);
  expect(page.cursor).toBe(3n);

  const abort = new AbortController();
  const seen: string[] = [];
  const following = (async () => {
    for await (const message of atlas.follow({ lane: "measurements", cursor: 3n }, { signal: abort.signal })) {
      seen.push(...message.events.map((e) => e.id));
      if (seen.includes("after-follow")) break;
    }
  })();
  await new Promise((resolve) => setTimeout(resolve, 200));
  await beacon.publish({ lane: "measurements", id: "after-follow", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([5]) });
  await following;
  abort.abort();
  expect(seen).toEqual(["after-follow"]);

  // The work record b-two through the group: claim, renew, nack, claim again, ack.
  const claimed = (await beacon.claim({ lane: "measurements", group: "summarizers" })).work;
  expect(claimed?.record?.id).toBe("b-two");
  const receipt = { lane: "measurements", group: "summarizers", sequence: claimed!.record!.sequence, receipt: claimed!.receipt };
  await beacon.renew(receipt);
  await beacon.nack(receipt);
  // The retry becomes eligible after its backoff; the long poll waits for it.
  const retried = (await beacon.claimBatch({ lane: "measurements", group: "summarizers", maxRecords: 4, wait: { seconds: 30n } })).work;
  expect(retried.map((w) => [w.record?.id, w.attempt])).toEqual([["b-two", 2]]);
  await beacon.ack({ lane: "measurements", group: "summarizers", sequence: retried[0]!.record!.sequence, receipt: retried[0]!.receipt });
  const inspected = await beacon.inspectGroup({ lane: "measurements", group: "summarizers" });
  expect(inspected.group?.liveLeases).toBe(0);
  expect(inspected.group?.cursor).toBeGreaterThanOrEqual(3n);
});

test("the same credential cannot delete a lane's stream", async () => {
  const nc = await connect({ servers: nats.url, authenticator: nkeyAuthenticator(seed), reconnect: false });
  try {
    const denied = await nc.request(`$JS.API.STREAM.DELETE.${streamName(NAMESPACE, "measurements")}`, "", { timeout: 2_000 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(String((denied as Error & { cause?: Error })?.cause ?? denied)).toMatch(/Permissions Violation/);
  } finally {
    await nc.close();
  }
});
