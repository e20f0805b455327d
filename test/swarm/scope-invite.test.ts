import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { deadStream, eventsStream, swarmHex } from "../../src/swarm-bus/index.js";
import { jetStreamOf, SecretLedger, startHive, type HiveUnderTest } from "./hive-fixture.js";

/**
 * `hive scope` and `hive invite` on a `hub:` signer record: scope creates
 * the member_swarms field and lists every existing member with the given
 * swarms, or with every swarm in the store (found from the streams on the
 * server, in either name format) when none is given; members already
 * listed keep theirs. Invite lists a new member the same way once the field
 * exists and marks its invite scoped; it never creates the field, so
 * invites issued before scope stay unscoped.
 */

let hive: HiveUnderTest;
let earlySecret: string;
const secrets = new SecretLedger();

async function record(): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(join(hive.dataDir, "hive", "records", "nats-signer.json"), "utf8")) as Record<string, unknown>;
}

beforeAll(async () => {
  hive = await startHive();
  const { jsm } = await jetStreamOf(await hive.hubConnection());
  await jsm.streams.add({ name: eventsStream("rig").name, subjects: [...eventsStream("rig").subjects] });
  await jsm.streams.add({ name: deadStream("ops").name, subjects: [...deadStream("ops").subjects] });
  await jsm.streams.add({ name: `AGENTIHOOKS_${swarmHex("old")}_DEAD`, subjects: ["legacy-dead.old"] });
  await jsm.streams.add({ name: "AGENTIHOOKS_DEAD", subjects: ["dead.>"] });
}, 120_000);

afterAll(async () => {
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  expect(secrets.leaked(logs)).toEqual([]);
});

test("an invite issued before the field exists stays unscoped and lists nobody", async () => {
  const invite = await hive.hub().invite({ memberId: "hive-early", swarms: ["rig"] });
  earlySecret = invite.inviteSecret;
  secrets.add(invite.inviteSecret);
  expect(invite).toMatchObject({ scoped: false, listed: false, swarms: [] });
  expect(invite.inviteEnv.some((l) => l.startsWith("AGENTIHOOKS_BUS_SCOPED"))).toBe(false);
  expect(invite.inviteEnv).toContain("AGENTIHOOKS_HIVE_MEMBER=hive-early");
  expect(invite.inviteEnv).toContain(`AGENTIHOOKS_BUS_URL=${hive.nats.url}`);
  expect(await record()).not.toHaveProperty("member_swarms");
  expect((await hive.hub().listMembers({})).scopingEnabled).toBe(false);
});

test("scope without swarms creates the field and lists every member with every swarm in the store", async () => {
  const scoped = await hive.hub().scope({});
  expect(scoped.created).toBe(true);
  expect(scoped.swarms).toEqual(["old", "ops", "rig"]);
  expect(scoped.members.map((m) => [m.memberId, m.scoped, m.swarms])).toEqual([["hive-early", true, ["old", "ops", "rig"]]]);
  expect((await record())["member_swarms"]).toEqual({ "hive-early": ["old", "ops", "rig"] });
});

test("invite lists a new member the same way once the field exists, and marks its invite scoped", async () => {
  const given = await hive.hub().invite({ memberId: "hive-given", swarms: ["rig"] });
  const all = await hive.hub().invite({ memberId: "hive-all" });
  secrets.add(given.inviteSecret, all.inviteSecret);
  expect(given).toMatchObject({ scoped: true, listed: true, swarms: ["rig"] });
  expect(all).toMatchObject({ scoped: true, listed: true, swarms: ["old", "ops", "rig"] });
  expect(given.inviteEnv).toContain("AGENTIHOOKS_BUS_SCOPED=1");
  // The early member's invite stays unscoped, but its next credential is
  // scoped: the hub rereads the record.
  const early = await hive.member(earlySecret).join({});
  secrets.add(early.credential?.creds);
  expect(early.credential).toMatchObject({ scoped: true, swarms: ["old", "ops", "rig"] });
});

test("scope again: members already listed keep their swarms; the field is not created twice", async () => {
  const path = join(hive.dataDir, "hive", "records", "nats-signer.json");
  const before = (await record())["member_swarms"] as Record<string, string[]>;
  let stdout = "";
  let stderr = "";
  const code = await runCli(["hive", "scope", "--swarm", "demo"], {
    env: { LANEWAY_ADDRESS: hive.laneway.url, LANEWAY_TOKEN: hive.adminToken },
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    signal: new AbortController().signal,
  });
  expect(code, stderr).toBe(0);
  const printed = JSON.parse(stdout) as { created?: boolean; swarms: string[] };
  expect(printed.created ?? false).toBe(false);
  expect(printed.swarms).toEqual(["demo"]);
  expect((await record())["member_swarms"]).toEqual(before);
  expect(JSON.parse(await readFile(path, "utf8"))).toHaveProperty("signing_key");
});

test("laneway hive init creates the hive once", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-hive-init-"));
  try {
    const run = async () => {
      let stdout = "";
      let stderr = "";
      const code = await runCli(["hive", "init", "--data-dir", dataDir, "--nats-listen", "127.0.0.1:4999"], {
        env: {},
        stdout: (t) => void (stdout += t),
        stderr: (t) => void (stderr += t),
        signal: new AbortController().signal,
      });
      return { code, result: JSON.parse(stdout) as { created: boolean; hiveAccount: string; natsListen: string; signer: string }, stderr };
    };
    const first = await run();
    expect(first.code).toBe(0);
    expect(first.result).toMatchObject({ created: true, natsListen: "127.0.0.1:4999", signer: "hub:nats-signer" });
    expect(first.result.hiveAccount).toMatch(/^A[A-Z2-7]{55}$/);
    const second = await run();
    expect(second.result).toMatchObject({ created: false, hiveAccount: first.result.hiveAccount });
    expect(second.stderr).toBe("laneway: the hive was already initialized; nothing was changed\n");
    const conf = await readFile(join(dataDir, "hive", "nats-server-auth.conf"), "utf8");
    expect(conf).toContain(`system_account: "`);
    expect(conf).toContain("max_control_line: 4194304");
    expect(conf).not.toMatch(/S[OAU][A-Z2-7]{56}/); // no seed in the server configuration
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
});
