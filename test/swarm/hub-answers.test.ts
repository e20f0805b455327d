import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import { swarmStreams } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";
import { createFileSigner, SecretLedger, startHive, type FileSigner, type HiveUnderTest } from "./hive-fixture.js";

/**
 * What the hub's answers promise, and the mistakes they name:
 *
 * - `hive invite --swarm` before `hive scope` is a usage error (exit 2)
 *   that says to run hive scope first, instead of an unscoped invite that
 *   silently dropped the swarms;
 * - an invite or refresh creates the streams of the swarms it grants
 *   before it answers (a hand edit of a `file:` record reaches
 *   provisioning at the member's refresh, not at the hub's next sync);
 * - a member that connects without its inbox prefix gets the refusal the
 *   troubleshooting table lists.
 */

const secrets = new SecretLedger();

async function cli(url: string, token: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    env: { LANEWAY_ADDRESS: url, LANEWAY_TOKEN: token },
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

describe("hive invite --swarm before hive scope", () => {
  let hive: HiveUnderTest;

  beforeAll(async () => {
    hive = await startHive();
  }, 120_000);

  afterAll(async () => {
    const logs = hive?.laneway.logs.join("") ?? "";
    await hive?.stop();
    expect(secrets.leaked(logs)).toEqual([]);
  });

  test("is a usage error that says to run hive scope first, and registers nobody", async () => {
    const result = await cli(hive.laneway.url, hive.adminToken, ["hive", "invite", "hive-early", "--swarm", "rig"]);
    expect(result.code).toBe(2);
    expect(result.stderr.split("\n")[0]).toBe(
      "laneway: --swarm needs the signer record's member_swarms field, which does not exist yet: run laneway hive scope first (an invite issued before it is unscoped)",
    );
    expect(result.stdout).toBe("");
    expect((await hive.hub().listMembers({})).members).toEqual([]);
  });

  test("the RPC refuses it too when asked to (require_member_swarms), and nothing is registered", async () => {
    const error = ConnectError.from(await hive.hub().invite({ memberId: "hive-early", swarms: ["rig"], requireMemberSwarms: true }).catch((e: unknown) => e));
    expect(error.code).toBe(Code.Aborted);
    expect(error.findDetails(ErrorDetailSchema)[0]?.reason).toBe("swarm_conflict");
    expect(error.rawMessage).toBe(
      "swarms were given, but the signer record has no member_swarms field yet, so the invite would be unscoped and the swarms ignored: run laneway hive scope first",
    );
    expect((await hive.hub().listMembers({})).members).toEqual([]);
    // After hive scope, --swarm lists the member.
    await hive.hub().scope({ swarms: ["rig"] });
    const invited = await cli(hive.laneway.url, hive.adminToken, ["hive", "invite", "hive-early", "--swarm", "ops", "--out", join(hive.dataDir, "hive-early.invite")]);
    expect(invited.code, invited.stderr).toBe(0);
    secrets.add(await readFile(join(hive.dataDir, "hive-early.invite"), "utf8"));
    expect(JSON.parse(invited.stdout)).toMatchObject({ scoped: true, listed: true, swarms: ["ops"] });
  });
});

describe("an invite or refresh answers once the streams it grants exist", () => {
  let hive: HubHive;
  let laneway: InProcessLaneway;
  let scratch: string;
  let signer: FileSigner;

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), "laneway-hub-answers-"));
    hive = await startHubHive();
    signer = await createFileSigner(scratch);
    secrets.add(signer.signingKeySeed);
    await signer.setMemberSwarms({});
    laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1", AGENTIHOOKS_NATS_SIGNER: `file:${signer.folder}` });
  }, 120_000);

  afterAll(async () => {
    const logs = laneway?.logs.join("") ?? "";
    await laneway?.stop();
    await hive?.stop();
    await rm(scratch, { recursive: true, force: true });
    expect(secrets.leaked(logs)).toEqual([]);
  });

  const exists = async (name: string) => {
    const { jsm } = await hive.admin();
    return jsm.streams.info(name).then(
      () => true,
      () => false,
    );
  };

  test("a hand edit of the file: record reaches provisioning at the invite and at the refresh, not at the next sync", async () => {
    const hub = laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
    // The operator lists the member by hand, then invites it: the listed swarm's streams exist when the invite answers.
    await signer.setMemberSwarms({ "hive-f": ["early"] });
    const invite = await hub.invite({ memberId: "hive-f" });
    secrets.add(invite.inviteSecret, ...invite.inviteEnv);
    for (const stream of swarmStreams("early")) expect(await exists(stream.name), stream.name).toBe(true);

    const member = laneway.clients.client(HiveMemberService, { token: invite.inviteSecret });
    const joined = (await member.join({})).credential!;
    secrets.add(joined.creds);
    for (const stream of swarmStreams("late")) expect(await exists(stream.name), stream.name).toBe(false);
    // A hand edit adds a swarm; the refresh that grants it answers once its streams exist.
    await signer.setMemberSwarms({ "hive-f": ["early", "late"] });
    const refreshed = (await member.refresh({})).credential!;
    secrets.add(refreshed.creds);
    expect(refreshed.swarms).toEqual(["early", "late"]);
    for (const stream of swarmStreams("late")) expect(await exists(stream.name), stream.name).toBe(true);
  });

  test("swarms given to an invite with a file: record are refused when asked to, not dropped", async () => {
    const hub = laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
    const error = ConnectError.from(await hub.invite({ memberId: "hive-x", swarms: ["early"], requireMemberSwarms: true }).catch((e: unknown) => e));
    expect(error.code).toBe(Code.Aborted);
    expect(error.rawMessage).toBe(
      "swarms were given, but the signer record is a file: record, which Laneway never writes: list the member with its swarms in the record's member_swarms file, then invite it without swarms",
    );
    expect((await hub.listMembers({})).members.map((m) => m.memberId)).not.toContain("hive-x");
  });

  test("a member connecting without its inbox prefix gets the refusal the troubleshooting table names", async () => {
    const hub = laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
    await signer.setMemberSwarms({ "hive-f": ["early", "late"], "hive-i": ["early"] });
    const invite = await hub.invite({ memberId: "hive-i" });
    secrets.add(invite.inviteSecret, ...invite.inviteEnv);
    const credential = (await laneway.clients.client(HiveMemberService, { token: invite.inviteSecret }).join({})).credential!;
    secrets.add(credential.creds);
    const nc = await connect({ servers: credential.busUrl, authenticator: credsAuthenticator(new TextEncoder().encode(credential.creds)), reconnect: false });
    try {
      const error = (await nc.request("swarm.early.events.hello", "{}", { timeout: 5_000 }).catch((e: unknown) => e)) as Error;
      expect(error.message).toMatch(/^Permissions Violation for Subscription to "_INBOX\.[A-Za-z0-9]+\.\*"$/);
    } finally {
      await nc.close().catch(() => {});
    }
  });
});
