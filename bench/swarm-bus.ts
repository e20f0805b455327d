/**
 * The scoped bus: a member's queue offer → take → ack through the bus
 * library against the raw JetStream work-queue equivalent, and the hub's
 * migration of a 100,000-message legacy queue (with its progress display)
 * against a raw copy loop — all against one nats-server started here, all
 * measured in this run.
 *
 * Processes (each its own, so no client CPU is charged to another):
 * - nats-server in operator mode with the hive's accounts (`hive init` in
 *   a temporary data directory), started here;
 * - this orchestrator: the hub's bus (its service credential, scoped,
 *   provisioning) provisions the swarms `bench` and `benchraw` with the
 *   same code, so both lane queues and their `eng` consumers are configured
 *   identically; it mints the member's credential (scoped to both swarms)
 *   exactly as `hive join` does, and fills the legacy queues;
 * - bench/swarm-bus-member.ts: the member, `bus` (the library in bind
 *   mode, swarm `bench`) or `raw` (js.publish / consumer.consume / ackAck,
 *   swarm `benchraw`), 16 offerers in closed loop and one consumer with 64
 *   buffered, every ack confirmed, the same JSON events (about 220 bytes);
 * - bench/swarm-bus-migrate.ts: the hub migrating (`bus`: migrateQueue) or
 *   copying (`raw`) a legacy queue of BENCH_MIGRATION messages (default
 *   100,000).
 *
 * Reported: items acknowledged per second (median of 5 interleaved
 * rounds of BENCH_SECONDS, default 3), the member process's CPU per item,
 * and the ratio to raw (goal ≥ 0.8: the library adds routing and refusal
 * checks, not round trips); migrated messages per second and the ratio to
 * the raw copy. Nothing is asserted; every migration is checked to have
 * moved every message.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { readFile } from "node:fs/promises";
import { EmbeddedNatsServer } from "../src/nats/index.js";
import { hiveBrokerSetup, hiveDirOf, initHive, loadHiveTrust, mintMemberCredential, openSignerStore, renderMemberGrant } from "../src/swarm/index.js";
import { openBus, queueStream } from "../src/swarm-bus/index.js";
import { legacyQueueStreamName } from "../src/swarm-bus/internal.js";
import { NativeKeyPair } from "../src/nats/index.js";
import { benchSeconds, median, printTable, runJson } from "./harness.js";

interface MemberResult {
  acked: number;
  offered: number;
  seconds: number;
  cpuMicros: number;
  failures: number;
}

interface MigrateResult {
  moved: number;
  seconds: number;
  cpuMicros: number;
}

const MEMBER = "bench-member";
const ROUNDS = 5;

export async function swarmBus(): Promise<void> {
  const seconds = benchSeconds(3);
  const migrationCount = Number(process.env.BENCH_MIGRATION ?? 100_000) || 100_000;
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-bench-swarm-bus-"));
  await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  const setup = (await hiveBrokerSetup(dataDir))!;
  const nats = await EmbeddedNatsServer.start({ storeDir: join(dataDir, "nats"), extraConfig: await setup.config(join(dataDir, "nats-jwt")) });
  const trust = (await loadHiveTrust(dataDir))!;
  const hubCreds = trust.credsPaths.hub;
  const hub = await openBus({ backend: "nats", url: nats.url, credentials: hubCreds, scoped: true, bind: false });
  const legacyHub = await openBus({ backend: "nats", url: nats.url, credentials: hubCreds, scoped: false, bind: false });
  try {
    for (const swarm of ["bench", "benchraw", "migrraw"]) await hub.provisionSwarm({ swarm });
    const record = await openSignerStore(undefined, hiveDirOf(dataDir)).read();
    const minted = await mintMemberCredential({
      memberId: MEMBER,
      grant: renderMemberGrant(MEMBER, { kind: "scoped", swarms: ["bench", "benchraw"] }),
      signingKey: NativeKeyPair.fromSeed(record.signingKey.reveal()),
      hiveAccount: trust.hiveAccount.getPublicKey(),
      now: Date.now(),
      lifetimeMs: 3_600_000,
    });
    const memberCreds = join(dataDir, "member.creds");
    await writeFile(memberCreds, minted.creds, { mode: 0o600 });

    // Offer → take → ack, interleaved rounds.
    const member = (mode: "bus" | "raw", secs: number) =>
      runJson<MemberResult>("bench/swarm-bus-member.ts", [
        JSON.stringify({ mode, url: nats.url, credentials: memberCreds, memberId: MEMBER, swarm: mode === "bus" ? "bench" : "benchraw", lane: "eng", seconds: secs, producers: 16, batch: 64, bodyBytes: 150 }),
      ]);
    await member("raw", 1);
    await member("bus", 1);
    const runs: Record<"bus" | "raw", MemberResult[]> = { bus: [], raw: [] };
    for (let round = 0; round < ROUNDS; round++) {
      for (const mode of round % 2 === 0 ? (["raw", "bus"] as const) : (["bus", "raw"] as const)) runs[mode].push(await member(mode, seconds));
    }
    const rate = (r: MemberResult) => r.acked / r.seconds;
    const rawRate = median(runs.raw.map(rate));
    const rows = (["raw", "bus"] as const).map((mode) => {
      const rates = runs[mode].map(rate);
      const cpu = median(runs[mode].map((r) => r.cpuMicros / Math.max(1, r.acked)));
      const failures = runs[mode].reduce((n, r) => n + r.failures, 0);
      return [
        mode === "raw" ? "raw JetStream work queue (publish / consume / ackAck)" : "scoped bus, member in bind mode (offer / consume / ack)",
        median(rates).toFixed(0),
        rates.map((r) => r.toFixed(0)).join(" "),
        cpu.toFixed(1),
        String(failures),
        (median(rates) / rawRate).toFixed(3),
      ];
    });
    console.log(`\nswarm-bus: member queue offer → take → ack (16 offerers, 64 buffered, confirmed acks; ${seconds}s per run, medians of ${ROUNDS} interleaved rounds)`);
    printTable(["path", "items/s", "rounds", "member CPU µs/item", "failures", "ratio to raw"], rows);

    // Migration of a legacy queue, the bus against a raw copy loop.
    const { nc, js, jsm } = await adminConnection(nats.url, hubCreds);
    const fill = async (swarm: string) => {
      const name = `swarm.${swarm}.ready.eng`;
      await legacyHub.queue(name);
      const payload = (n: number) => JSON.stringify({ swarm, kind: "bench-work", job: n, body: "x".repeat(150) });
      let next = 0;
      await Promise.all(
        Array.from({ length: 256 }, async () => {
          while (next < migrationCount) await js.publish(name, payload(next++));
        }),
      );
      return legacyQueueStreamName(name);
    };
    console.log(`\nswarm-bus: filling two legacy queues with ${migrationCount.toLocaleString("en")} messages each…`);
    await fill("migrraw");
    await fill("migr");
    const migrate = (mode: "bus" | "raw") =>
      runJson<MigrateResult>("bench/swarm-bus-migrate.ts", [JSON.stringify({ mode, url: nats.url, credentials: hubCreds, swarm: mode === "bus" ? "migr" : "migrraw", count: migrationCount })]);
    const rawCopy = await migrate("raw");
    const migrated = await migrate("bus");
    const moved = async (swarm: string) => (await jsm.consumers.info(queueStream(swarm, "eng").name, "eng")).num_pending;
    const check = [await moved("migrraw"), await moved("migr")];
    const rawCopyRate = rawCopy.moved / rawCopy.seconds;
    console.log(`\nswarm-bus: migration of ${migrationCount.toLocaleString("en")} queued messages (legacy queue → the swarm's lane queue)`);
    printTable(
      ["path", "messages", "seconds", "messages/s", "hub CPU µs/message", "in the lane queue after", "ratio to raw copy"],
      [
        ["raw copy loop (pull 256, publish copies, ackAck)", String(rawCopy.moved), rawCopy.seconds.toFixed(2), rawCopyRate.toFixed(0), (rawCopy.cpuMicros / rawCopy.moved).toFixed(1), String(check[0]), "1.000"],
        [
          "bus.migrateQueue (mark, checks, resumable)",
          String(migrated.moved),
          migrated.seconds.toFixed(2),
          (migrated.moved / migrated.seconds).toFixed(0),
          (migrated.cpuMicros / migrated.moved).toFixed(1),
          String(check[1]),
          (migrated.moved / migrated.seconds / rawCopyRate).toFixed(3),
        ],
      ],
    );
    if (check[1] !== migrationCount) console.log(`WARNING: the lane queue holds ${check[1]} messages after the migration, not ${migrationCount}`);
    await nc.close();
  } finally {
    await hub.close();
    await legacyHub.close();
    await nats.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function adminConnection(url: string, creds: string) {
  const nc = await connect({ servers: url, authenticator: credsAuthenticator(await readFile(creds)), reconnect: false, noAsyncTraces: true, name: "bench-orchestrator" });
  return { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
}
