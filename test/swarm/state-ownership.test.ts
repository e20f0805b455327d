import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { HiveHubService, MigrationOutcome } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import { BusResourceMissingError, stateStream } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";
import { joinMember, type JoinedMember } from "./joined-member.js";

/**
 * A new swarm's state while a legacy bucket holds other swarms' entries.
 * The hub does not create a scoped state stream over a `KV_<bucket>` that
 * holds entries (the specification's rule), so a member of a new swarm
 * finds no state stream: it is told which legacy bucket is in the way and
 * which command resolves it, and the hub's log says the same. For a swarm
 * with no legacy keys that command is an explicit "own this state with no
 * legacy keys" step, recorded like a migration (a complete mark). Naming a
 * key the legacy bucket does not hold is refused instead of answering
 * MOVED with nothing copied.
 */

let hive: HubHive;
let laneway: InProcessLaneway;
let scratch: string;
let member: JoinedMember;
const hub = () => laneway.clients.client(HiveHubService, { token: hive.tokens.admin });

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    env: { LANEWAY_ADDRESS: laneway.url, LANEWAY_TOKEN: hive.tokens.admin },
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "laneway-state-ownership-"));
  hive = await startHubHive();
  // Another swarm's legacy state: KV_spoke-work holds an entry.
  const { nc } = await hive.admin();
  const kv = await new Kvm(nc).create("spoke-work", { history: 64 });
  await kv.put("veteran-claim", "held");
  laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
  await hub().scope({ swarms: ["fresh"] });
  member = await joinMember(laneway, hive.tokens.admin, scratch, "hive-fresh", ["fresh"]);
}, 120_000);

afterAll(async () => {
  await member?.close();
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await hive?.stop();
  await rm(scratch, { recursive: true, force: true });
  expect(logs).not.toContain(member?.credential.creds ?? "-----BEGIN");
});

test("the member of a new swarm is told which legacy bucket keeps its state stream from being created, and how to resolve it", async () => {
  const rig = (await member.bus()).forSwarm("fresh");
  // Every other state stream exists; spoke-work waits for ownership.
  await rig.state("hive-presence");
  const error = await rig.state("spoke-work").catch((e: unknown) => e);
  expect(error).toBeInstanceOf(BusResourceMissingError);
  expect((error as Error).message).toBe(
    "the 'spoke-work' state stream of swarm 'fresh' does not exist. The hub creates it, but not while the legacy bucket KV_spoke-work holds entries: " +
      "then the hub operator moves the swarm's keys with laneway hive migrate state fresh spoke-work <key>..., or, when the swarm has no legacy keys, runs laneway hive migrate state fresh spoke-work --no-legacy-keys",
  );
  const line = await waitFor(
    () =>
      laneway.logs
        .flatMap((chunk) => chunk.split("\n"))
        .filter((l) => l.includes("a swarm's state stream was not created over legacy state"))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => l.swarm === "fresh"),
    { what: "the hub's log line" },
  );
  expect(line).toMatchObject({ problem: "legacy state requires explicit key ownership", buckets: "spoke-work", legacyBuckets: "KV_spoke-work" });
  expect(String(line.resolve)).toContain("laneway hive migrate state fresh <bucket> <key>... (or --no-legacy-keys)");
});

test("a key the legacy bucket does not hold is refused, not answered MOVED with nothing copied", async () => {
  const refused = await cli(["hive", "migrate", "state", "fresh", "spoke-work", "no-such-key", "--quiet"]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toBe(
    "laneway: aborted (swarm_conflict): legacy key 'no-such-key' has no revision in KV_spoke-work; name keys the legacy bucket holds, or take ownership of the bucket with no legacy keys (laneway hive migrate state <swarm> <bucket> --no-legacy-keys)\n",
  );
  // Neither keys nor the flag, or both: a contract violation.
  for (const request of [{ keys: [] as string[] }, { keys: ["veteran-claim"], noLegacyKeys: true }]) {
    const error = ConnectError.from(await hub().migrateState({ swarm: "fresh", bucket: "spoke-work", ...request }).catch((e: unknown) => e));
    expect(error.code).toBe(Code.InvalidArgument);
    expect(error.findDetails(ErrorDetailSchema)[0]?.reason).toBe("swarm_invalid");
  }
});

test("hive migrate state --no-legacy-keys gives the swarm its state stream, recorded like a migration; the legacy bucket is untouched", async () => {
  const owned = await cli(["hive", "migrate", "state", "fresh", "spoke-work", "--no-legacy-keys"]);
  expect(owned.code, owned.stderr).toBe(0);
  expect(owned.stderr).toBe("migrate state: owned with no legacy keys\n");
  expect(JSON.parse(owned.stdout)).toMatchObject({ complete: true, outcome: "MIGRATION_OUTCOME_OWNED", targetStream: stateStream("fresh", "spoke-work").name, sourceStream: "KV_spoke-work" });

  const state = await (await member.bus()).forSwarm("fresh").state("spoke-work");
  const revision = await state.create({ key: "fresh-claim", value: "mine" });
  expect((await state.get("fresh-claim"))!.revision).toBe(revision);
  const { nc } = await hive.admin();
  const kv = await new Kvm(nc).open("spoke-work");
  expect(new TextDecoder().decode((await kv.get("veteran-claim"))!.value)).toBe("held");

  // Repeated: already complete. Keys afterwards: an ownership change, refused.
  const repeat = await hub().migrateState({ swarm: "fresh", bucket: "spoke-work", noLegacyKeys: true });
  expect(repeat.progress?.outcome).toBe(MigrationOutcome.ALREADY_COMPLETE);
  await expect(hub().migrateState({ swarm: "fresh", bucket: "spoke-work", keys: ["veteran-claim"] })).rejects.toThrow("state migration ownership or source revisions changed");
});
