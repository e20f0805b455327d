import { mkdir, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { decode } from "@nats-io/jwt";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import type { MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import type { WireProtocol } from "../../src/client/transport.js";
import { renderMemberGrant, scopedPublishDeny, streamApiSubjects } from "../../src/swarm/index.js";
import { swarmStreams } from "../../src/swarm-bus/index.js";
import {
  connectWithCreds,
  createFileSigner,
  redisAuthWorks,
  SecretLedger,
  startHive,
  startRedis,
  type FileSigner,
  type HiveUnderTest,
  type TestRedis,
} from "./hive-fixture.js";

/**
 * Minting at join and refresh, with a `file:` signer record the test edits
 * between calls (the hub rereads it every time, without a restart): every
 * row of the specification's table, over Connect JSON, gRPC and the CLI,
 * against a real operator-mode nats-server and a real redis-server.
 */

let redis: TestRedis;
let signer: FileSigner;
let hive: HiveUnderTest;
let scratch: string;
const secrets = new SecretLedger();

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-minting-"));
  redis = await startRedis();
  secrets.add(redis.adminPassword);
  signer = await createFileSigner(scratch);
  secrets.add(signer.signingKeySeed);
  hive = await startHive({ env: { AGENTIHOOKS_NATS_SIGNER: `file:${signer.folder}`, LANEWAY_HIVE_REDIS_URL: redis.adminUrl } });
}, 120_000);

afterAll(async () => {
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await redis?.stop();
  await rm(scratch, { recursive: true, force: true });
  // No invite secret, seed, signing key, credential or password in any log line of the whole run.
  expect(secrets.leaked(logs)).toEqual([]);
});

function failure(error: unknown): { code: Code; reason: string | undefined; message: string } {
  const e = ConnectError.from(error);
  return { code: e.code, reason: e.findDetails(ErrorDetailSchema)[0]?.reason, message: e.rawMessage };
}

async function invite(memberId: string): Promise<{ secret: string; redisUrl: string }> {
  const response = await hive.hub().invite({ memberId });
  const redisUrl = response.inviteEnv.find((l) => l.startsWith("AGENTIHOOKS_REDIS_URL="))!.slice("AGENTIHOOKS_REDIS_URL=".length);
  secrets.add(response.inviteSecret, redisUrl);
  return { secret: response.inviteSecret, redisUrl };
}

function remember(credential: MemberCredential | undefined): MemberCredential {
  expect(credential).toBeDefined();
  secrets.add(credential!.creds, credential!.redisUrl);
  return credential!;
}

function jwtOf(creds: string) {
  const jwt = /-----BEGIN NATS USER JWT-----\n(.+)\n/.exec(creds)![1]!;
  return decode<{ pub: { allow?: string[]; deny?: string[] }; sub: { allow?: string[]; deny?: string[] } }>(jwt);
}

/** The four rows of the specification's table. */
interface Row {
  readonly name: string;
  readonly field: (memberId: string) => Record<string, string[]> | undefined;
}

const rows: readonly Row[] = [
  { name: "no member_swarms field: the unscoped grant, no AGENTIHOOKS_BUS_SCOPED line", field: () => undefined },
  { name: "member_swarms lists the member's swarms: publish and subscribe only under their prefixes", field: (id) => ({ [id]: ["rig", "demo"], "hive-other": ["x"] }) },
  { name: "member_swarms lists the member with no swarm: publish denied on >, subscribe only its inbox", field: (id) => ({ [id]: [] }) },
  { name: "member_swarms present, member absent: 403 before any side effect", field: () => ({ "hive-someone-else": ["rig"] }) },
];

function expectGrantOf(row: number, memberId: string, credential: MemberCredential): void {
  const nats = jwtOf(credential.creds).nats;
  const claims = { pub: nats.pub ?? {}, sub: nats.sub ?? {} };
  const scopedLine = credential.hiveEnv.includes("AGENTIHOOKS_BUS_SCOPED=1");
  expect(credential.hiveEnv.slice(0, 3)).toEqual(["AGENTIHOOKS_BUS=nats", `AGENTIHOOKS_BUS_URL=${hive.nats.url}`, "AGENTIHOOKS_BUS_CREDENTIALS=hive.creds"]);
  expect(credential.hiveEnv).toContain("AGENTIHOOKS_BUS_BIND=1");
  expect(credential.inboxPrefix).toBe(`_INBOX.${memberId}`);
  if (row === 0) {
    expect(credential.scoped).toBe(false);
    expect(scopedLine).toBe(false);
    expect(claims.pub.allow).toEqual([...renderMemberGrant(memberId, { kind: "unscoped" }).publishAllow]);
    expect(claims.pub.allow).toContain("AGENTIHOOKS_DEAD".replace(/^/, "$JS.API.STREAM.MSG.GET."));
    expect(claims.pub.allow).toContain("$KV.spoke-work.>");
    expect(claims.pub.allow).toContain(`slots.*.${memberId}`);
    expect(claims.sub.allow).toEqual(["swarm.*.execution.>", "legacy.swarm.>", `_INBOX.${memberId}.>`]);
  }
  if (row === 1) {
    expect(credential.scoped).toBe(true);
    expect(credential.swarms).toEqual(["demo", "rig"]);
    expect(scopedLine).toBe(true);
    const owned = ["rig", "demo"].flatMap((swarm) => [
      `swarm.${swarm}.>`,
      ...swarmStreams(swarm).flatMap((s) => [...streamApiSubjects(s.name), ...streamApiSubjects(s.legacyName)]),
      `slots.${swarm}.${memberId}`,
    ]);
    expect(new Set(claims.pub.allow)).toEqual(new Set(owned));
    // Deny rules win over the swarm prefix: the legacy subjects of the member's swarms and the old mark subjects.
    expect(claims.pub.deny).toEqual([...scopedPublishDeny(["demo", "rig"])]);
    expect(claims.sub.allow).toEqual(["swarm.demo.>", "swarm.rig.>", `_INBOX.${memberId}.>`]);
    // Nothing grants creation, the legacy global streams, the hub's slot buckets or another swarm.
    const all = JSON.stringify(claims);
    for (const absent of ["STREAM.CREATE", "CONSUMER.CREATE", "AGENTIHOOKS_EVENTS", "AGENTIHOOKS_DEAD", "account-slots", "hive-slot-accounts", "swarm.x.", "swarm.*"]) {
      expect(all).not.toContain(absent);
    }
  }
  if (row === 2) {
    expect(credential.scoped).toBe(true);
    expect(credential.swarms).toEqual([]);
    expect(scopedLine).toBe(true);
    expect(claims.pub.allow ?? []).toEqual([]);
    expect(claims.pub.deny).toEqual([">"]);
    expect(claims.sub.allow).toEqual([`_INBOX.${memberId}.>`]);
  }
}

describe.each(["connect-json", "grpc"] as const)("the minting table over %s", (protocol: WireProtocol) => {
  test.each(rows.map((row, index) => [row.name, index] as const))("%s", async (_name, index) => {
    const row = rows[index]!;
    const memberId = `hive-${protocol === "grpc" ? "g" : "j"}${index}`;
    const { secret, redisUrl } = await invite(memberId);
    await signer.setMemberSwarms(row.field(memberId));
    const member = hive.member(secret, protocol);

    if (index === 3) {
      const before = (await hive.hub().listMembers({})).members.find((m) => m.memberId === memberId);
      const refused = failure(await member.join({}).catch((e: unknown) => e));
      expect(refused).toEqual({
        code: Code.PermissionDenied,
        reason: "swarm_forbidden",
        message: `the hub record lists no member swarms for hive member ${memberId}`,
      });
      // Decided before any side effect: the Redis password is untouched and nothing was minted.
      expect(await redisAuthWorks(redisUrl)).toBe(true);
      const after = (await hive.hub().listMembers({})).members.find((m) => m.memberId === memberId);
      expect(after).toEqual(before);
      expect(after?.lastMintedAt).toBeUndefined();
      expect(after?.refused).toBe(true);
      const grant = failure(await hive.hub(protocol).renderGrant({ memberId }).catch((e: unknown) => e));
      expect(grant.reason).toBe("swarm_forbidden");
      return;
    }

    const credential = remember((await member.join({})).credential);
    expect(credential.memberId).toBe(memberId);
    expectGrantOf(index, memberId, credential);
    const rendered = await hive.hub(protocol).renderGrant({ memberId });
    expect(rendered.publishAllow).toEqual(jwtOf(credential.creds).nats.pub?.allow ?? []);
    expect(rendered.publishDeny).toEqual(jwtOf(credential.creds).nats.pub?.deny ?? []);

    // The Redis password rotated: the new URL authenticates, the invite's no longer does.
    expect(credential.redisUrl).not.toBe(redisUrl);
    expect(credential.hiveEnv).toContain(`AGENTIHOOKS_REDIS_URL=${credential.redisUrl}`);
    expect(await redisAuthWorks(credential.redisUrl)).toBe(true);
    expect(await redisAuthWorks(redisUrl)).toBe(false);

    // The server admits the credential.
    const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
    await nc.flush();
    await nc.close();
  });
});

test("a refresh revokes the previous credential once the new one is minted, and applies a changed record without a restart", async () => {
  const memberId = "hive-refresh";
  const { secret } = await invite(memberId);
  await signer.setMemberSwarms({ [memberId]: ["rig"] });
  const member = hive.member(secret);
  const first = remember((await member.join({})).credential);
  expect(first.swarms).toEqual(["rig"]);
  const old = await connectWithCreds(first.busUrl, first.creds, first.inboxPrefix);
  const oldClosed = old.closed();

  // The operator edits the record; the hub is not restarted.
  await signer.setMemberSwarms({ [memberId]: ["demo"] });
  const second = remember((await member.refresh({})).credential);
  expect(second.scoped).toBe(true);
  expect(second.swarms).toEqual(["demo"]);
  expect(jwtOf(second.creds).nats.sub?.allow).toEqual(["swarm.demo.>", `_INBOX.${memberId}.>`]);
  expect(second.redisUrl).not.toBe(first.redisUrl);
  expect(await redisAuthWorks(first.redisUrl)).toBe(false);
  expect(await redisAuthWorks(second.redisUrl)).toBe(true);

  // The server dropped the previous credential and refuses it; the new one connects.
  const closedWith = await oldClosed;
  expect(String(closedWith?.message ?? closedWith)).toMatch(/revoked/i);
  await expect(connectWithCreds(first.busUrl, first.creds, first.inboxPrefix)).rejects.toThrow(/Authorization/i);
  const fresh = await connectWithCreds(second.busUrl, second.creds, second.inboxPrefix);
  await fresh.flush();
  await fresh.close();

  const listed = (await hive.hub().listMembers({})).members.find((m) => m.memberId === memberId)!;
  expect(listed.swarms).toEqual(["demo"]);
  expect(listed.lastMintedAt).toBeDefined();
});

describe("the CLI", () => {
  async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
    let stdout = "";
    let stderr = "";
    const code = await runCli(args, {
      env: { LANEWAY_ADDRESS: hive.laneway.url, ...env },
      stdout: (t) => void (stdout += t),
      stderr: (t) => void (stderr += t),
      signal: new AbortController().signal,
    });
    return { code, stdout, stderr };
  }

  async function cliInvite(memberId: string): Promise<string> {
    const path = join(scratch, `${memberId}.invite`);
    const result = await cli(["hive", "invite", memberId, "--out", path], { LANEWAY_TOKEN: hive.adminToken });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).not.toContain("AGENTIHOOKS_HIVE_SECRET");
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    secrets.add(await readFile(path, "utf8"));
    return path;
  }

  test.each(rows.map((row, index) => [row.name, index] as const))("hive join: %s", async (_name, index) => {
    const row = rows[index]!;
    const memberId = `hive-c${index}`;
    await signer.setMemberSwarms(row.field(memberId));
    const invitePath = await cliInvite(memberId);
    const dir = join(scratch, memberId);
    await mkdir(dir);
    const result = await cli(["hive", "join", invitePath, "--dir", dir]);
    if (index === 3) {
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(`laneway: permission_denied (swarm_forbidden): the hub record lists no member swarms for hive member ${memberId}\n`);
      await expect(stat(join(dir, "hive.env"))).rejects.toThrow(/ENOENT/);
      await expect(stat(join(dir, "hive.creds"))).rejects.toThrow(/ENOENT/);
      return;
    }
    expect(result.code, result.stderr).toBe(0);
    const printed = JSON.parse(result.stdout) as { scoped: boolean; hiveEnv: string; credentials: string };
    expect(printed.scoped).toBe(index !== 0);
    expect(printed.credentials).toBe(join(dir, "hive.creds"));
    for (const file of ["hive.env", "hive.creds"]) expect((await stat(join(dir, file))).mode & 0o777).toBe(0o600);
    const env = await readFile(join(dir, "hive.env"), "utf8");
    secrets.add(env, await readFile(join(dir, "hive.creds"), "utf8"));
    expect(env).toContain(`AGENTIHOOKS_BUS_CREDENTIALS=${join(dir, "hive.creds")}\n`);
    expect(env.includes("AGENTIHOOKS_BUS_SCOPED=1\n")).toBe(index !== 0);
    expect(env).toContain("AGENTIHOOKS_BUS=nats\n");
    expect(env).toContain("AGENTIHOOKS_BUS_BIND=1\n");

    // hive refresh reads hive.env and the invite it names.
    const refreshed = await cli(["hive", "refresh", "--dir", dir]);
    expect(refreshed.code, refreshed.stderr).toBe(0);
    const after = await readFile(join(dir, "hive.env"), "utf8");
    secrets.add(after, await readFile(join(dir, "hive.creds"), "utf8"));
    expect(after).not.toBe(env); // a new Redis password
  });

  test("hive join with an invite marked scoped refuses an unscoped credential and writes no hive.env", async () => {
    const memberId = "hive-downgrade";
    await signer.setMemberSwarms({ "hive-elsewhere": ["rig"] });
    const invitePath = await cliInvite(memberId);
    const invite = await readFile(invitePath, "utf8");
    expect(invite).toContain("AGENTIHOOKS_BUS_SCOPED=1\n");
    const invitedRedis = /AGENTIHOOKS_REDIS_URL=(.+)/.exec(invite)![1]!;
    // The hub record loses its field: the hub now offers the unscoped grant.
    await signer.setMemberSwarms(undefined);
    const dir = join(scratch, memberId);
    await mkdir(dir);
    const result = await cli(["hive", "join", invitePath, "--dir", dir]);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe("laneway: the hive offered an unscoped bus credential; ask its hub to list this member's swarms\n");
    await expect(stat(join(dir, "hive.env"))).rejects.toThrow(/ENOENT/);
    await expect(stat(join(dir, "hive.creds"))).rejects.toThrow(/ENOENT/);
    // The refresh behind it has already rotated the member's Redis password.
    expect(await redisAuthWorks(invitedRedis)).toBe(false);
    // Once the hub lists the member, joining again with the same invite works.
    await signer.setMemberSwarms({ [memberId]: ["rig"] });
    const again = await cli(["hive", "join", invitePath, "--dir", dir]);
    expect(again.code, again.stderr).toBe(0);
    secrets.add(await readFile(join(dir, "hive.env"), "utf8"), await readFile(join(dir, "hive.creds"), "utf8"));
    expect(await readFile(join(dir, "hive.env"), "utf8")).toContain("AGENTIHOOKS_BUS_SCOPED=1\n");
  });

  test("hive members and hive grant show what each member is granted", async () => {
    await signer.setMemberSwarms({ "hive-c1": ["rig"] });
    const members = await cli(["hive", "members"], { LANEWAY_TOKEN: hive.adminToken });
    expect(members.code, members.stderr).toBe(0);
    const listing = JSON.parse(members.stdout) as { scopingEnabled: boolean; members: { memberId: string; scoped?: boolean; swarms?: string[]; refused?: boolean }[] };
    expect(listing.scopingEnabled).toBe(true);
    expect(listing.members.find((m) => m.memberId === "hive-c1")).toMatchObject({ scoped: true, swarms: ["rig"] });
    expect(listing.members.find((m) => m.memberId === "hive-c0")).toMatchObject({ refused: true });
    const grant = await cli(["hive", "grant", "hive-c1"], { LANEWAY_TOKEN: hive.adminToken });
    expect(grant.code, grant.stderr).toBe(0);
    const rendered = JSON.parse(grant.stdout) as { scoped: boolean; subscribeAllow: string[]; inboxPrefix: string };
    expect(rendered).toMatchObject({ scoped: true, subscribeAllow: ["swarm.rig.>", "_INBOX.hive-c1.>"], inboxPrefix: "_INBOX.hive-c1" });
    const refused = await cli(["hive", "grant", "hive-c0"], { LANEWAY_TOKEN: hive.adminToken });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe("laneway: permission_denied (swarm_forbidden): the hub record lists no member swarms for hive member hive-c0\n");
  });
});
