import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { Kvm } from "@nats-io/kv";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { HiveHubService, MigrationOutcome } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { runCli } from "../../src/cli/main.js";
import { deadStream, GLOBAL_STREAMS, queueStream, stateStream, type Bus } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { startHubHive, type HubHive } from "./bus/hub-fixture.js";

/**
 * The migration RPCs (MigrateState, MigrateQueue, MigrateDead and the
 * streaming Migrate) and `laneway hive migrate`, through Laneway against an
 * operator-mode nats-server: each moves what it should and refuses what it
 * should with the specification's texts and typed errors, a repeat is a
 * no-op, and the hub's mode decides the two mode refusals.
 */

let hive: HubHive;
let laneway: InProcessLaneway | undefined;
/** An unscoped bus on the hub's credential: the legacy processes that left work behind. */
let legacy: Bus;

beforeAll(async () => {
  hive = await startHubHive();
  legacy = await hive.hubBus({ scoped: false });
}, 60_000);

afterAll(async () => {
  const logs = laneway?.logs.join("") ?? "";
  await laneway?.stop();
  await hive?.stop();
  for (const secret of hive?.secrets ?? []) expect(logs).not.toContain(secret);
});

async function restart(env: Record<string, string>): Promise<Client<typeof HiveHubService>> {
  await laneway?.stop();
  laneway = await hive.startInProcess(env);
  return laneway.clients.client(HiveHubService, { token: hive.tokens.admin });
}

async function failure(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (error) {
    return ConnectError.from(error);
  }
  throw new Error("expected the call to fail");
}

const reasonOf = (error: ConnectError) => error.findDetails(ErrorDetailSchema)[0]?.reason;

describe("the hub's mode", () => {
  test("without AGENTIHOOKS_BUS_SCOPED every migration is refused: scoped migration is not enabled", async () => {
    const hub = await restart({});
    for (const call of [
      () => hub.migrateState({ swarm: "rig", bucket: "spoke-work", keys: ["k"] }),
      () => hub.migrateQueue({ swarm: "rig", name: "swarm.rig.ready.eng" }),
      () => hub.migrateDead({ swarm: "rig" }),
    ]) {
      const error = await failure(call);
      expect(error.code).toBe(Code.Aborted);
      expect(reasonOf(error)).toBe("swarm_conflict");
      expect(error.rawMessage).toBe("scoped migration is not enabled");
    }
  });

  test("in bind mode every migration is refused: migration requires privileged provisioning", async () => {
    const hub = await restart({ AGENTIHOOKS_BUS_SCOPED: "1", AGENTIHOOKS_BUS_BIND: "1" });
    const error = await failure(() => hub.migrateDead({ swarm: "rig" }));
    expect(error.code).toBe(Code.PermissionDenied);
    expect(reasonOf(error)).toBe("swarm_forbidden");
    expect(error.rawMessage).toBe("migration requires privileged provisioning");
    const streamed = await failure(async () => {
      for await (const _ of hub.migrate({ migration: { case: "queue", value: { swarm: "rig", name: "swarm.rig.ready.eng" } } }));
    });
    expect(streamed.code).toBe(Code.PermissionDenied);
    expect(streamed.rawMessage).toBe("migration requires privileged provisioning");
  });
});

describe("scoped and provisioning", () => {
  let hub: Client<typeof HiveHubService>;
  beforeAll(async () => {
    hub = await restart({ AGENTIHOOKS_BUS_SCOPED: "1" });
  }, 60_000);

  test("MigrateState moves every retained revision of the named keys; a repeat is a no-op; another key list is refused", async () => {
    const { nc } = await hive.admin();
    const kv = await new Kvm(nc).create("hive-executions", { history: 64 });
    await kv.put("rig-k0", "v0");
    await kv.put("rig-k1", "v1");
    await kv.put("rig-k0", "v2");
    await kv.put("not-owned", "x");
    const moved = await hub.migrateState({ swarm: "rig", bucket: "hive-executions", keys: ["rig-k0", "rig-k1"] });
    expect(moved.progress).toMatchObject({
      copied: 3n,
      skipped: 0n,
      total: 3n,
      complete: true,
      outcome: MigrationOutcome.MOVED,
      targetStream: stateStream("rig", "hive-executions").name,
      sourceStream: "KV_hive-executions",
    });
    // A member of rig reads the moved state with its minted credential (bind mode).
    const member = await hive.memberBus("hive-r", ["rig"]);
    const state = await member.bus.forSwarm("rig").state("hive-executions");
    expect((await state.history("rig-k0")).map((e) => e.string())).toEqual(["v0", "v2"]);
    expect((await state.get("rig-k1"))?.string()).toBe("v1");
    // Revisions continue past the legacy high-water mark (the bucket's last sequence was 4).
    expect((await state.get("rig-k1"))!.revision).toBeGreaterThan(4);
    expect(await kv.get("rig-k0")).toBeNull();
    expect((await kv.get("not-owned"))?.string()).toBe("x");

    const repeat = await hub.migrateState({ swarm: "rig", bucket: "hive-executions", keys: ["rig-k1", "rig-k0"] });
    expect(repeat.progress).toMatchObject({ copied: 0n, complete: true, outcome: MigrationOutcome.ALREADY_COMPLETE });
    const changed = await failure(() => hub.migrateState({ swarm: "rig", bucket: "hive-executions", keys: ["rig-k0"] }));
    expect(changed.code).toBe(Code.Aborted);
    expect(changed.rawMessage).toBe("state migration ownership or source revisions changed");
  });

  test("MigrateQueue moves every undelivered item keeping its attempts; a repeat is a no-op; foreign work and foreign names are refused", async () => {
    const name = "swarm.rig.ready.eng";
    const queue = await legacy.queue(name);
    for (let i = 0; i < 5; i++) await queue.offer({ event: { swarm: "rig", job: i } });
    // One item was delivered once and handed back: its next delivery is its second attempt.
    const [taken] = await queue.takeBatch({ max: 1, maxWaitMs: 2_000 });
    await taken!.nak();
    const moved = await hub.migrateQueue({ swarm: "rig", name });
    expect(moved.progress).toMatchObject({ copied: 5n, total: 5n, complete: true, outcome: MigrationOutcome.MOVED, targetStream: queueStream("rig", "eng").name });
    const member = await hive.memberBus("hive-q", ["rig"]);
    const scoped = await member.bus.forSwarm("rig").queue(name);
    const items = await scoped.takeBatch({ max: 10, maxWaitMs: 2_000 });
    await Promise.all(items.map((item) => item.ack()));
    expect(items.map((item) => item.event?.job).sort()).toEqual([0, 1, 2, 3, 4]);
    expect(items.find((item) => item.event?.job === taken!.event?.job)!.attempt).toBe(2);
    expect(items.filter((item) => item.attempt === 1)).toHaveLength(4);
    expect((await hub.migrateQueue({ swarm: "rig", name })).progress).toMatchObject({ copied: 0n, outcome: MigrationOutcome.ALREADY_COMPLETE });

    const foreignQueue = await legacy.queue("swarm.mixed.ready.ci");
    await foreignQueue.offer({ event: { swarm: "mixed", job: 1 } });
    await foreignQueue.offer({ event: { swarm: "other", job: 2 } });
    const foreign = await failure(() => hub.migrateQueue({ swarm: "mixed", name: "swarm.mixed.ready.ci" }));
    expect(foreign.code).toBe(Code.Aborted);
    expect(foreign.rawMessage).toBe("legacy queue changed or contains work for another swarm");
    const notOurs = await failure(() => hub.migrateQueue({ swarm: "rig", name: "swarm.other.ready.eng" }));
    expect(notOurs.code).toBe(Code.InvalidArgument);
    expect(notOurs.rawMessage).toBe("queue 'swarm.other.ready.eng' does not belong to swarm 'rig'");
  });

  test("MigrateDead moves the swarm's letters only; a repeat is a no-op", async () => {
    const { js, jsm } = await hive.admin();
    // The hub created the new global dead-letter stream at start (no underscore-named one existed).
    expect((await jsm.streams.info(GLOBAL_STREAMS.dead)).config.subjects).toEqual(["dead.>"]);
    for (let i = 0; i < 3; i++) await js.publish("dead.rig", JSON.stringify({ swarm: "rig", id: i }));
    await js.publish("dead.other", JSON.stringify({ swarm: "other", id: 9 }));
    const moved = await hub.migrateDead({ swarm: "rig" });
    expect(moved.progress).toMatchObject({ copied: 3n, total: 3n, outcome: MigrationOutcome.MOVED, targetStream: deadStream("rig").name, sourceStream: GLOBAL_STREAMS.dead });
    const letters = await (await hive.hubBus()).forSwarm("rig").readDeadLetters();
    expect(letters.messages.map((m) => m.event?.id)).toEqual([0, 1, 2]);
    expect((await jsm.streams.info(GLOBAL_STREAMS.dead, { subjects_filter: ">" })).state.subjects).toEqual({ "dead.other": 1 });
    expect((await hub.migrateDead({ swarm: "rig" })).progress).toMatchObject({ copied: 0n, outcome: MigrationOutcome.ALREADY_COMPLETE });
    expect((await hub.migrateDead({ swarm: "empty" })).progress).toMatchObject({ complete: true, outcome: MigrationOutcome.NOTHING_TO_MOVE });
  });

  test("Migrate streams progress and ends with the outcome", async () => {
    const name = "swarm.bulk.ready.plan";
    const queue = await legacy.queue(name);
    for (let i = 0; i < 600; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => queue.offer({ event: { swarm: "bulk", job: i + j } })));
    const messages = [];
    for await (const message of hub.migrate({ migration: { case: "queue", value: { swarm: "bulk", name } } })) messages.push(message.progress!);
    const last = messages.at(-1)!;
    expect(last).toMatchObject({ copied: 600n, total: 600n, complete: true, outcome: MigrationOutcome.MOVED });
    const progress = messages.slice(0, -1);
    expect(progress.length).toBeGreaterThan(0);
    for (const p of progress) expect(p).toMatchObject({ complete: false, outcome: MigrationOutcome.UNSPECIFIED, total: 600n });
    // Counts only grow.
    for (let i = 1; i < messages.length; i++) expect(messages[i]!.copied).toBeGreaterThanOrEqual(messages[i - 1]!.copied);
  });

  test("laneway hive migrate shows progress on stderr and the result on stdout", async () => {
    const name = "swarm.cli.ready.eng";
    const queue = await legacy.queue(name);
    for (let i = 0; i < 300; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => queue.offer({ event: { swarm: "cli", job: i + j } })));
    const run = async (args: string[]) => {
      let stdout = "";
      let stderr = "";
      const code = await runCli(args, {
        env: { LANEWAY_ADDRESS: laneway!.url, LANEWAY_TOKEN: hive.tokens.admin },
        stdout: (t) => void (stdout += t),
        stderr: (t) => void (stderr += t),
        signal: new AbortController().signal,
      });
      return { code, stdout, stderr };
    };
    const moved = await run(["hive", "migrate", "queue", "cli", name]);
    expect(moved.code).toBe(0);
    expect(moved.stderr).toMatch(/^migrate queue \[[#-]{30}\] \d+% \d+\/300 copied \d+ skipped 0$/m);
    expect(moved.stderr).toContain("migrate queue [##############################] 100% 300/300 copied 300 skipped 0\nmigrate queue: complete\n");
    expect(JSON.parse(moved.stdout)).toMatchObject({ copied: "300", total: "300", complete: true, outcome: "MIGRATION_OUTCOME_MOVED" });

    const again = await run(["hive", "migrate", "queue", "cli", name, "--quiet"]);
    expect(again.code).toBe(0);
    expect(again.stderr).toBe("");
    expect(JSON.parse(again.stdout)).toMatchObject({ outcome: "MIGRATION_OUTCOME_ALREADY_COMPLETE" });

    const refused = await run(["hive", "migrate", "state", "cli", "hive-executions", "bad key"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^laneway: invalid_argument/);
    const usage = await run(["hive", "migrate", "frob", "cli"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("migrate state|queue|dead");
  });
});
