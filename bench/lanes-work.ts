/**
 * Lanes work: claim + ack throughput of one work group through Laneway —
 * single Claim/Ack calls, and the participant library with batch claims
 * and settlements — against BullMQ on the local Redis server doing the same
 * work (add, process, complete) and against a raw JetStream pull consumer
 * (fetch + ack), at 1, 16 and 64 concurrent workers, all in this run.
 *
 * Processes (each its own, so no client CPU is charged to a server):
 * - nats-server (JetStream, a temporary store, a monitoring port), started
 *   here; Laneway and the raw baseline use it;
 * - `laneway serve --nats-url <that server> --lanes-config` with one lane,
 *   `jobs`, whose group `workers` has one member (beacon); atlas publishes;
 * - bench/lanes-work-laneway.ts: the Laneway workers (`single`: W loops of
 *   Claim then Ack on the generated client; `participant`: the participant
 *   library with concurrency W), Connect binary over HTTP/1.1;
 * - bench/lanes-work-raw.ts: a durable pull consumer on a stream created
 *   with the lane stream's own configuration (copied from the broker):
 *   `fetch 1`: W loops of fetch one + confirmed ack (the equivalent of the
 *   Claim/Ack loops); `batch`: fetch as many as there are free handler
 *   slots, W handlers each confirming its own ack (the equivalent of the
 *   participant);
 * - bench/lanes-work-bullmq.ts: a BullMQ 6 Worker with concurrency W on the
 *   Redis server at 127.0.0.1:6379 (keys under a prefix unique to this run,
 *   removed at the end; nothing else in Redis is touched).
 *
 * Every run works a fixed backlog added before it starts, untimed: N work
 * records published with PublishBatch (Laneway), N messages published to
 * the raw stream, N jobs added with addBulk (BullMQ). The helper times from
 * its first claim to its last acknowledgement. N is the system's own rate
 * at that W (measured in a warm-up, then the median so far) times
 * BENCH_SECONDS, so every run lasts about that long and ends with nothing
 * left over (no lease, pending ack or active job survives into the next
 * run). Rounds interleave every system and W; medians are reported.
 *
 * The lane's bounds are the most favourable the specification allows for
 * throughput: an acknowledgement occupies a ledger slot for `ack_retention`
 * (minimum 1 s) and a group has at most `max_ledger` (maximum 512) slots, so
 * one group can complete at most 512 items a second, whatever the speed of
 * everything else; `max_pending` is 512 so that live leases never limit.
 * BullMQ keeps completed jobs for 1 s too (`removeOnComplete: {age: 1}`).
 * Durability differs: JetStream writes to files (acknowledged before
 * fsync, FACTS.md), this Redis has no persistence.
 *
 * Checks: each helper verifies every item was handled exactly once and
 * every acknowledgement confirmed; afterwards the Laneway group's
 * inspection must show the cursor at the run's last record and no leased,
 * waiting or released delivery; the raw consumer must have nothing pending,
 * unacknowledged or redelivered; the BullMQ queue nothing waiting, active,
 * delayed or failed.
 *
 * Where the time goes: the Laneway, nats-server and Redis processes' CPU
 * (utime + stime from /proc) per item; from nats-server's monitoring port,
 * the messages Laneway's connection (named `laneway`) sent and received per
 * item (each sent message a request or an acknowledged publish: one broker
 * round trip), the JetStream API requests per item (`/jsz`) and the group
 * ledger writes (successful compare-and-sets: the ledger bucket's stream
 * sequence) per item; the ledger's entries and bytes at the end of a run;
 * claims refused for capacity; the participant's ClaimBatch and AckBatch
 * calls per item; the consumers alive on the lane stream after a run. A CAS conflict needs a second writer
 * process: with one Laneway process the group actor serializes every write
 * of the group, so none can occur here (a conflict would show as ledger
 * writes retried, i.e. broker messages per item above the counted writes).
 * `BENCH_CPU_PROF=<dir>` runs Laneway under `node --cpu-prof`, leaves the
 * profile in `<dir>` and prints its self time by category during the
 * measured Laneway runs only (bench/lanes-work-profile.ts).
 *
 * BENCH_SECONDS (default 3) sets the length of a run; BENCH_ROUNDS
 * (default 3) the rounds. Nothing is asserted.
 */
import { randomBytes } from "node:crypto";
import { createClient, type Client } from "@connectrpc/connect";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { DeliveryState, LaneService, RecordKind } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";
import { streamName } from "../src/lanes/index.js";
import { groupBucket, groupKey } from "../src/lanes/names.js";
import { benchPayload, benchSeconds, median, printTable, processCpuUs, runJson, startLanesBench } from "./harness.js";
import { newestProfile, summarizeProfile, type ProfileWindow } from "./lanes-work-profile.js";

const NAMESPACE = "bench";
const LANE = "jobs";
const GROUP = "workers";
const SCHEMA = "job-v1";
const PAYLOAD_BYTES = 200;
const ACK_RETENTION_S = 1;
const MAX_LEDGER = 512;
const RAW_STREAM = "BENCH-WORK-RAW";
const RAW_SUBJECTS = "bench.work";
const RAW_CONSUMER = "bench-workers";
const REDIS = { host: "127.0.0.1", port: 6379 };
const workerCounts = [1, 16, 64] as const;

const targets = ["raw-single", "raw-batch", "bullmq", "single", "participant"] as const;
type Target = (typeof targets)[number];
const lanewayTargets: ReadonlySet<Target> = new Set(["single", "participant"]);

const names: Record<Target, string> = {
  "raw-single": "raw JetStream: fetch 1 + ack, W loops",
  "raw-batch": "raw JetStream: fetch ≤W + ack, W handlers",
  bullmq: "BullMQ Worker, concurrency W",
  single: "Laneway Claim + Ack, W loops",
  participant: "Laneway participant, concurrency W",
};

/** What a helper process prints. */
interface HelperResult {
  items: number;
  seconds: number;
  cpuMicros: number;
  errors: number;
  firstError?: string;
  claimCalls?: number;
  ackCalls?: number;
  capacityRefusals?: number;
  emptyClaims?: number;
  pulls?: number;
}

interface Run {
  target: Target;
  workers: number;
  items: number;
  seconds: number;
  clientCpu: number;
  lanewayCpu: number;
  natsCpu: number;
  redisCpu: number;
  /** Laneway runs: messages Laneway's connection sent / received; raw runs: all messages the server received / sent. */
  sent: number;
  received: number;
  apiCalls: number;
  ledgerWrites: number;
  redisCommands: number;
  claimCalls: number;
  ackCalls: number;
  capacityRefusals: number;
  ledgerEntries: number;
  ledgerBytes: number;
  slots: number;
  /** Consumers on the lane stream after a Laneway run (each claim reads through an ordered consumer of its own). */
  laneConsumers: number;
}


export async function lanesWork(): Promise<void> {
  const seconds = benchSeconds(3);
  const rounds = Math.max(1, Number(process.env.BENCH_ROUNDS) || 3);
  const started = Date.now();
  const payload = benchPayload(PAYLOAD_BYTES);
  const systems = await startLanesBench("work", {
    namespace: NAMESPACE,
    lanes: [{ id: LANE, owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"], groups: { [GROUP]: ["beacon"] }, recoverers: { [GROUP]: ["beacon"] } }],
    ack_retention: `${ACK_RETENTION_S}s`,
    max_ledger: MAX_LEDGER,
    max_pending: 512,
  });
  const { tokens, nats, monitor, laneway, profileDir } = systems;
  let lanewayStopped = false;
  // The orchestrator's own connections publish backlogs and read state between runs, never during one.
  const nc = await connect({ servers: nats.url, name: "bench-orchestrator" });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const ledgerBucket = await new Kvm(js).open(groupBucket(NAMESPACE), { bindOnly: true });
  const ledgerStream = `KV_${groupBucket(NAMESPACE)}`;
  /**
   * Runs `use` with a fresh client of the project's token and closes its
   * connections after: a keep-alive socket left idle across a run (longer
   * than the server's keep-alive timeout) could be closed under the next call.
   */
  const withClient = async <T>(token: string, use: (client: Client<typeof LaneService>) => Promise<T>): Promise<T> => {
    const transport = createLanewayTransport({ baseUrl: laneway.url, token, protocol: "connect-binary" });
    try {
      return await use(createClient(LaneService, transport.transport));
    } finally {
      transport.close();
    }
  };
  const prefix = `laneway-bench-${randomBytes(6).toString("hex")}`;
  const queueName = "lanes-work";
  const redis = new Redis({ ...REDIS, lazyConnect: true, maxRetriesPerRequest: 1 });
  let queue: Queue | undefined;

  const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

  try {
    await redis.connect();
    const redisInfo = async (section: string, field: string) => {
      const text = await redis.info(section);
      const match = new RegExp(`^${field}:(\\S+)`, "m").exec(text);
      return match ? Number(match[1]) : 0;
    };
    const redisPid = (await redisInfo("server", "process_id")) || undefined;
    queue = new Queue(queueName, { connection: REDIS, prefix });
    await queue.waitUntilReady();

    // The raw baseline: the lane stream's own configuration, another name and subjects, and a durable pull consumer.
    const laneStream = streamName(NAMESPACE, LANE);
    const laneConfig = (await jsm.streams.info(laneStream)).config;
    await jsm.streams.add({ ...(laneConfig as StreamConfig), name: RAW_STREAM, subjects: [`${RAW_SUBJECTS}.>`] });
    await jsm.consumers.add(RAW_STREAM, { durable_name: RAW_CONSUMER, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All, max_ack_pending: 10_000 });

    interface Counters {
      inMsgs: number;
      outMsgs: number;
      laneway: { inMsgs: number; outMsgs: number };
      api: number;
      ledgerSeq: number;
      lanewayCpu: number;
      natsCpu: number;
      redisCpu: number;
      redisCommands: number;
    }
    const brokerCounts = async () => {
      const varz = (await (await fetch(`${monitor}/varz`)).json()) as { in_msgs: number; out_msgs: number };
      const connz = (await (await fetch(`${monitor}/connz?limit=4096`)).json()) as { connections?: { name?: string; in_msgs: number; out_msgs: number }[] };
      const own = { inMsgs: 0, outMsgs: 0 };
      for (const c of connz.connections ?? []) {
        if (c.name !== "laneway") continue;
        own.inMsgs += c.in_msgs;
        own.outMsgs += c.out_msgs;
      }
      return { inMsgs: varz.in_msgs, outMsgs: varz.out_msgs, laneway: own };
    };
    const apiTotal = async () => ((await (await fetch(`${monitor}/jsz`)).json()) as { api?: { total?: number } }).api?.total ?? 0;
    const processCpu = async () => ({
      lanewayCpu: await processCpuUs(laneway.child.pid),
      natsCpu: await processCpuUs(nats.pid),
      redisCpu: await processCpuUs(redisPid),
      redisCommands: await redisInfo("stats", "total_commands_processed"),
    });
    // The orchestrator's own broker requests fall outside each window: before them in `after`, after them in `before`.
    const countersBefore = async (): Promise<Counters> => {
      const ledgerSeq = (await jsm.streams.info(ledgerStream)).state.last_seq;
      const api = await apiTotal();
      return { ledgerSeq, api, ...(await brokerCounts()), ...(await processCpu()) };
    };
    const countersAfter = async (): Promise<Counters> => {
      const cpu = await processCpu();
      const broker = await brokerCounts();
      const api = await apiTotal();
      const ledgerSeq = (await jsm.streams.info(ledgerStream)).state.last_seq;
      return { ledgerSeq, api, ...broker, ...cpu };
    };

    // ------------------------------------------------------------ backlogs (untimed)

    let publishedBatches = 0;
    /** Publishes `n` work records to the lane; returns their (contiguous) sequences. */
    async function publishLaneway(n: number): Promise<{ from: number; to: number }> {
      const tag = `b${publishedBatches++}`;
      const sequences: number[] = [];
      let next = 0;
      const caller = (atlas: Client<typeof LaneService>) => async () => {
        while (next < n) {
          const offset = next;
          const count = Math.min(128, n - offset);
          next += count;
          const answer = await atlas.publishBatch({
            lane: LANE,
            records: Array.from({ length: count }, (_, i) => ({ id: `${tag}-${offset + i}`, kind: RecordKind.WORK, schema: SCHEMA, payload })),
          });
          for (const result of answer.results) {
            if (result.outcome.case !== "published") throw new Error(`a work record failed to publish: ${result.outcome.value?.message ?? "no outcome"}`);
            sequences.push(Number(result.outcome.value.record!.sequence));
          }
        }
      };
      await withClient(tokens.ATLAS_LANE_TOKEN, (atlas) => Promise.all(Array.from({ length: 4 }, caller(atlas))));
      const from = Math.min(...sequences);
      const to = Math.max(...sequences);
      if (to - from + 1 !== n || new Set(sequences).size !== n) throw new Error(`the lane's ${n} new work records are not contiguous (${from}..${to})`);
      const group = await inspectGroup();
      if (group.cursor !== from - 1) throw new Error(`the group's cursor is ${group.cursor}, not ${from - 1}, before a run`);
      return { from, to };
    }

    async function inspectGroup() {
      const { group } = await withClient(tokens.BEACON_LANE_TOKEN, (beacon) => beacon.inspectGroup({ lane: LANE, group: GROUP }));
      if (group === undefined) throw new Error("InspectGroup answered no group");
      return {
        cursor: Number(group.cursor),
        slots: group.slots,
        deliveries: group.deliveries.length,
        unfinished: group.deliveries.filter((d) => d.state !== DeliveryState.ACKED).length,
      };
    }

    let rawPublished = 0;
    /** Publishes `n` messages (one subject each, as lane records) to the raw stream; returns their sequences. */
    async function publishRaw(n: number): Promise<{ from: number; to: number }> {
      const before = (await jsm.streams.info(RAW_STREAM)).state.last_seq;
      let next = 0;
      const base = rawPublished;
      rawPublished += n;
      const caller = async () => {
        while (next < n) await js.publish(`${RAW_SUBJECTS}.m${base + next++}`, payload);
      };
      await Promise.all(Array.from({ length: 256 }, caller));
      const after = (await jsm.streams.info(RAW_STREAM)).state.last_seq;
      if (after - before !== n) throw new Error(`the raw stream grew by ${after - before}, not ${n}`);
      const consumer = await jsm.consumers.info(RAW_STREAM, RAW_CONSUMER);
      if (consumer.num_pending !== n || consumer.num_ack_pending !== 0) throw new Error(`the raw consumer has ${consumer.num_pending} pending (not ${n}) and ${consumer.num_ack_pending} unacknowledged before a run`);
      return { from: before + 1, to: after };
    }

    async function jobCounts() {
      return queue!.getJobCounts("wait", "active", "delayed", "failed", "prioritized", "waiting-children");
    }

    /** Adds `n` jobs (data.i = 0..n-1) to the empty BullMQ queue. */
    async function addJobs(n: number): Promise<void> {
      const counts = await jobCounts();
      if (Object.values(counts).some((c) => c !== 0)) throw new Error(`the BullMQ queue is not empty before a run: ${JSON.stringify(counts)}`);
      for (let offset = 0; offset < n; offset += 1_000) {
        await queue!.addBulk(Array.from({ length: Math.min(1_000, n - offset) }, (_, k) => ({ name: "job", data: { i: offset + k } })));
      }
      const waiting = (await jobCounts()).wait;
      if (waiting !== n) throw new Error(`${waiting} BullMQ jobs wait, not ${n}`);
    }

    // ------------------------------------------------------------ one run

    const windows: ProfileWindow[] = [];
    async function measure(target: Target, workers: number, n: number, record = true): Promise<Run> {
      let helper: Promise<HelperResult>;
      let from = 0;
      let to = 0;
      if (lanewayTargets.has(target)) ({ from, to } = await publishLaneway(n));
      else if (target === "bullmq") await addJobs(n);
      else ({ from, to } = await publishRaw(n));
      const before = await countersBefore();
      const windowStart = monotonicUs();
      if (lanewayTargets.has(target)) {
        helper = runJson<HelperResult>("bench/lanes-work-laneway.ts", [
          JSON.stringify({ mode: target, url: laneway.url, token: tokens.BEACON_LANE_TOKEN, lane: LANE, group: GROUP, schema: SCHEMA, publisher: "atlas", from, to, concurrency: workers }),
        ]);
      } else if (target === "bullmq") {
        helper = runJson<HelperResult>("bench/lanes-work-bullmq.ts", [JSON.stringify({ ...REDIS, prefix, queue: queueName, items: n, concurrency: workers })]);
      } else {
        helper = runJson<HelperResult>("bench/lanes-work-raw.ts", [
          JSON.stringify({ mode: target === "raw-single" ? "single" : "batch", url: nats.url, stream: RAW_STREAM, consumer: RAW_CONSUMER, from, to, concurrency: workers }),
        ]);
      }
      const result = await helper;
      const windowEnd = monotonicUs();
      const after = await countersAfter();
      if (result.errors > 0 || result.items !== n) {
        throw new Error(`${names[target]} at ${workers}: ${result.items} of ${n} items completed, ${result.errors} errors${result.firstError ? ` (first: ${result.firstError})` : ""}`);
      }
      let ledgerEntries = 0;
      let ledgerBytes = 0;
      let slots = 0;
      let laneConsumers = 0;
      if (lanewayTargets.has(target)) {
        if (record) windows.push({ label: `${target === "single" ? "Claim+Ack" : "participant"}@${workers}`, startUs: windowStart, endUs: windowEnd });
        const group = await inspectGroup();
        if (group.cursor !== to || group.unfinished > 0) throw new Error(`after ${names[target]} at ${workers}: cursor ${group.cursor} (expected ${to}), ${group.unfinished} deliveries not acknowledged`);
        ledgerEntries = group.deliveries;
        slots = group.slots;
        ledgerBytes = (await ledgerBucket.get(groupKey(LANE, GROUP)))?.value.length ?? 0;
        laneConsumers = (await jsm.streams.info(laneStream)).state.consumer_count;
      } else if (target === "bullmq") {
        const counts = await jobCounts();
        if (Object.values(counts).some((c) => c !== 0)) throw new Error(`after BullMQ at ${workers}: ${JSON.stringify(counts)}`);
      } else {
        const consumer = await jsm.consumers.info(RAW_STREAM, RAW_CONSUMER);
        if (consumer.num_pending !== 0 || consumer.num_ack_pending !== 0 || consumer.num_redelivered !== 0 || consumer.delivered.stream_seq !== to) {
          throw new Error(`after ${names[target]} at ${workers}: ${consumer.num_pending} pending, ${consumer.num_ack_pending} unacknowledged, ${consumer.num_redelivered} redelivered`);
        }
      }
      const isLaneway = lanewayTargets.has(target);
      return {
        target,
        workers,
        items: result.items,
        seconds: result.seconds,
        clientCpu: result.cpuMicros,
        lanewayCpu: after.lanewayCpu - before.lanewayCpu,
        natsCpu: after.natsCpu - before.natsCpu,
        redisCpu: after.redisCpu - before.redisCpu,
        sent: isLaneway ? after.laneway.inMsgs - before.laneway.inMsgs : after.inMsgs - before.inMsgs,
        received: isLaneway ? after.laneway.outMsgs - before.laneway.outMsgs : after.outMsgs - before.outMsgs,
        apiCalls: after.api - before.api,
        ledgerWrites: after.ledgerSeq - before.ledgerSeq,
        redisCommands: after.redisCommands - before.redisCommands,
        claimCalls: result.claimCalls ?? 0,
        ackCalls: result.ackCalls ?? 0,
        capacityRefusals: result.capacityRefusals ?? 0,
        ledgerEntries,
        ledgerBytes,
        slots,
        laneConsumers,
      };
    }

    // ------------------------------------------------------------ warm-up and calibration

    const rate = (r: Run) => r.items / r.seconds;
    const observed = new Map<string, number[]>();
    const key = (target: Target, workers: number) => `${target}@${workers}`;
    const itemsFor = (target: Target, workers: number) => {
      const list = observed.get(key(target, workers)) ?? [];
      const estimate = median(list);
      const [low, high] = lanewayTargets.has(target) ? [50, 50_000] : [500, 300_000];
      return Math.max(low, Math.min(high, Math.round(estimate * seconds)));
    };
    // Warm-up: JIT, connections, the group's slots (admitted up to max_ledger), and a first rate for each system and W.
    for (const workers of workerCounts) {
      for (const target of targets) {
        const n = lanewayTargets.has(target) ? (workers === 1 ? 100 : 400) : workers === 1 ? 2_000 : 6_000;
        const run = await measure(target, workers, n, false);
        observed.set(key(target, workers), [rate(run)]);
      }
    }
    // The warm-up's first runs also paid for startup: measure the 1-worker rates once more before the rounds.
    for (const target of targets) observed.set(key(target, 1), [rate(await measure(target, 1, itemsFor(target, 1), false))]);

    // ------------------------------------------------------------ measured rounds

    const runs = new Map<string, Run[]>();
    for (let round = 0; round < rounds; round++) {
      for (const workers of workerCounts) {
        for (const target of targets) {
          const run = await measure(target, workers, itemsFor(target, workers));
          const k = key(target, workers);
          runs.set(k, [...(runs.get(k) ?? []), run]);
          observed.set(k, [...(round === 0 ? [] : observed.get(k)!), rate(run)]);
        }
      }
    }
    const elapsed = (Date.now() - started) / 1000;

    // ------------------------------------------------------------ report

    const medianRate = (k: string) => median(runs.get(k)!.map(rate));
    const sumOf = (list: readonly Run[], field: keyof Run) => list.reduce((s, r) => s + (r[field] as number), 0);
    /** A per-item figure over all rounds of a row (sums over sums). */
    const perItem = (list: readonly Run[], field: keyof Run, digits: number) => (sumOf(list, field) / sumOf(list, "items")).toFixed(digits);

    console.log(
      `\nLanes work: claim + ack of one work group, ${rounds} rounds of ~${seconds}s per run, medians; ${PAYLOAD_BYTES} B payloads; ` +
        `ack_retention ${ACK_RETENTION_S}s, max_ledger ${MAX_LEDGER}; one nats-server (JetStream, file storage), Redis without persistence\n`,
    );
    const rows: string[][] = [];
    for (const workers of workerCounts) {
      const bull = medianRate(key("bullmq", workers));
      const rawSingle = medianRate(key("raw-single", workers));
      const rawBatch = medianRate(key("raw-batch", workers));
      for (const target of targets) {
        const list = runs.get(key(target, workers))!;
        const value = medianRate(key(target, workers));
        rows.push([
          names[target],
          String(workers),
          value.toFixed(0),
          (value / bull).toFixed(2),
          (value / rawSingle).toFixed(2),
          (value / rawBatch).toFixed(2),
          list.map((r) => rate(r).toFixed(0)).join(" "),
          String(Math.round(median(list.map((r) => r.items)))),
        ]);
      }
    }
    printTable(["workers' system", "W", "items/s", "vs BullMQ", "vs raw fetch 1", "vs raw batch", "rounds (items/s)", "items/run"], rows);

    console.log("\nCost per item (sums over all rounds of a row):\n");
    const costRows: string[][] = [];
    for (const workers of workerCounts) {
      for (const target of targets) {
        const list = runs.get(key(target, workers))!;
        const isLaneway = lanewayTargets.has(target);
        const claims = sumOf(list, "claimCalls");
        costRows.push([
          names[target],
          String(workers),
          isLaneway ? perItem(list, "lanewayCpu", 0) : "",
          target === "bullmq" ? "" : perItem(list, "natsCpu", 0),
          target === "bullmq" ? perItem(list, "redisCpu", 0) : "",
          perItem(list, "clientCpu", 0),
          target === "bullmq" ? perItem(list, "redisCommands", 2) : perItem(list, "sent", 2),
          target === "bullmq" ? "" : perItem(list, "received", 2),
          target === "bullmq" ? "" : perItem(list, "apiCalls", 2),
          isLaneway ? perItem(list, "ledgerWrites", 3) : "",
          isLaneway && claims > 0 ? perItem(list, "claimCalls", 2) : "",
          isLaneway ? perItem(list, "ackCalls", 2) : "",
          isLaneway ? perItem(list, "capacityRefusals", 2) : "",
          isLaneway ? `${Math.round(median(list.map((r) => r.ledgerEntries)))} / ${(median(list.map((r) => r.ledgerBytes)) / 1024).toFixed(0)} KiB` : "",
          isLaneway ? String(Math.max(...list.map((r) => r.laneConsumers))) : "",
        ]);
      }
    }
    printTable(
      [
        "workers' system",
        "W",
        "Laneway CPU µs",
        "nats-server CPU µs",
        "Redis CPU µs",
        "client CPU µs",
        "broker msgs sent (Redis cmds)",
        "recv",
        "JS API reqs",
        "ledger CASes",
        "claim calls",
        "ack calls",
        "capacity refusals",
        "ledger at end: entries / size",
        "lane consumers alive",
      ],
      costRows,
    );

    const participant64 = medianRate(key("participant", 64));
    const bull64 = medianRate(key("bullmq", 64));
    const rawBatch64 = medianRate(key("raw-batch", 64));
    const rawSingle64 = medianRate(key("raw-single", 64));
    const goalBull = participant64 / bull64;
    const goalRaw = participant64 / rawBatch64;
    const p64 = runs.get(key("participant", 64))!;
    const items64 = sumOf(p64, "items");
    const cpuPerItem = sumOf(p64, "lanewayCpu") / items64;
    const slots = Math.max(...p64.map((r) => r.slots));
    const ceiling = slots / ACK_RETENTION_S;
    const claims64 = sumOf(p64, "claimCalls");
    const acks64 = sumOf(p64, "ackCalls");
    const single1 = runs.get(key("single", 1))!;
    console.log(
      [
        "",
        "W: concurrent workers — Claim+Ack loops, participant handlers, raw fetch loops or handlers, BullMQ worker slots.",
        "Every run completed its whole backlog, each item exactly once (checked by the helper, then by the group's inspection,",
        "the consumer's state or the queue's counts). Laneway broker msgs: sent by Laneway's `laneway` connection, each a",
        "request or an acknowledged publish (one broker round trip), recv: its answers and deliveries; raw: all messages the",
        "server received / sent. JS API reqs: JetStream API requests server-wide ($JS.API, /jsz). Ledger CASes: successful",
        "writes of the group's ledger key. Laneway CPU µs also covers its own background work; client CPU: the helper's",
        "process while it worked.",
        "",
        `Goals (participant library at 64 workers): ≥ 1.0× BullMQ: ${goalBull.toFixed(2)}× (${goalBull >= 1 ? "met" : "missed"}); ` +
          `≥ 0.3× the raw JetStream consumer (fetch ≤64 + ack, 64 handlers): ${goalRaw.toFixed(2)}× (${goalRaw >= 0.3 ? "met" : "missed"}); ` +
          `against raw fetch 1 + ack ×64: ${(participant64 / rawSingle64).toFixed(2)}×.`,
        "",
        `Where the participant's time goes at 64 workers (${participant64.toFixed(0)} items/s):`,
        `- ledger slot ceiling: an acknowledgement holds one of the group's ${slots} slots for ack_retention (${ACK_RETENTION_S} s), so the group`,
        `  completes at most ${ceiling.toFixed(0)} items/s in steady state (measured: ${((100 * participant64) / ceiling).toFixed(0)}% of it; a run starts with every slot free, ` +
          `so a ${seconds} s run can reach up to ${(ceiling * (1 + ACK_RETENTION_S / seconds)).toFixed(0)}/s); claims refused for capacity: ` +
          `${perItem(p64, "capacityRefusals", 2)} per item (each one waits 200 ms in the participant). That ceiling alone caps the goal ratios at ` +
          `${(ceiling / bull64).toFixed(2)}× BullMQ and ${(ceiling / rawBatch64).toFixed(2)}× raw at this run's baselines.`,
        `- Laneway CPU: ${cpuPerItem.toFixed(0)} µs per item, a one-core ceiling of ${(1e6 / cpuPerItem).toFixed(0)} items/s; nats-server CPU: ` +
          `${perItem(p64, "natsCpu", 0)} µs per item (raw batch: ${perItem(runs.get(key("raw-batch", 64))!, "natsCpu", 0)}).`,
        `- calls: ${(claims64 / items64).toFixed(3)} ClaimBatch calls per item (${(items64 / claims64).toFixed(1)} records per claim), ` +
          `${(acks64 / items64).toFixed(3)} AckBatch calls per item (${(items64 / acks64).toFixed(1)} receipts per ack); ` +
          `${(sumOf(p64, "sent") / (claims64 + acks64)).toFixed(2)} broker round trips per call.`,
        `- broker: ${perItem(p64, "sent", 2)} round trips per item, ${perItem(p64, "apiCalls", 2)} of them JetStream API requests; ` +
          `${perItem(p64, "ledgerWrites", 3)} ledger CASes per item (${(items64 / sumOf(p64, "ledgerWrites")).toFixed(1)} items per CAS), ` +
          `each rewriting the whole ledger (${Math.round(median(p64.map((r) => r.ledgerEntries)))} entries, ` +
          `${(median(p64.map((r) => r.ledgerBytes)) / 1024).toFixed(0)} KiB at the end of a run).`,
        "- CAS conflicts: none possible with one Laneway process (its group actor serializes the group's writes).",
        `- lane consumers alive after the runs: up to ${Math.max(...[...runs.values()].flat().map((r) => r.laneConsumers))} on the lane stream (each read creates an ordered consumer ` +
          "and deletes it once read).",
        `Claim + Ack at 1 worker: ${perItem(single1, "sent", 2)} broker round trips and ${perItem(single1, "received", 1)} broker messages received per item ` +
          `(a claim reads what it wants plus 16 records of read-ahead with a short-lived ordered consumer, and a STREAM.INFO for the lane's range); ` +
          `nats-server CPU ${perItem(single1, "natsCpu", 0)} µs per item.`,
        profileDir ? `CPU profile of the Laneway process: ${profileDir}` : "(BENCH_CPU_PROF=<dir> adds a CPU profile of the Laneway process by category.)",
        `(lanes-work took ${elapsed.toFixed(0)} s)`,
      ].join("\n"),
    );

    if (profileDir !== undefined) {
      await laneway.stop();
      lanewayStopped = true;
      const path = await newestProfile(profileDir, started);
      console.log("");
      if (path === undefined) console.log(`(no .cpuprofile was written to ${profileDir})`);
      else await summarizeProfile(path, windows);
    }
  } finally {
    if (queue !== undefined) {
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
    }
    // Anything left under this run's prefix (and only there).
    if (redis.status === "ready") {
      let cursor = "0";
      do {
        const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1_000);
        cursor = next;
        if (keys.length > 0) await redis.unlink(...keys);
      } while (cursor !== "0");
    }
    redis.disconnect();
    await nc.close();
    await systems.stop({ lanewayStopped });
  }
}
