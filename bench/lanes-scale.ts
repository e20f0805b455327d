/**
 * Lanes scaling out: publish + claim + ack throughput through one lanes
 * replica (`laneway serve --cores lanes`) and through two, with the same
 * load generator in the same run, against one nats-server started here and
 * beside one full instance (which serves nothing in these runs).
 *
 * Processes: nats-server; the full instance; replicas A and B; the load
 * generator (bench/lanes-scale-load.ts), one process per run, spreading its
 * publisher and worker loops evenly over the replicas of the run; its
 * publishers keep at most 256 records published and not yet acknowledged,
 * so every run publishes about what it acknowledges.
 *
 * On a 2-core machine the load generator and nats-server compete with the
 * replicas, so the wall-clock rate of two replicas cannot double. What
 * scales is read from CPU: each process's CPU time (from /proc) per item
 * acknowledged, and the share of a core each replica used (CPU per item ×
 * items/s). With a free core per replica, a run's rate could grow until its
 * busiest replica fills its core: rate ÷ that share. The goal is that two
 * replicas do at least 1.8× the work of one given a core each: per-item CPU
 * that does not grow with the number of replicas.
 *
 * BENCH_SECONDS per run (default 4), BENCH_ROUNDS rounds (default 3),
 * interleaved (one replica, two replicas, ...); medians. Nothing is asserted.
 *
 * BENCH_CPU_PROF=<dir> runs the replicas under `node --cpu-prof` (one
 * directory each, `<dir>/replica-a` and `<dir>/replica-b`) and prints where
 * each replica's CPU went in the runs with one and with two replicas, by
 * category and by function.
 */
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { benchSeconds, median, printTable, processCpuUs, runJson, startLanesBench, startListening } from "./harness.js";
import { newestProfile, summarizeProfile, type ProfileWindow } from "./lanes-work-profile.js";

interface LoadResult {
  published: number;
  acked: number;
  seconds: number;
  errors: number;
  firstError?: string;
  cpuMicros: number;
}

interface Run {
  replicas: number;
  acked: number;
  published: number;
  seconds: number;
  /** CPU µs over the run, per replica (A, B), of nats-server, of the full instance, of the load generator. */
  replicaCpu: number[];
  natsCpu: number;
  fullCpu: number;
  loadCpu: number;
  /** Messages all Laneway connections (named laneway…) sent to and received from nats-server over the run. */
  brokerSent: number;
  brokerReceived: number;
  /** Bytes those connections received from nats-server over the run. */
  brokerReceivedBytes: number;
}

const NAMESPACE = "scale";
const LANE = "jobs";
const GROUP = "workers";
const PUBLISHERS = 4;
const WORKERS = 4;
const BATCH = 32;

export async function lanesScale(): Promise<void> {
  const seconds = benchSeconds(4);
  const rounds = Math.max(1, Number(process.env.BENCH_ROUNDS) || 3);
  const started = Date.now();
  const systems = await startLanesBench("scale", {
    namespace: NAMESPACE,
    lanes: [{ id: LANE, owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"], groups: { [GROUP]: ["beacon"] } }],
    max_pending: 512,
    max_ledger: 512,
  });
  const { tokens, nats, laneway: full, monitor } = systems;
  /** Messages of every open Laneway connection (the replicas', the full instance's), from the monitoring port. */
  const brokerCounts = async () => {
    const connz = (await (await fetch(`${monitor}/connz?limit=4096`)).json()) as {
      connections?: { name?: string; in_msgs: number; out_msgs: number; out_bytes: number }[];
    };
    const mine = (connz.connections ?? []).filter((c) => (c.name ?? "").startsWith("laneway"));
    return { sent: mine.reduce((s, c) => s + c.in_msgs, 0), received: mine.reduce((s, c) => s + c.out_msgs, 0), receivedBytes: mine.reduce((s, c) => s + c.out_bytes, 0) };
  };
  const profileRoot = process.env.BENCH_CPU_PROF ? resolve(process.env.BENCH_CPU_PROF) : undefined;
  const replica = async (name: string) => {
    const profileDir = profileRoot === undefined ? undefined : join(profileRoot, name);
    if (profileDir !== undefined) await mkdir(profileDir, { recursive: true });
    return startListening(
      "src/cli/main.ts",
      ["serve", "--cores", "lanes", "--listen", "127.0.0.1:0", "--data-dir", join(systems.dir, name), "--nats-url", nats.url, "--lanes-config", join(systems.dir, "lanes.json")],
      tokens,
      profileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profileDir}`],
    );
  };
  const replicas = [await replica("replica-a"), await replica("replica-b")];
  let tags = 0;
  const windows: ProfileWindow[] = [];
  const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
  async function measure(count: number, runSeconds = seconds, record = false): Promise<Run> {
    const cpu = async () => ({
      replicas: await Promise.all(replicas.map((r) => processCpuUs(r.child.pid))),
      nats: await processCpuUs(nats.pid),
      full: await processCpuUs(full.child.pid),
    });
    const countsBefore = await brokerCounts();
    const before = await cpu();
    const startUs = monotonicUs();
    const result = await runJson<LoadResult>("bench/lanes-scale-load.ts", [
      JSON.stringify({
        urls: replicas.slice(0, count).map((r) => r.url),
        publisherToken: tokens.ATLAS_LANE_TOKEN,
        workerToken: tokens.BEACON_LANE_TOKEN,
        lane: LANE,
        group: GROUP,
        tag: `t${tags++}`,
        publishers: PUBLISHERS,
        workers: WORKERS,
        batch: BATCH,
        seconds: runSeconds,
      }),
    ]);
    if (record) windows.push({ label: `${count} replica${count === 1 ? "" : "s"}`, startUs, endUs: monotonicUs() });
    const after = await cpu();
    const countsAfter = await brokerCounts();
    if (result.errors > 0) throw new Error(`lanes-scale with ${count} replica(s): ${result.errors} errors (first: ${result.firstError})`);
    return {
      replicas: count,
      acked: result.acked,
      published: result.published,
      seconds: result.seconds,
      replicaCpu: after.replicas.map((c, i) => c - before.replicas[i]!),
      natsCpu: after.nats - before.nats,
      fullCpu: after.full - before.full,
      loadCpu: result.cpuMicros,
      brokerSent: countsAfter.sent - countsBefore.sent,
      brokerReceived: countsAfter.received - countsBefore.received,
      brokerReceivedBytes: countsAfter.receivedBytes - countsBefore.receivedBytes,
    };
  }

  try {
    // Warm-up: JIT, connections, the group's slots.
    await measure(1, 1);
    await measure(2, 1);
    const runs: Run[] = [];
    for (let round = 0; round < rounds; round++) for (const count of [1, 2]) runs.push(await measure(count, seconds, true));
    const elapsed = (Date.now() - started) / 1000;

    const rows: string[][] = [];
    const projected = new Map<number, number>();
    for (const count of [1, 2]) {
      const list = runs.filter((r) => r.replicas === count);
      const items = list.reduce((s, r) => s + r.acked, 0);
      const rate = median(list.map((r) => r.acked / r.seconds));
      const perItem = (cpu: number) => (cpu / items).toFixed(0);
      const replicaCpu = [0, 1].map((i) => list.reduce((s, r) => s + r.replicaCpu[i]!, 0));
      const replicaPerItem = (replicaCpu[0]! + replicaCpu[1]!) / items;
      // Share of a core each replica used over the runs (CPU time / wall time), and the rate with a free core for the busiest.
      const wall = list.reduce((s, r) => s + r.seconds, 0) * 1e6;
      const busiest = Math.max(...replicaCpu.slice(0, count).map((c) => c / wall));
      const withCores = median(list.map((r) => r.acked / r.seconds)) / busiest;
      projected.set(count, withCores);
      rows.push([
        String(count),
        rate.toFixed(0),
        median(list.map((r) => r.published / r.seconds)).toFixed(0),
        replicaPerItem.toFixed(0),
        replicaCpu
          .slice(0, count)
          .map((c) => perItem(c))
          .join(" + "),
        replicaCpu
          .slice(0, count)
          .map((c) => (c / wall).toFixed(2))
          .join(" + "),
        perItem(list.reduce((s, r) => s + r.natsCpu, 0)),
        perItem(list.reduce((s, r) => s + r.loadCpu, 0)),
        perItem(list.reduce((s, r) => s + r.fullCpu, 0)),
        `${(list.reduce((s, r) => s + r.brokerSent, 0) / items).toFixed(1)} / ${(list.reduce((s, r) => s + r.brokerReceived, 0) / items).toFixed(1)}`,
        (list.reduce((s, r) => s + r.brokerReceivedBytes, 0) / items / 1024).toFixed(1),
        withCores.toFixed(0),
      ]);
    }
    console.log(`\nLanes scale-out: publish + claim + ack through lanes replicas, ${rounds} rounds of ${seconds}s, medians; ${PUBLISHERS} publisher and ${WORKERS} worker loops, ${BATCH} records a call\n`);
    printTable(
      [
        "replicas",
        "acked items/s",
        "published/s",
        "replica CPU µs/item (all)",
        "per replica µs/item",
        "core share per replica",
        "nats-server µs/item",
        "load generator µs/item",
        "full instance µs/item",
        "broker msgs sent / received per item",
        "KiB received per item",
        "items/s with a free core per replica",
      ],
      rows,
    );
    const scale = projected.get(2)! / projected.get(1)!;
    console.log(
      [
        "",
        `Rounds (acked items/s): ${runs.map((r) => `${r.replicas}:${(r.acked / r.seconds).toFixed(0)}`).join(", ")}.`,
        "CPU µs/item: a process's CPU time (user + system, /proc) over the runs divided by the items acknowledged in them.",
        "core share: a replica's CPU time over the runs' wall time. With a free core per replica a run's rate could grow",
        "until its busiest replica fills its core: acked items/s ÷ the busiest share.",
        "broker msgs per item: messages all Laneway connections sent to nats-server (requests, publishes, group signals) and",
        "received from it (answers, lane watcher notifications, ledger watch updates), per item acknowledged.",
        `Goal: two replicas ≥ 1.8× one given a core each: ${scale.toFixed(2)}× (${scale >= 1.8 ? "met" : "missed"}).`,
        `(lanes-scale took ${elapsed.toFixed(0)} s)`,
      ].join("\n"),
    );
    if (profileRoot !== undefined) {
      for (const [i, name] of ["replica-a", "replica-b"].entries()) {
        await replicas[i]!.stop();
        const path = await newestProfile(join(profileRoot, name), started);
        console.log(`\n${name} (${i === 0 ? "serves in every run" : "serves in the runs with two replicas"}):\n`);
        if (path === undefined) console.log(`(no .cpuprofile was written to ${join(profileRoot, name)})`);
        else await summarizeProfile(path, i === 0 ? windows : windows.filter((w) => w.label !== "1 replica"), 30);
      }
    }
  } finally {
    for (const r of replicas) await r.stop();
    await systems.stop();
  }
}
