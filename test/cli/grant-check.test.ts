import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { controllerGrant, covers, renderMemberGrant } from "../../src/swarm/index.js";
import { ANTONCORE_FILES } from "../../src/cli/grant-check/antoncore-users.js";
import { usersYaml, yamlList as list, type YamlUser } from "../helpers/nats-users-yaml.js";

/**
 * The grant check against antoncore-style checkouts (fixtures written by
 * the test): matching grants, a subject granted on one side only (each
 * side), the retired hive user, a missing controller user, a values file
 * whose SWARM account lacks swarm-hive, and the no-shared-hive-user rule.
 * Run through `laneway hive check-grants`, as CI runs it.
 */

const checkouts: string[] = [];
afterAll(async () => {
  for (const dir of checkouts) await rm(dir, { recursive: true, force: true });
});

const controller = controllerGrant();
const member = renderMemberGrant("hive", { kind: "unscoped" });
const sharedHive = {
  publish: member.publishAllow.map((s) => (s === "slots.*.hive" ? "slots.*.*" : s)),
  subscribe: member.subscribeAllow.map((s) => (s === "_INBOX.hive.>" ? "_INBOX.>" : s)),
};

const operatorValues = ["config:", "  jetstream:", "    enabled: true", "  resolver:", "    type: full", ""].join("\n");

function accountsValues(users: readonly YamlUser[]): string {
  return [
    "config:",
    "  merge:",
    "    accounts:",
    "      SYS:",
    "        users: [{user: sys}]",
    "      SWARM:",
    "        jetstream: enabled",
    "        users:",
    ...users.map((u) =>
      [`          - user: ${u.name}`, "            permissions:", `              publish: [${u.publish.map((s) => `"${s}"`).join(", ")}]`, "              subscribe:", "                allow:", list(u.subscribe, "                  ")].join("\n"),
    ),
    "",
  ].join("\n");
}

async function checkout(files: { users?: string; values: string }): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "antoncore-"));
  checkouts.push(dir);
  await mkdir(join(dir, "k8s/values-overlays/agentihooks-swarm-nats"), { recursive: true });
  await writeFile(join(dir, ANTONCORE_FILES.values), files.values);
  if (files.users !== undefined) await writeFile(join(dir, ANTONCORE_FILES.users), files.users);
  return dir;
}

async function check(dir: string, ...extra: string[]): Promise<{ code: number; lines: string[] }> {
  let stdout = "";
  const code = await runCli(["hive", "check-grants", "--antoncore", dir, ...extra], {
    env: {},
    stdout: (t) => void (stdout += t),
    stderr: () => {},
    signal: new AbortController().signal,
  });
  return { code, lines: stdout.trimEnd().split("\n") };
}

const controllerUser: YamlUser = { name: "swarm-controller", publish: controller.publishAllow, subscribe: controller.subscribeAllow };
const others: YamlUser[] = [
  { name: "swarm-github-webhook", publish: ["swarm.*.events.github.>"], subscribe: ["_INBOX.>"] },
  { name: "swarm-ledger", publish: ["$JS.API.>"], subscribe: ["_INBOX.>"] },
];
const controllerLine = `The controller NATS grants match antoncore: ${controller.publishAllow.length} publish and ${controller.subscribeAllow.length} subscribe subjects.`;
const retiredLine = "The antoncore swarm-hive user is retired, so hives connect only with minted member credentials.";

describe("operator mode (users from users.yaml)", () => {
  test("matching grants with the hive user retired: the notice, the controller line, exit 0", async () => {
    const dir = await checkout({ values: operatorValues, users: usersYaml([controllerUser, ...others], ["swarm-hive"]) });
    expect(await check(dir)).toEqual({ code: 0, lines: [retiredLine, controllerLine] });
  });

  test("a subject granted only by antoncore prints one error naming the antoncore user and its file", async () => {
    const dir = await checkout({ values: operatorValues, users: usersYaml([{ ...controllerUser, publish: [...controller.publishAllow, "swarm.*.audit.>"] }]) });
    expect(await check(dir)).toEqual({
      code: 1,
      lines: [retiredLine, "::error::publish allow swarm.*.audit.> is granted only by the antoncore swarm-controller user (k8s/values-overlays/agentihooks-swarm-nats/users.yaml)."],
    });
  });

  test("a subject granted only by Laneway prints one error naming Laneway's grant", async () => {
    const dir = await checkout({ values: operatorValues, users: usersYaml([{ ...controllerUser, subscribe: controller.subscribeAllow.filter((s) => s !== "dead.>") }]) });
    expect(await check(dir)).toEqual({
      code: 1,
      lines: [retiredLine, "::error::subscribe allow dead.> is granted only by Laneway's controller grant (src/swarm/member-grant.ts)."],
    });
  });

  test("a missing controller user fails the check", async () => {
    const dir = await checkout({ values: operatorValues, users: usersYaml(others) });
    expect(await check(dir)).toEqual({
      code: 1,
      lines: [retiredLine, "::error::The swarm NATS grants cannot be read (ValueError: the SWARM account has no swarm-controller user)"],
    });
  });

  test("a hive user that still exists is compared (with its _INBOX.<user>.> read as _INBOX.>)", async () => {
    const hive: YamlUser = { name: "swarm-hive", publish: sharedHive.publish, subscribe: sharedHive.subscribe };
    const dir = await checkout({ values: operatorValues, users: usersYaml([hive, controllerUser]) });
    expect(await check(dir)).toEqual({
      code: 0,
      lines: [`The hive member NATS grants match antoncore: ${sharedHive.publish.length} publish and ${sharedHive.subscribe.length} subscribe subjects.`, controllerLine],
    });
  });
});

describe("accounts mode (users in the values file's SWARM account)", () => {
  const hive: YamlUser = { name: "swarm-hive", publish: sharedHive.publish, subscribe: sharedHive.subscribe };

  test("matching hive and controller users", async () => {
    const dir = await checkout({ values: accountsValues([hive, controllerUser]) });
    const result = await check(dir);
    expect(result.code).toBe(0);
    expect(result.lines.at(-1)).toBe(controllerLine);
  });

  test("a SWARM account without swarm-hive cannot be read", async () => {
    const dir = await checkout({ values: accountsValues([controllerUser]) });
    expect(await check(dir)).toEqual({
      code: 1,
      lines: ["::error::The swarm NATS grants cannot be read (ValueError: the SWARM account has no swarm-hive user)"],
    });
  });

  test("a hive subject granted only by antoncore names the values file", async () => {
    const dir = await checkout({ values: accountsValues([{ ...hive, publish: [...hive.publish, "swarm.*.queue.>"] }, controllerUser]) });
    const result = await check(dir);
    expect(result.code).toBe(1);
    expect(result.lines).toContain(
      "::error::publish allow swarm.*.queue.> is granted only by the antoncore swarm-hive user (k8s/values-overlays/agentihooks-swarm-nats/values.yaml).",
    );
  });
});

describe("the no-shared-hive-user rule", () => {
  test("passes when no swarm-hive user exists and nobody publishes on swarm.*.execution.>", async () => {
    const dir = await checkout({ values: operatorValues, users: usersYaml([controllerUser, ...others], ["swarm-hive"]) });
    const result = await check(dir, "--no-shared-hive-user");
    expect(result.code).toBe(0);
    expect(result.lines.at(-1)).toBe("No shared hive user remains: no antoncore user is swarm-hive or may publish on swarm.*.execution.>.");
  });

  test("fails when swarm-hive returns or a user may publish on the spoke execution subject", async () => {
    const hive: YamlUser = { name: "swarm-hive", publish: sharedHive.publish, subscribe: sharedHive.subscribe };
    const wide: YamlUser = { name: "swarm-ledger", publish: ["swarm.>"], subscribe: ["_INBOX.>"] };
    const dir = await checkout({ values: operatorValues, users: usersYaml([hive, controllerUser, wide]) });
    const result = await check(dir, "--no-shared-hive-user");
    expect(result.code).toBe(1);
    expect(result.lines).toContain("::error::The shared swarm-hive user is defined in k8s/values-overlays/agentihooks-swarm-nats/users.yaml: hives connect only with minted member credentials.");
    expect(result.lines).toContain(
      "::error::The swarm-ledger user (k8s/values-overlays/agentihooks-swarm-nats/users.yaml) may publish on the spoke execution subject swarm.*.execution.> (publish allow swarm.>).",
    );
    expect(result.lines.filter((l) => l.includes("swarm-hive user (k8s") && l.includes("spoke execution"))).toHaveLength(1);
  });

  test.each([
    ["swarm.*.execution.>", true],
    ["swarm.>", true],
    [">", true],
    ["swarm.*.>", true],
    ["swarm.rig.execution.>", false],
    ["swarm.*.events.>", false],
    ["swarm.*.execution.started", false],
  ])("%s covers swarm.*.execution.>: %s", (permission, expected) => {
    expect(covers(permission, "swarm.*.execution.>")).toBe(expected);
  });
});

test.each([
  ["an alias", "config:\n  jetstream: &js {enabled: true}\n  again: *js\n", 2],
  ["a tag", "config:\n  resolver: !!map {type: full}\n", 2],
  ["a block scalar (a bare > is a subject to its author)", "config:\n  subjects:\n    - >\n", 3],
  ["a second document", "config:\n  jetstream: {enabled: true}\n---\nconfig: {}\n", 3],
  ["a duplicate key", "config: {}\nconfig: {}\n", 2],
])("YAML with %s is refused with its line, not read", async (_, values, line) => {
  const dir = await checkout({ values });
  const result = await check(dir);
  expect(result.code).toBe(1);
  expect(result.lines).toHaveLength(1);
  expect(result.lines[0]).toMatch(new RegExp(`^::error::The swarm NATS grants cannot be read \\(ValueError: k8s/values-overlays/agentihooks-swarm-nats/values\\.yaml: line ${line}: `));
});

test("a file that cannot be read is reported, not guessed", async () => {
  const dir = await checkout({ values: "config:\n  accounts: &anchor\n" });
  const result = await check(dir);
  expect(result.code).toBe(1);
  expect(result.lines[0]).toMatch(/^::error::The swarm NATS grants cannot be read \(ValueError: k8s\/values-overlays\/agentihooks-swarm-nats\/values\.yaml: line 2: /);
  const missing = await checkout({ values: operatorValues });
  expect((await check(missing)).lines[0]).toBe(
    "::error::The swarm NATS grants cannot be read (ValueError: k8s/values-overlays/agentihooks-swarm-nats/users.yaml cannot be read (ENOENT))",
  );
});
