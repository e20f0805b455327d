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
 * Laneway runs in three `laneway serve` processes on the same broker: the
 * main one and a peer on namespace `bench`, with tuned bounds (ack_retention
 * 1 s, max_ledger 512, max_pending 512: the most favourable the
 * specification allows), and one on namespace `bench-default` with the
 * default bounds (ack_retention 24 h, max_ledger 256, max_pending 64). A
 * completed delivery leaves its slot at once, so the bounds should not
 * change the rate: the `default bounds` rows say whether they do. The
 * `two processes` rows split the same W over the main process and its peer
 * (two participant helpers of W/2 handlers each, one per process, the same
 * group), to show whether a second process adds to or takes from one.
 * BullMQ keeps completed jobs for 1 s (`removeOnComplete: {age: 1}`).
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
 * sequence) per item; the completion history's ranges and the state's bytes at the end of a run;
 * claims refused for capacity; the bytes of the group's stored state per
 * CAS (sampled every 25 ms during the run) and per item; the participant's ClaimBatch and AckBatch
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
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { LaneService, RecordKind } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";
import { streamName } from "../src/lanes/index.js";
import { decodeLedger } from "../src/lanes/group-state-codec.js";
import { groupBucket, groupKey } from "../src/lanes/names.js";
import { benchPayload, benchSeconds, median, printTable, processCpuUs, runJson, startLanesBench, startListening } from "./harness.js";
import { newestProfile, summarizeProfile, type ProfileWindow } from "./lanes-work-profile.js";

const NAMESPACE = "bench";
const DEFAULT_NAMESPACE = "bench-default";
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

const targets = ["raw-single", "raw-batch", "bullmq", "single", "participant", "single-default", "participant-default", "participant-2proc"] as const;
type Target = (typeof targets)[number];
const lanewayTargets: ReadonlySet<Target> = new Set(["single", "participant", "single-default", "participant-default", "participant-2proc"]);
const defaultBoundsTargets: ReadonlySet<Target> = new Set(["single-default", "participant-default"]);

const names: Record<Target, string> = {
  "raw-single": "raw JetStream: fetch 1 + ack, W loops",
  "raw-batch": "raw JetStream: fetch ≤W + ack, W handlers",
  bullmq: "BullMQ Worker, concurrency W",
  single: "Laneway Claim + Ack, W loops",
  participant: "Laneway participant, concurrency W",
  "single-default": "Laneway Claim + Ack, W loops, default bounds",
  "participant-default": "Laneway participant, concurrency W, default bounds",
  "participant-2proc": "Laneway participant, two processes, W/2 each",
};
/**
 * `BENCH_ONLY=<target>@<W>,…` (targets as above: raw-single, raw-batch,
 * bullmq, single, participant, single-default, participant-default,
 * participant-2proc) runs only those rows, for a quick look; the goals
 * whose rows did not run print as NaN.
 */
const only = new Set((process.env.BENCH_ONLY ?? "").split(",").map((s) => s.trim()).filter((s) => s !== ""));
/** Which W each target runs at (two processes need at least one handler each). */
const runsAt = (target: Target, workers: number) => (target !== "participant-2proc" || workers >= 2) && (only.size === 0 || only.has(`${target}@${workers}`));

/** What a helper process prints. */
interface HelperResult {
  items: number;
  seconds: number;
  cpuMicros: number;
  errors: number;
  firstError?: string;
  claimCalls?: number;
  ackCalls?: number;
  acksCarried?: number;
  capacityRefusals?: number;
  emptyClaims?: number;
  pulls?: number;
  /** Shared runs: what this helper handled (base64, a byte per record). */
  handled?: string;
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
  /** Participant runs: receipts acknowledged by ClaimBatch calls rather than AckBatch. */
  acksCarried: number;
  capacityRefusals: number;
  ledgerEntries: number;
  ledgerBytes: number;
  slots: number;
  /** Consumers on the lane stream after a Laneway run (each claim reads through an ordered consumer of its own). */
  laneConsumers: number;
  /** The group's stored state, sampled during the run: mean bytes per CAS. */
  stateBytes: number;
  /** Two-process runs: items handled through each process. */
  split: number[];
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
  // The peer on the same namespace, and a process on a namespace with the default bounds.
  const serve = (name: string, lanesFile: string) =>
    startListening("src/cli/main.ts", ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(systems.dir, name), "--nats-url", nats.url, "--lanes-config", join(systems.dir, lanesFile)], tokens);
  const peer = await serve("data-peer", "lanes.json");
  const defaultConfig = JSON.parse(await readFile(join(systems.dir, "lanes.json"), "utf8")) as Record<string, unknown>;
  await writeFile(join(systems.dir, "lanes-default.json"), JSON.stringify({ principals: defaultConfig.principals, namespace: DEFAULT_NAMESPACE, lanes: defaultConfig.lanes }));
  const lanewayDefault = await serve("data-default", "lanes-default.json");
  const lanewayPids = [laneway.child.pid, peer.child.pid, lanewayDefault.child.pid];
  const urlOf = (target: Target) => (defaultBoundsTargets.has(target) ? lanewayDefault.url : laneway.url);
  const namespaceOf = (target: Target) => (defaultBoundsTargets.has(target) ? DEFAULT_NAMESPACE : NAMESPACE);
  // The orchestrator's own connections publish backlogs and read state between runs, never during one.
  const nc = await connect({ servers: nats.url, name: "bench-orchestrator" });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const ledgerBuckets = new Map([
    [NAMESPACE, await new Kvm(js).open(groupBucket(NAMESPACE), { bindOnly: true })],
    [DEFAULT_NAMESPACE, await new Kvm(js).open(groupBucket(DEFAULT_NAMESPACE), { bindOnly: true })],
  ]);
  const ledgerStream = (namespace: string) => `KV_${groupBucket(namespace)}`;
  /**
   * Runs `use` with a fresh client of the project's token and closes its
   * connections after: a keep-alive socket left idle across a run (longer
   * than the server's keep-alive timeout) could be closed under the next call.
   */
  const withClient = async <T>(token: string, use: (client: Client<typeof LaneService>) => Promise<T>, url = laneway.url): Promise<T> => {
    const transport = createLanewayTransport({ baseUrl: url, token, protocol: "connect-binary" });
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
      lanewayCpu: (await Promise.all(lanewayPids.map((pid) => processCpuUs(pid)))).reduce((a, b) => a + b, 0),
      natsCpu: await processCpuUs(nats.pid),
      redisCpu: await processCpuUs(redisPid),
      redisCommands: await redisInfo("stats", "total_commands_processed"),
    });
    // The orchestrator's own broker requests fall outside each window: before them in `after`, after them in `before`.
    const ledgerWritesSoFar = async () => (await jsm.streams.info(ledgerStream(NAMESPACE))).state.last_seq + (await jsm.streams.info(ledgerStream(DEFAULT_NAMESPACE))).state.last_seq;
    const countersBefore = async (): Promise<Counters> => {
      const ledgerSeq = await ledgerWritesSoFar();
      const api = await apiTotal();
      return { ledgerSeq, api, ...(await brokerCounts()), ...(await processCpu()) };
    };
    const countersAfter = async (): Promise<Counters> => {
      const cpu = await processCpu();
      const broker = await brokerCounts();
      const api = await apiTotal();
      const ledgerSeq = await ledgerWritesSoFar();
      return { ledgerSeq, api, ...broker, ...cpu };
    };

    // ------------------------------------------------------------ backlogs (untimed)

    let publishedBatches = 0;
    /** Publishes `n` work records to the lane; returns their (contiguous) sequences. */
    async function publishLaneway(n: number, url: string): Promise<{ from: number; to: number }> {
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
      await withClient(tokens.ATLAS_LANE_TOKEN, (atlas) => Promise.all(Array.from({ length: 4 }, caller(atlas))), url);
      const from = Math.min(...sequences);
      const to = Math.max(...sequences);
      if (to - from + 1 !== n || new Set(sequences).size !== n) throw new Error(`the lane's ${n} new work records are not contiguous (${from}..${to})`);
      const group = await inspectGroup(url);
      if (group.cursor !== from - 1) throw new Error(`the group's cursor is ${group.cursor}, not ${from - 1}, before a run`);
      return { from, to };
    }

    async function inspectGroup(url: string) {
      const { group } = await withClient(tokens.BEACON_LANE_TOKEN, (beacon) => beacon.inspectGroup({ lane: LANE, group: GROUP }), url);
      if (group === undefined) throw new Error("InspectGroup answered no group");
      return {
        cursor: Number(group.cursor),
        slots: group.slots,
        // Completed deliveries leave the ledger: what it tracks is unfinished.
        unfinished: group.deliveries.length,
        completionRanges: group.completions.reduce((n, b) => n + b.ranges.length, 0),
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
    let doneFiles = 0;
    async function measure(target: Target, workers: number, n: number, record = true): Promise<Run> {
      let helper: Promise<HelperResult>;
      let from = 0;
      let to = 0;
      if (lanewayTargets.has(target)) ({ from, to } = await publishLaneway(n, urlOf(target)));
      else if (target === "bullmq") await addJobs(n);
      else ({ from, to } = await publishRaw(n));
      const before = await countersBefore();
      const windowStart = monotonicUs();
      let split: number[] = [];
      // The group's stored state, sampled while the run goes on (one KV get every 25 ms).
      const samples: number[] = [];
      let sampling = lanewayTargets.has(target);
      // Two-process runs end when the stored state shows every record completed: the sampler says so in a file the helpers watch.
      const doneFile = join(systems.dir, `done-${doneFiles++}`);
      const sampler = (async () => {
        const bucket = ledgerBuckets.get(namespaceOf(target))!;
        while (sampling) {
          const entry = await bucket.get(groupKey(LANE, GROUP)).catch(() => null);
          if (entry !== null && entry.operation === "PUT") {
            samples.push(entry.value.length);
            if (target === "participant-2proc") {
              const state = decodeLedger(entry.value);
              if (state.cursor >= to && state.deliveries.length === 0) await writeFile(doneFile, "");
            }
          }
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
      })();
      const spec = { token: tokens.BEACON_LANE_TOKEN, lane: LANE, group: GROUP, schema: SCHEMA, publisher: "atlas", from, to };
      if (target === "participant-2proc") {
        // Two helpers, one per process, W/2 handlers each, on the same group: each runs until the group has completed every record.
        const halves = [laneway.url, peer.url].map((url) =>
          runJson<HelperResult>("bench/lanes-work-laneway.ts", [JSON.stringify({ ...spec, mode: "participant", url, concurrency: Math.floor(workers / 2), shared: true, doneFile })]),
        );
        helper = Promise.all(halves).then((results) => {
          const counts = new Uint8Array(to - from + 1);
          for (const r of results) Buffer.from(r.handled ?? "", "base64").forEach((c, i) => (counts[i] = counts[i]! + c));
          const wrong = counts.reduce((k, c) => k + (c === 1 ? 0 : 1), 0);
          split = results.map((r) => r.items);
          return {
            items: counts.length - wrong,
            seconds: Math.max(...results.map((r) => r.seconds)),
            cpuMicros: results.reduce((a, r) => a + r.cpuMicros, 0),
            errors: results.reduce((a, r) => a + r.errors, 0) + (wrong > 0 ? 1 : 0),
            firstError: results.find((r) => r.firstError)?.firstError ?? (wrong > 0 ? `${wrong} records not handled exactly once across the two processes` : undefined),
            claimCalls: results.reduce((a, r) => a + (r.claimCalls ?? 0), 0),
            ackCalls: results.reduce((a, r) => a + (r.ackCalls ?? 0), 0),
            acksCarried: results.reduce((a, r) => a + (r.acksCarried ?? 0), 0),
            capacityRefusals: results.reduce((a, r) => a + (r.capacityRefusals ?? 0), 0),
          };
        });
      } else if (lanewayTargets.has(target)) {
        helper = runJson<HelperResult>("bench/lanes-work-laneway.ts", [
          JSON.stringify({ ...spec, mode: target.startsWith("single") ? "single" : "participant", url: urlOf(target), concurrency: workers }),
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
      sampling = false;
      await sampler;
      const after = await countersAfter();
      if (result.errors > 0 || result.items !== n) {
        throw new Error(`${names[target]} at ${workers}: ${result.items} of ${n} items completed, ${result.errors} errors${result.firstError ? ` (first: ${result.firstError})` : ""}`);
      }
      let ledgerEntries = 0;
      let ledgerBytes = 0;
      let slots = 0;
      let laneConsumers = 0;
      if (lanewayTargets.has(target)) {
        if (record && !defaultBoundsTargets.has(target) && target !== "participant-2proc") {
          windows.push({ label: `${target === "single" ? "Claim+Ack" : "participant"}@${workers}`, startUs: windowStart, endUs: windowEnd });
        }
        const group = await inspectGroup(urlOf(target));
        if (group.cursor !== to || group.unfinished > 0) throw new Error(`after ${names[target]} at ${workers}: cursor ${group.cursor} (expected ${to}), ${group.unfinished} deliveries not acknowledged`);
        ledgerEntries = group.completionRanges;
        slots = group.slots;
        ledgerBytes = (await ledgerBuckets.get(namespaceOf(target))!.get(groupKey(LANE, GROUP)))?.value.length ?? 0;
        laneConsumers = (await jsm.streams.info(streamName(namespaceOf(target), LANE))).state.consumer_count;
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
        acksCarried: result.acksCarried ?? 0,
        capacityRefusals: result.capacityRefusals ?? 0,
        ledgerEntries,
        ledgerBytes,
        slots,
        laneConsumers,
        stateBytes: samples.length === 0 ? ledgerBytes : samples.reduce((a, b) => a + b, 0) / samples.length,
        split,
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
      for (const target of targets.filter((t) => runsAt(t, workers))) {
        const n = lanewayTargets.has(target) ? (workers === 1 ? 100 : 400) : workers === 1 ? 2_000 : 6_000;
        const run = await measure(target, workers, n, false);
        observed.set(key(target, workers), [rate(run)]);
      }
    }
    // The warm-up's first runs also paid for startup: measure the 1-worker rates once more before the rounds.
    for (const target of targets.filter((t) => runsAt(t, 1))) observed.set(key(target, 1), [rate(await measure(target, 1, itemsFor(target, 1), false))]);

    // ------------------------------------------------------------ measured rounds

    const runs = new Map<string, Run[]>();
    for (let round = 0; round < rounds; round++) {
      for (const workers of workerCounts) {
        for (const target of targets.filter((t) => runsAt(t, workers))) {
          const run = await measure(target, workers, itemsFor(target, workers));
          const k = key(target, workers);
          runs.set(k, [...(runs.get(k) ?? []), run]);
          observed.set(k, [...(round === 0 ? [] : observed.get(k)!), rate(run)]);
        }
      }
    }
    const elapsed = (Date.now() - started) / 1000;

    // ------------------------------------------------------------ report

    const medianRate = (k: string) => (runs.has(k) ? median(runs.get(k)!.map(rate)) : Number.NaN);
    const sumOf = (list: readonly Run[] | undefined, field: keyof Run) => (list ?? []).reduce((s, r) => s + (r[field] as number), 0);
    /** A per-item figure over all rounds of a row (sums over sums). */
    const perItem = (list: readonly Run[] | undefined, field: keyof Run, digits: number) => (sumOf(list, field) / sumOf(list, "items")).toFixed(digits);
    /** The mean stored state per CAS over a row's rounds (weighted by CASes), and per item. */
    const stateBytes = (list: readonly Run[] = []) => {
      const writes = sumOf(list, "ledgerWrites");
      const bytes = list.reduce((s, r) => s + r.stateBytes * r.ledgerWrites, 0);
      return { perCas: writes > 0 ? bytes / writes : 0, perItem: bytes / sumOf(list, "items") };
    };

    console.log(
      `\nLanes work: claim + ack of one work group, ${rounds} rounds of ~${seconds}s per run, medians; ${PAYLOAD_BYTES} B payloads; ` +
        `Laneway with tuned bounds (ack_retention ${ACK_RETENTION_S}s, max_ledger ${MAX_LEDGER}, max_pending 512) unless "default bounds" ` +
        `(ack_retention 24h, max_ledger 256, max_pending 64); one nats-server (JetStream, file storage), Redis without persistence\n`,
    );
    const rows: string[][] = [];
    for (const workers of workerCounts) {
      const bull = medianRate(key("bullmq", workers));
      const rawSingle = medianRate(key("raw-single", workers));
      const rawBatch = medianRate(key("raw-batch", workers));
      for (const target of targets.filter((t) => runsAt(t, workers))) {
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
      for (const target of targets.filter((t) => runsAt(t, workers))) {
        const list = runs.get(key(target, workers))!;
        const isLaneway = lanewayTargets.has(target);
        const claims = sumOf(list, "claimCalls");
        const state = stateBytes(list);
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
          isLaneway ? `${state.perCas.toFixed(0)} / ${state.perItem.toFixed(0)}` : "",
          isLaneway && claims > 0 ? perItem(list, "claimCalls", 2) : "",
          isLaneway ? perItem(list, "ackCalls", 2) : "",
          isLaneway ? perItem(list, "capacityRefusals", 2) : "",
          isLaneway ? `${Math.round(median(list.map((r) => r.ledgerEntries)))} / ${Math.round(median(list.map((r) => r.ledgerBytes)))} B` : "",
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
        "state bytes per CAS / per item",
        "claim calls",
        "ack calls",
        "capacity refusals",
        "at end: history ranges / state",
        "lane consumers alive",
      ],
      costRows,
    );

    const rateOf = (target: Target, workers: number) => medianRate(key(target, workers));
    const participant64 = rateOf("participant", 64);
    const bull64 = rateOf("bullmq", 64);
    const rawBatch64 = rateOf("raw-batch", 64);
    const rawSingle64 = rateOf("raw-single", 64);
    const single1 = runs.get(key("single", 1)) ?? [];
    const p64 = runs.get(key("participant", 64)) ?? [];
    const items64 = sumOf(p64, "items");
    const claims64 = sumOf(p64, "claimCalls");
    const acks64 = sumOf(p64, "ackCalls");
    const state64 = stateBytes(p64);
    const goal = (value: number, wanted: number) => `${value.toFixed(2)}× (${value >= wanted ? "met" : "missed"})`;
    const splits = workerCounts
      .filter((w) => runsAt("participant-2proc", w))
      .map((w) => {
        const list = runs.get(key("participant-2proc", w)) ?? [];
        const a = list.reduce((s, r) => s + (r.split[0] ?? 0), 0);
        const b = list.reduce((s, r) => s + (r.split[1] ?? 0), 0);
        return `at ${w}: ${((100 * a) / (a + b)).toFixed(0)}% / ${((100 * b) / (a + b)).toFixed(0)}%`;
      });
    console.log(
      [
        "",
        "W: concurrent workers — Claim+Ack loops, participant handlers, raw fetch loops or handlers, BullMQ worker slots.",
        "Every run completed its whole backlog, each item exactly once (checked by the helper, then by the group's inspection,",
        "the consumer's state or the queue's counts). Laneway broker msgs: sent by Laneway's `laneway` connections, each a",
        "request or an acknowledged publish (one broker round trip), recv: their answers and deliveries; raw: all messages the",
        "server received / sent. JS API reqs: JetStream API requests server-wide ($JS.API, /jsz). Ledger CASes: successful",
        "writes of the group's state. State bytes: the stored group state, sampled every 25 ms during the run (per CAS), times",
        "the CASes per item. Laneway CPU µs covers all three laneway processes (the idle ones cost next to nothing).",
        "",
        "Goals:",
        `- participant at 64 workers ≥ 1.0× BullMQ: ${goal(participant64 / bull64, 1)}; ≥ 0.3× the raw JetStream consumer (fetch ≤64 + ack): ` +
          `${goal(participant64 / rawBatch64, 0.3)}; against raw fetch 1 + ack ×64: ${(participant64 / rawSingle64).toFixed(2)}×.`,
        `- Claim+Ack single calls at 1 worker ≥ 0.25× BullMQ at concurrency 1: ${goal(rateOf("single", 1) / rateOf("bullmq", 1), 0.25)}.`,
        `- default bounds equal to tuned bounds: participant ${workerCounts.map((w) => `${(rateOf("participant-default", w) / rateOf("participant", w)).toFixed(2)}× at ${w}`).join(", ")}; ` +
          `Claim+Ack ${workerCounts.map((w) => `${(rateOf("single-default", w) / rateOf("single", w)).toFixed(2)}× at ${w}`).join(", ")}.`,
        `- two processes ≥ 1.0× one (participant, W split over two laneway processes on one group): ` +
          `${workerCounts
            .filter((w) => runsAt("participant-2proc", w))
            .map((w) => `${goal(rateOf("participant-2proc", w) / rateOf("participant", w), 1)} at ${w}`)
            .join(", ")}; items handled through each process ${splits.join(", ")}.`,
        "",
        `Where the participant's time goes at 64 workers (${participant64.toFixed(0)} items/s):`,
        `- Laneway CPU: ${perItem(p64, "lanewayCpu", 0)} µs per item, a one-core ceiling of ${(1e6 / Number(perItem(p64, "lanewayCpu", 3))).toFixed(0)} items/s; ` +
          `nats-server CPU: ${perItem(p64, "natsCpu", 0)} µs per item (raw batch: ${perItem(runs.get(key("raw-batch", 64)) ?? [], "natsCpu", 0)}); ` +
          `the participant's own process: ${perItem(p64, "clientCpu", 0)} µs per item.`,
        `- calls: ${(claims64 / items64).toFixed(3)} ClaimBatch calls per item (${(items64 / claims64).toFixed(1)} records per claim), ` +
          `${(acks64 / items64).toFixed(3)} AckBatch calls per item; ${((100 * sumOf(p64, "acksCarried")) / items64).toFixed(1)}% of the acks rode with a ClaimBatch; ` +
          `${(sumOf(p64, "sent") / (claims64 + acks64)).toFixed(2)} broker round trips per call.`,
        `- broker: ${perItem(p64, "sent", 2)} round trips per item, ${perItem(p64, "apiCalls", 2)} of them JetStream API requests; ` +
          `${perItem(p64, "ledgerWrites", 3)} ledger CASes per item (${(items64 / sumOf(p64, "ledgerWrites")).toFixed(1)} items per CAS), ` +
          `each writing ${state64.perCas.toFixed(0)} bytes of group state on average (${state64.perItem.toFixed(1)} bytes per item).`,
        `- capacity refusals: ${perItem(p64, "capacityRefusals", 2)} per item (completions leave their slots at once).`,
        `Claim + Ack at 1 worker: ${perItem(single1, "sent", 2)} broker round trips and ${perItem(single1, "received", 1)} broker messages received per item ` +
          `(a claim CAS and an ack CAS; a read of the lane, its range and the read's consumer only when the read-ahead is used up); ` +
          `Laneway CPU ${perItem(single1, "lanewayCpu", 0)} µs, nats-server CPU ${perItem(single1, "natsCpu", 0)} µs per item.`,
        profileDir ? `CPU profile of the main Laneway process: ${profileDir}` : "(BENCH_CPU_PROF=<dir> adds a CPU profile of the main Laneway process by category.)",
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
    await Promise.all([peer.stop(), lanewayDefault.stop()]);
    await systems.stop({ lanewayStopped });
  }
}
