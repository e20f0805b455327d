import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import type { MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import { connectWithCreds, redisAuthWorks, SecretLedger, startHive, startRedis, type HiveUnderTest, type TestRedis } from "./hive-fixture.js";

/**
 * Retiring a member: its key joins the hive account's revocation list, so
 * the NATS server drops and refuses its credential at once while other
 * members stay connected (no restart of anything); its record (with the
 * digest of its invite secret) and its Redis ACL user are deleted; it is
 * listed as retired.
 */

let redis: TestRedis;
let hive: HiveUnderTest;
const secrets = new SecretLedger();

interface Joined {
  readonly secret: string;
  readonly credential: MemberCredential;
  readonly nc: NatsConnection;
}

async function joined(memberId: string): Promise<Joined> {
  const invite = await hive.hub().invite({ memberId, swarms: ["rig"] });
  const credential = (await hive.member(invite.inviteSecret).join({})).credential!;
  secrets.add(invite.inviteSecret, credential.creds, credential.redisUrl);
  return { secret: invite.inviteSecret, credential, nc: await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix) };
}

beforeAll(async () => {
  redis = await startRedis();
  secrets.add(redis.adminPassword);
  hive = await startHive({ env: { LANEWAY_HIVE_REDIS_URL: redis.adminUrl } });
  await hive.hub().scope({ swarms: ["rig"] });
}, 120_000);

afterAll(async () => {
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await redis?.stop();
  expect(secrets.leaked(logs)).toEqual([]);
});

test("the server refuses a retired member's credential at once; the other members stay connected", async () => {
  const leaving = await joined("hive-leaving");
  const staying = await joined("hive-staying");
  const leavingClosed = leaving.nc.closed();

  const retired = await hive.hub().retireMember({ memberId: "hive-leaving" });
  expect(retired.retired?.memberId).toBe("hive-leaving");
  expect(retired.retired?.revokedKeys).toBe(1);
  expect(retired.redisUserDeleted).toBe(true);

  expect(String((await leavingClosed)?.message)).toMatch(/revoked/i);
  await expect(connectWithCreds(leaving.credential.busUrl, leaving.credential.creds, leaving.credential.inboxPrefix)).rejects.toThrow(/Authorization/i);
  expect(await redisAuthWorks(leaving.credential.redisUrl)).toBe(false);

  // The other member never lost its connection.
  expect(staying.nc.isClosed()).toBe(false);
  const reply = await staying.nc.request("swarm.rig.ping", new Uint8Array(), { timeout: 5_000, noMux: true }).catch((e: unknown) => e);
  expect(String((reply as Error).message ?? reply)).not.toMatch(/Permissions Violation|revoked/i);
  await staying.nc.flush();
  expect(await redisAuthWorks(staying.credential.redisUrl)).toBe(true);

  // The invite no longer authenticates; the member is listed as retired and no longer in member_swarms.
  const refused = ConnectError.from(await hive.member(leaving.secret).refresh({}).catch((e: unknown) => e));
  expect(refused.code).toBe(Code.Unauthenticated);
  const listing = await hive.hub().listMembers({});
  expect(listing.members.map((m) => m.memberId)).toEqual(["hive-staying"]);
  expect(listing.retired.map((r) => r.memberId)).toEqual(["hive-leaving"]);
  const record = JSON.parse(await readFile(join(hive.dataDir, "hive", "records", "nats-signer.json"), "utf8")) as { member_swarms: Record<string, string[]> };
  expect(Object.keys(record.member_swarms)).toEqual(["hive-staying"]);
  await staying.nc.close();
});

test("a retired id can be invited again with a new secret; the old secret stays refused", async () => {
  const first = await joined("hive-again");
  await first.nc.close();
  await hive.hub().retireMember({ memberId: "hive-again" });
  const second = await joined("hive-again");
  expect(second.secret).not.toBe(first.secret);
  expect(ConnectError.from(await hive.member(first.secret).join({}).catch((e: unknown) => e)).code).toBe(Code.Unauthenticated);
  await expect(connectWithCreds(first.credential.busUrl, first.credential.creds)).rejects.toThrow(/Authorization/i);
  await second.nc.flush();
  await second.nc.close();
});

test("retiring an unknown member is swarm_not_found; laneway hive retire is the same call", async () => {
  const missing = ConnectError.from(await hive.hub().retireMember({ memberId: "hive-nobody" }).catch((e: unknown) => e));
  expect(missing.code).toBe(Code.NotFound);
  expect(missing.findDetails(ErrorDetailSchema)[0]?.reason).toBe("swarm_not_found");

  const member = await joined("hive-cli");
  let stdout = "";
  let stderr = "";
  const code = await runCli(["hive", "retire", "hive-cli"], {
    env: { LANEWAY_ADDRESS: hive.laneway.url, LANEWAY_TOKEN: hive.adminToken },
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    signal: new AbortController().signal,
  });
  expect(code, stderr).toBe(0);
  expect(JSON.parse(stdout)).toMatchObject({ retired: { memberId: "hive-cli", revokedKeys: 1 }, redisUserDeleted: true });
  expect(String((await member.nc.closed())?.message)).toMatch(/revoked/i);
});
