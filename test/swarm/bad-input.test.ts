import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CoreStartupError } from "../../src/errors/core-error.js";
import { initHive } from "../../src/swarm/index.js";
import { startLanewayInProcess } from "../helpers/laneway.js";
import { createFileSigner, redisAuthWorks, SecretLedger, startHive, startRedis, type FileSigner, type HiveUnderTest, type TestRedis } from "./hive-fixture.js";

/**
 * Bad input gets its typed error and changes nothing: a malformed signer
 * record (the specification's exact texts), an unreadable record file, a
 * swarm name that is not a subject token, a wrong, retired or huge invite
 * secret. "Nothing changed" is checked on the hub's listing, the member's
 * Redis password (a real redis-server) and its NATS credential.
 */

let redis: TestRedis;
let signer: FileSigner;
let hive: HiveUnderTest;
let scratch: string;
let secret: string;
let redisUrl: string;
const secrets = new SecretLedger();
const memberId = "hive-bad";

function failure(error: unknown): { code: Code; reason: string | undefined; message: string } {
  const e = ConnectError.from(error);
  return { code: e.code, reason: e.findDetails(ErrorDetailSchema)[0]?.reason, message: e.rawMessage };
}

async function snapshot() {
  const listing = await hive.hub().listMembers({}).catch(() => undefined);
  return { member: listing?.members.find((m) => m.memberId === memberId), redis: await redisAuthWorks(redisUrl) };
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-bad-input-"));
  redis = await startRedis();
  signer = await createFileSigner(scratch);
  secrets.add(redis.adminPassword, signer.signingKeySeed);
  hive = await startHive({ env: { AGENTIHOOKS_NATS_SIGNER: `file:${signer.folder}`, LANEWAY_HIVE_REDIS_URL: redis.adminUrl } });
  const invite = await hive.hub().invite({ memberId });
  secret = invite.inviteSecret;
  redisUrl = invite.inviteEnv.find((l) => l.startsWith("AGENTIHOOKS_REDIS_URL="))!.split("=", 2)[1]!;
  secrets.add(secret, redisUrl);
}, 120_000);

afterAll(async () => {
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await redis?.stop();
  await rm(scratch, { recursive: true, force: true });
  expect(secrets.leaked(logs)).toEqual([]);
});

describe("a malformed signer record is refused with the specification's texts, and nothing is minted or rotated", () => {
  const shape = "member_swarms must map member ids to lists of swarm names";
  const invalid = (reason: string) => `member_swarms contains an invalid swarm name (${reason})`;
  test.each([
    ["a list instead of an object", '{"member_swarms": ["rig"]}', shape],
    ["null", '{"member_swarms": null}', shape],
    ["a string instead of a list", '{"member_swarms": {"hive-bad": "rig"}}', shape],
    ["a number in a list", '{"member_swarms": {"hive-bad": [1]}}', shape],
    ["a member id that is not an identifier", '{"member_swarms": {"Hive Bad": ["rig"]}}', shape],
    ["a swarm with '.'", '{"member_swarms": {"hive-bad": ["rig.eng"]}}', invalid("'rig.eng' contains '.'")],
    ["a swarm with '*'", '{"member_swarms": {"hive-bad": ["rig*"]}}', invalid("'rig*' contains '*'")],
    ["a swarm with '>'", '{"member_swarms": {"hive-bad": [">"]}}', invalid("'>' contains '>'")],
    ["a swarm with a space", '{"member_swarms": {"hive-bad": ["rig grade"]}}', invalid("'rig grade' contains whitespace")],
    ["an empty swarm name", '{"member_swarms": {"hive-bad": [""]}}', invalid("a swarm name is empty")],
    ["a swarm name over 64 bytes", `{"member_swarms": {"hive-bad": ["${"é".repeat(33)}"]}}`, invalid(`'${"é".repeat(33)}' is longer than 64 bytes`)],
    ["text that is not JSON", "member_swarms: {", "the signer record is not valid JSON"],
  ])("%s", async (_name, text, message) => {
    const before = await snapshot();
    await signer.setMemberSwarms(text);
    for (const call of [() => hive.member(secret).join({}), () => hive.member(secret, "grpc").refresh({}), () => hive.hub().listMembers({})]) {
      expect(failure(await call().catch((e: unknown) => e))).toEqual({ code: Code.InvalidArgument, reason: "swarm_invalid", message });
    }
    await signer.setMemberSwarms(undefined);
    expect(await snapshot()).toEqual(before);
  });
});

describe("an unreadable signer record is swarm_unavailable, and nothing changes", () => {
  test("a member_swarms file that cannot be read", async () => {
    const before = await snapshot();
    await mkdir(join(signer.folder, "member_swarms"));
    expect(failure(await hive.member(secret).join({}).catch((e: unknown) => e))).toEqual({
      code: Code.Unavailable,
      reason: "swarm_unavailable",
      message: "the signer record cannot be read (EISDIR)",
    });
    await rm(join(signer.folder, "member_swarms"), { recursive: true });
    expect(await snapshot()).toEqual(before);
  });

  test("a missing signing key", async () => {
    const before = await snapshot();
    await rename(join(signer.folder, "signing_key"), join(signer.folder, "signing_key.away"));
    expect(failure(await hive.member(secret).join({}).catch((e: unknown) => e))).toEqual({
      code: Code.Unavailable,
      reason: "swarm_unavailable",
      message: "the signer record cannot be read (ENOENT)",
    });
    await rename(join(signer.folder, "signing_key.away"), join(signer.folder, "signing_key"));
    expect(await snapshot()).toEqual(before);
  });

  test("a signing key that is not an account seed", async () => {
    const before = await snapshot();
    const path = join(signer.folder, "signing_key");
    const seed = await readFile(path, "utf8");
    await writeFile(path, "SUnotaseed\n");
    const refused = failure(await hive.member(secret).join({}).catch((e: unknown) => e));
    expect(refused.reason).toBe("swarm_invalid");
    expect(refused.message).toBe("the signer record's signing key is not an account signing key seed (SA…)");
    await writeFile(path, seed);
    expect(await snapshot()).toEqual(before);
  });
});

describe("requests", () => {
  test.each(["rig.eng", "rig*", "rig>", "rig grade", ""])("a swarm name %j breaks the contract (swarm_invalid)", async (swarm) => {
    const refused = ConnectError.from(await hive.hub().scope({ swarms: [swarm] }).catch((e: unknown) => e));
    expect(refused.code).toBe(Code.InvalidArgument);
    expect(refused.findDetails(ErrorDetailSchema)[0]?.reason).toBe("swarm_invalid");
  });

  test("scope refuses a file: signer record, which is never written", async () => {
    await signer.setMemberSwarms({ [memberId]: ["rig"] });
    const before = await readFile(join(signer.folder, "member_swarms"), "utf8");
    expect(failure(await hive.hub().scope({ swarms: ["demo"] }).catch((e: unknown) => e))).toMatchObject({ code: Code.Aborted, reason: "swarm_conflict" });
    expect(await readFile(join(signer.folder, "member_swarms"), "utf8")).toBe(before);
    // invite marks the invite scoped but does not list the member in a file: record.
    const invite = await hive.hub().invite({ memberId: "hive-unlisted" });
    secrets.add(invite.inviteSecret);
    expect(invite).toMatchObject({ scoped: true, listed: false });
    expect(invite.inviteEnv).toContain("AGENTIHOOKS_BUS_SCOPED=1");
    expect(await readFile(join(signer.folder, "member_swarms"), "utf8")).toBe(before);
    await signer.setMemberSwarms(undefined);
  });

  test("inviting a member that exists is swarm_conflict and keeps its secret", async () => {
    expect(failure(await hive.hub().invite({ memberId }).catch((e: unknown) => e))).toMatchObject({ code: Code.Aborted, reason: "swarm_conflict" });
    const credential = (await hive.member(secret).join({})).credential!;
    secrets.add(credential.creds, credential.redisUrl);
    redisUrl = credential.redisUrl;
    expect(credential.memberId).toBe(memberId);
  });
});

describe("invite secrets", () => {
  test.each([
    ["a wrong secret", () => `hive_${"A".repeat(43)}`],
    ["a huge secret (8 KiB)", () => `hive_${"B".repeat(8 * 1024)}`],
    ["the operator token", () => hive.adminToken],
  ])("%s is refused and changes nothing", async (_name, token) => {
    const before = await snapshot();
    const refused = failure(await hive.member(token()).refresh({}).catch((e: unknown) => e));
    expect(refused.code).toBe(token() === hive.adminToken ? Code.PermissionDenied : Code.Unauthenticated);
    expect(refused.message).not.toContain(token());
    expect(await snapshot()).toEqual(before);
  });

  test("a secret reused after its member retired is refused and changes nothing", async () => {
    const invite = await hive.hub().invite({ memberId: "hive-gone" });
    secrets.add(invite.inviteSecret);
    await hive.hub().retireMember({ memberId: "hive-gone" });
    const before = await snapshot();
    expect(failure(await hive.member(invite.inviteSecret).join({}).catch((e: unknown) => e))).toEqual({
      code: Code.Unauthenticated,
      reason: "unauthorized",
      message: "unknown bearer token",
    });
    expect(await snapshot()).toEqual(before);
    expect((await hive.hub().listMembers({})).retired.map((r) => r.memberId)).toContain("hive-gone");
  });
});

test("a hub whose signer record is malformed does not start", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-bad-record-"));
  try {
    await initHive(dataDir, { natsListen: "127.0.0.1:0" });
    const own = await createFileSigner(dataDir);
    secrets.add(own.signingKeySeed);
    await own.setMemberSwarms('{"member_swarms": {"hive-a": "rig"}}');
    const error = await startLanewayInProcess({ dataDir, lanesConfig: false, env: { AGENTIHOOKS_NATS_SIGNER: `file:${own.folder}` } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CoreStartupError);
    expect((error as CoreStartupError).message).toBe("the hive hub cannot start: member_swarms must map member ids to lists of swarm names");
    expect((error as CoreStartupError).kind).toBe("state_conflict");
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});
