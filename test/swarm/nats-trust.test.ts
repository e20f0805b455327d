import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decode } from "@nats-io/jwt";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { controllerGrant } from "../../src/swarm/index.js";
import { ANTONCORE_FILES } from "../../src/cli/grant-check/antoncore-users.js";
import { connectWithCreds, SecretLedger, startHive, type HiveUnderTest } from "./hive-fixture.js";
import { usersYaml, type YamlUser } from "../helpers/nats-users-yaml.js";

/**
 * `laneway hive nats-trust`: the service users of an antoncore checkout's
 * users file, signed by the hub in the hive account, against the hive's
 * operator-mode nats-server. A signed service user connects with exactly
 * its grants; a rerun changes nothing (no credential, no revocation, no
 * state); a user moved under `retired:` has its key revoked on the server
 * at once (its open connection is dropped, a new one refused) and its
 * credential deleted; `--dry-run` prints what would be done and changes
 * nothing; the shared hive user is never signed.
 */

let hive: HiveUnderTest;
let scratch: string;
let checkout: string;
let out: string;
const secrets = new SecretLedger();
const open: NatsConnection[] = [];

const controller = controllerGrant();
const controllerUser: YamlUser = { name: "swarm-controller", publish: controller.publishAllow, subscribe: controller.subscribeAllow };
const webhook: YamlUser = { name: "swarm-github-webhook", publish: ["swarm.*.events.github.>"], subscribe: ["_INBOX.>"] };
const ledger: YamlUser = { name: "swarm-ledger", publish: ["ledger.>"], publishDeny: ["ledger.secret.>"], subscribe: ["ledger.>", "_INBOX.>"] };

async function writeUsers(users: readonly YamlUser[], retired: readonly string[] = []): Promise<void> {
  await writeFile(join(checkout, ANTONCORE_FILES.users), usersYaml(users, retired));
}

interface Printed {
  dryRun: boolean;
  users: { name: string; action: string; why?: string; publicKey?: string; revokedKeys?: number; credentials?: string }[];
  retired: { name: string; action: string; revokedKeys: number; deleted?: string }[];
  unlisted: string[];
}

async function natsTrust(...extra: string[]): Promise<{ code: number; printed: Printed | undefined; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(["hive", "nats-trust", "--antoncore", checkout, "--out", out, ...extra], {
    env: { LANEWAY_ADDRESS: hive.laneway.url, LANEWAY_TOKEN: hive.adminToken },
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    signal: new AbortController().signal,
  });
  return { code, printed: stdout === "" ? undefined : (JSON.parse(stdout) as Printed), stderr };
}

/** Every file of the output folder with its bytes, and the hub's state file. */
async function snapshot(): Promise<{ files: Record<string, string>; state: string }> {
  const files: Record<string, string> = {};
  for (const name of await readdir(out).catch(() => [] as string[])) files[name] = await readFile(join(out, name), "utf8");
  return { files, state: await readFile(join(hive.dataDir, "hive", "hub-state.json"), "utf8") };
}

function claimsOf(creds: string) {
  const jwt = /-----BEGIN NATS USER JWT-----\n(.+)\n/.exec(creds)![1]!;
  return decode<{ issuer_account?: string; pub: { allow?: string[]; deny?: string[] }; sub: { allow?: string[]; deny?: string[] } }>(jwt);
}

async function connectAs(name: string): Promise<NatsConnection> {
  const creds = await readFile(join(out, `${name}.creds`), "utf8");
  secrets.add(creds);
  const nc = await connectWithCreds(hive.nats.url, creds);
  open.push(nc);
  return nc;
}

async function outcomeOf(nc: NatsConnection, subject: string): Promise<string> {
  try {
    await nc.request(subject, "{}", { timeout: 5_000 });
    return "answered";
  } catch (error) {
    const cause = (error as { cause?: Error }).cause;
    if (cause?.message.includes("Permissions Violation")) return cause.message;
    return "allowed"; // no responders: the server let it through
  }
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-nats-trust-"));
  checkout = join(scratch, "antoncore");
  out = join(scratch, "service-creds");
  await mkdir(join(checkout, "k8s/values-overlays/agentihooks-swarm-nats"), { recursive: true });
  await writeFile(join(checkout, ANTONCORE_FILES.values), ["config:", "  jetstream:", "    enabled: true", "  resolver:", "    type: full", ""].join("\n"));
  await writeUsers([controllerUser, webhook, ledger]);
  hive = await startHive();
}, 120_000);

afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => {});
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  await rm(scratch, { recursive: true, force: true });
  expect(secrets.leaked(logs)).toEqual([]);
});

describe("hive nats-trust", () => {
  test("--dry-run prints what it would sign and changes nothing", async () => {
    const before = await snapshot();
    const { code, printed } = await natsTrust("--dry-run");
    expect(code).toBe(0);
    expect(printed).toEqual({
      dryRun: true,
      users: ["swarm-controller", "swarm-github-webhook", "swarm-ledger"].map((name) => ({ name, action: "signed", why: "the hub has no record of this user" })),
      retired: [],
      unlisted: [],
    });
    expect(await snapshot()).toEqual(before);
  });

  test("signs each listed user in the hive account with exactly its grants, written mode 0600; each connects with those grants only", async () => {
    const { code, printed, stderr } = await natsTrust();
    expect(code, stderr).toBe(0);
    expect(printed!.users.map((u) => [u.name, u.action, u.credentials])).toEqual(
      ["swarm-controller", "swarm-github-webhook", "swarm-ledger"].map((name) => [name, "signed", join(out, `${name}.creds`)]),
    );
    expect((await stat(out)).mode & 0o777).toBe(0o700);
    for (const user of [controllerUser, webhook, ledger]) {
      const path = join(out, `${user.name}.creds`);
      expect((await stat(path)).mode & 0o777).toBe(0o600);
      const creds = await readFile(path, "utf8");
      secrets.add(creds);
      const claims = claimsOf(creds);
      expect(claims.name).toBe(user.name);
      expect(claims.nats.issuer_account).toBe(hive.trust.hiveAccount.getPublicKey());
      expect(claims.nats.pub?.allow).toEqual([...user.publish]);
      expect(claims.nats.pub?.deny ?? []).toEqual([...(user.publishDeny ?? [])]);
      expect(claims.nats.sub?.allow).toEqual([...user.subscribe]);
      expect(claims.exp).toBeUndefined();
    }
    const nc = await connectAs("swarm-ledger");
    expect(await outcomeOf(nc, "ledger.entries")).toBe("allowed");
    expect(await outcomeOf(nc, "ledger.secret.keys")).toBe('Permissions Violation for Publish to "ledger.secret.keys"');
    expect(await outcomeOf(nc, "swarm.rig.queue.eng.work")).toBe('Permissions Violation for Publish to "swarm.rig.queue.eng.work"');
    const errors: string[] = [];
    void (async () => {
      for await (const status of nc.status()) if (status.type === "error") errors.push(String((status as { error?: Error }).error?.message));
    })();
    nc.subscribe("swarm.>");
    await nc.flush();
    await expect.poll(() => errors.join(" "), { timeout: 10_000 }).toContain('Permissions Violation for Subscription to "swarm.>"');
    const webhookNc = await connectAs("swarm-github-webhook");
    expect(await outcomeOf(webhookNc, "swarm.rig.events.github.push")).toBe("allowed");
    expect(await outcomeOf(webhookNc, "swarm.rig.execution.started")).toBe('Permissions Violation for Publish to "swarm.rig.execution.started"');
  });

  test("a rerun changes nothing: no credential, no revocation, no state", async () => {
    const before = await snapshot();
    const { code, printed } = await natsTrust();
    expect(code).toBe(0);
    expect(printed!.users.map((u) => [u.name, u.action, u.credentials])).toEqual(
      ["swarm-controller", "swarm-github-webhook", "swarm-ledger"].map((name) => [name, "unchanged", undefined]),
    );
    expect(await snapshot()).toEqual(before);
  });

  test("changed grants sign the user again and revoke the credential they replace", async () => {
    const old = await connectAs("swarm-github-webhook");
    const closed = old.closed();
    await writeUsers([controllerUser, { ...webhook, publish: ["swarm.*.events.github.>", "swarm.*.events.gitlab.>"] }, ledger]);
    const { printed } = await natsTrust();
    expect(printed!.users.find((u) => u.name === "swarm-github-webhook")).toMatchObject({ action: "resigned", why: "the grants changed", revokedKeys: 1 });
    expect(printed!.users.filter((u) => u.action === "unchanged").map((u) => u.name)).toEqual(["swarm-controller", "swarm-ledger"]);
    const closedWith = await closed;
    expect(String(closedWith?.message ?? closedWith)).toMatch(/revoked/i);
    const fresh = await connectAs("swarm-github-webhook");
    expect(await outcomeOf(fresh, "swarm.rig.events.gitlab.push")).toBe("allowed");
  });

  test("a retired user's key is revoked on the server at once and its credential deleted; a rerun changes nothing", async () => {
    const path = join(out, "swarm-ledger.creds");
    const creds = await readFile(path, "utf8");
    const nc = await connectAs("swarm-ledger");
    const closed = nc.closed();
    await writeUsers([controllerUser, { ...webhook, publish: ["swarm.*.events.github.>", "swarm.*.events.gitlab.>"] }], ["swarm-ledger"]);
    const { code, printed } = await natsTrust();
    expect(code).toBe(0);
    expect(printed!.retired).toEqual([{ name: "swarm-ledger", action: "revoked", revokedKeys: 1, deleted: path }]);
    const closedWith = await closed;
    expect(String(closedWith?.message ?? closedWith)).toMatch(/revoked/i);
    await expect(connectWithCreds(hive.nats.url, creds)).rejects.toThrow(/Authorization/i);
    await expect(stat(path)).rejects.toThrow(/ENOENT/);
    // The other users were not touched.
    const controllerNc = await connectAs("swarm-controller");
    await controllerNc.flush();

    const before = await snapshot();
    const again = await natsTrust();
    expect(again.printed!.retired).toEqual([{ name: "swarm-ledger", action: "already-retired", revokedKeys: 0 }]);
    expect(again.printed!.users.every((u) => u.action === "unchanged")).toBe(true);
    expect(await snapshot()).toEqual(before);
  });

  test("the shared hive user is never signed: the run is refused and nothing is written", async () => {
    await writeUsers([controllerUser, { name: "swarm-hive", publish: ["swarm.*.execution.>"], subscribe: ["_INBOX.>"] }]);
    const before = await snapshot();
    const { code, stderr } = await natsTrust();
    expect(code).toBe(1);
    expect(stderr).toBe("laneway: invalid_argument (swarm_invalid): the shared swarm-hive user is not signed: hives connect only with minted member credentials\n");
    expect(await snapshot()).toEqual(before);
  });
});
