import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import type { MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { CoreStartupError } from "../../src/errors/core-error.js";
import { initHive, parseRecordObject } from "../../src/swarm/index.js";
import { startLanewayInProcess } from "../helpers/laneway.js";
import { connectWithCreds, createFileSigner, redisAuthWorks, SecretLedger, startHive, startRedis, type FileSigner, type HiveUnderTest, type TestRedis } from "./hive-fixture.js";

/**
 * A signer record fails closed. Its top-level keys are checked strictly:
 * a `file:` folder whose member_swarms file holds the map itself
 * (`{"hive-a": [...]}` instead of `{"member_swarms": {...}}`) is refused,
 * naming the keys and the form the file must have, at hub start and at
 * every reread — never read as "no field", which would unscope every
 * credential. And a member whose last credential was scoped is never
 * handed an unscoped one: a record that lost its field (the member_swarms
 * file is gone) refuses its refresh before anything is revoked or rotated,
 * so the member stays online with its scoped credential.
 */

let scratch: string;
let redis: TestRedis;
let signer: FileSigner;
let hive: HiveUnderTest;
const secrets = new SecretLedger();

const fileForm = 'the member_swarms file of a file: signer record must hold one JSON object with the single key member_swarms, such as {"member_swarms": {"hive-a": ["rig"]}}';

function failure(error: unknown): { code: Code; reason: string | undefined; message: string } {
  const e = ConnectError.from(error);
  return { code: e.code, reason: e.findDetails(ErrorDetailSchema)[0]?.reason, message: e.rawMessage };
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-signer-strict-"));
  redis = await startRedis();
  signer = await createFileSigner(scratch);
  secrets.add(redis.adminPassword, signer.signingKeySeed);
  await signer.setMemberSwarms({ "hive-s": ["rig"] });
  hive = await startHive({ env: { AGENTIHOOKS_NATS_SIGNER: `file:${signer.folder}`, LANEWAY_HIVE_REDIS_URL: redis.adminUrl } });
}, 120_000);

afterAll(async () => {
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await redis?.stop();
  await rm(scratch, { recursive: true, force: true });
  expect(secrets.leaked(logs)).toEqual([]);
});

test("a hub whose member_swarms file holds the map itself does not start; the refusal names the keys and the file's form", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-map-file-"));
  try {
    await initHive(dataDir, { natsListen: "127.0.0.1:0" });
    const own = await createFileSigner(dataDir);
    secrets.add(own.signingKeySeed);
    await own.setMemberSwarms('{"hive-a": ["rig"], "hive-b": ["other"]}');
    const error = await startLanewayInProcess({ dataDir, lanesConfig: false, env: { AGENTIHOOKS_NATS_SIGNER: `file:${own.folder}` } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CoreStartupError);
    expect((error as CoreStartupError).message).toBe(`the hive hub cannot start: ${fileForm} (unknown top-level keys 'hive-a', 'hive-b')`);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a hub whose hive settings are broken does not start; the refusal is the hub's, as for a failure to open", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-hive-json-"));
  try {
    await initHive(dataDir, { natsListen: "127.0.0.1:0" });
    // Read while the broker is prepared for the hub (operator mode), before any core opens.
    await writeFile(join(dataDir, "hive", "hive.json"), "{ not json");
    const error = await startLanewayInProcess({ dataDir, lanesConfig: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CoreStartupError);
    expect((error as CoreStartupError).message).toBe("the hive hub cannot start: the hive settings (hive/hive.json) are not valid JSON");
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});

test("a hub: record holds signing_key and member_swarms only; another key is refused by name", () => {
  expect(() => parseRecordObject({ memberswarms: { "hive-a": ["rig"] } }, "hub")).toThrow("the signer record holds only signing_key and member_swarms (unknown top-level key 'memberswarms')");
  expect(() => parseRecordObject({ member_swarms: {}, signing_key: "SA" }, "file")).toThrow(`${fileForm} (unknown top-level key 'signing_key')`);
  expect(() => parseRecordObject([], "file")).toThrow(fileForm);
});

describe("a running hub rereads the record strictly, and never unscopes a scoped member", () => {
  let credential: MemberCredential;
  let secret: string;
  let nc: NatsConnection;

  beforeAll(async () => {
    const invite = await hive.hub().invite({ memberId: "hive-s" });
    secret = invite.inviteSecret;
    secrets.add(secret, ...invite.inviteEnv);
    credential = (await hive.member(secret).join({})).credential!;
    secrets.add(credential.creds, credential.redisUrl);
    expect(credential).toMatchObject({ scoped: true, swarms: ["rig"] });
    nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
  });

  afterAll(async () => {
    await nc?.close();
  });

  async function unchanged(): Promise<void> {
    // The scoped credential is neither revoked nor replaced, and the Redis password is not rotated.
    await nc.flush();
    expect(nc.isClosed()).toBe(false);
    expect(await redisAuthWorks(credential.redisUrl)).toBe(true);
    const listed = (await hive.hub().listMembers({}).catch(() => undefined))?.members.find((m) => m.memberId === "hive-s");
    if (listed) expect(listed.lastMintedAt).toBeDefined();
  }

  test("the map itself at a reread: refresh and join are refused naming the keys, and nothing is minted", async () => {
    await signer.setMemberSwarms('{"hive-s": ["rig"], "hive-b": ["other"]}');
    const expected = { code: Code.InvalidArgument, reason: "swarm_invalid", message: `${fileForm} (unknown top-level keys 'hive-s', 'hive-b')` };
    expect(failure(await hive.member(secret).refresh({}).catch((e: unknown) => e))).toEqual(expected);
    expect(failure(await hive.member(secret, "grpc").join({}).catch((e: unknown) => e))).toEqual(expected);
    await unchanged();
  });

  test("another key beside member_swarms is refused by name", async () => {
    await signer.setMemberSwarms('{"member_swarms": {"hive-s": ["rig"]}, "memberSwarms": {"hive-s": ["other"]}}');
    expect(failure(await hive.member(secret).refresh({}).catch((e: unknown) => e))).toEqual({
      code: Code.InvalidArgument,
      reason: "swarm_invalid",
      message: `${fileForm} (unknown top-level key 'memberSwarms')`,
    });
    await unchanged();
  });

  test("the member_swarms file gone: the scoped member's refresh is refused before anything is revoked or rotated", async () => {
    await signer.setMemberSwarms(undefined);
    const message =
      "hive member hive-s holds a scoped credential, and the signer record has no member_swarms field now: the hub does not replace it with an unscoped one; restore the member_swarms field (listing hive-s), or retire the member and invite it again";
    expect(failure(await hive.member(secret).refresh({}).catch((e: unknown) => e))).toEqual({ code: Code.PermissionDenied, reason: "swarm_forbidden", message });
    expect(failure(await hive.hub().renderGrant({ memberId: "hive-s" }).catch((e: unknown) => e))).toMatchObject({ reason: "swarm_forbidden", message });
    const listing = await hive.hub().listMembers({});
    expect(listing.scopingEnabled).toBe(false);
    expect(listing.members.find((m) => m.memberId === "hive-s")).toMatchObject({ scoped: false, refused: true });
    await unchanged();
  });

  test("once the file is restored, the refresh mints a scoped credential and revokes the previous one", async () => {
    await signer.setMemberSwarms({ "hive-s": ["rig"] });
    const closed = nc.closed();
    const next = (await hive.member(secret).refresh({})).credential!;
    secrets.add(next.creds, next.redisUrl);
    expect(next).toMatchObject({ scoped: true, swarms: ["rig"] });
    const closedWith = await closed;
    expect(String(closedWith?.message ?? closedWith)).toMatch(/revoked/i);
    expect(await redisAuthWorks(credential.redisUrl)).toBe(false);
  });
});
