/**
 * Lanes publish and replay: Laneway's Publish and PublishBatch against raw
 * JetStream acknowledged publishes of the same payloads, and Laneway's
 * Replay against a raw ordered consumer reading the same stream — all
 * against one nats-server started by this benchmark, all measured in this
 * run.
 *
 * Processes (each its own, so no client CPU is charged to the server):
 * - nats-server (JetStream, a temporary store, a monitoring port), started
 *   here; Laneway and every baseline use it;
 * - `laneway serve --nats-url <that server> --lanes-config` with two lanes:
 *   `measurements` (published to) and `history` (20,000 records, replayed);
 * - bench/load-generator.ts: closed-loop Publish / PublishBatch (128
 *   records a call) over Connect binary, HTTP/1.1, a fresh id per record;
 * - bench/lanes-raw-publisher.ts: acknowledged `js.publish` of the same
 *   payload bytes, one subject per message, to a stream created with the
 *   lane stream's own configuration (copied from the broker);
 * - bench/lanes-replay-reader.ts: Replay paging (128 events a page) on the
 *   generated client, or an ordered consumer reading the `history` stream.
 *
 * Every Laneway publish run is checked: the lane stream must have grown by
 * exactly the records the calls acknowledged (a batch answers HTTP 200 even
 * when some of its records failed).
 *
 * CPU: the Laneway and nats-server processes' own CPU time (utime + stime
 * from /proc) over each run, per record — robust where the machine is
 * shared and wall-clock rates are noisy — and the raw publisher's CPU per
 * message, as it reports it.
 *
 * Broker round trips: from the nats-server's monitoring port, the messages
 * Laneway's own connection (named `laneway`) sent to the broker (each one a
 * request or a publish that waits for its answer: one round trip) and
 * received from it, per record published or per page replayed; and the
 * server-wide in/out message counts per record for the raw baseline.
 *
 * `BENCH_CPU_PROF=<dir>` runs the Laneway process under `node --cpu-prof`,
 * leaves the profile in `<dir>` (read it with Chrome DevTools or any
 * .cpuprofile viewer) and prints where the Laneway CPU of the measured
 * publish runs went, by category and by function.
 *
 * To iterate on one row: `BENCH_PARTS=publish` (or `read`) runs one half,
 * `BENCH_TARGETS=single` (or `batch`, or both) the Laneway publish rows
 * named beside the raw baseline, `BENCH_IN_FLIGHT=64` (or 1) one number of
 * calls in flight, `BENCH_ROUNDS` the rounds (default 3) and
 * `BENCH_SECONDS` each run's length (default 3).
 *
 * Reported: records/s (median of interleaved rounds) and the ratio to the
 * raw baseline at the same number of requests in flight. Nothing is asserted.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { LaneService, PublishBatchRequestSchema, PublishRequestSchema, RecordKind } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";
import { streamName } from "../src/lanes/index.js";
import { benchPayload, benchSeconds, median, printTable, processCpuUs, runJson, startLanesBench } from "./harness.js";
import { newestProfile, summarizeProfile, type ProfileWindow } from "./lanes-work-profile.js";

interface LoadResult {
  completed: number;
  failed: number;
  seconds: number;
  /** The load process's own CPU time, µs (the raw publisher reports it). */
  cpuMicros?: number;
}

interface ReaderResult {
  records: number;
  pages: number;
  passes: number;
  seconds: number;
  /** The reader process's own CPU time, µs. */
  cpuMicros: number;
}

/** Broker message counts: server-wide, and per connection name (open connections only). */
interface Counters {
  inMsgs: number;
  outMsgs: number;
  byName: Map<string, { inMsgs: number; outMsgs: number }>;
}

const NAMESPACE = "bench";
const PUBLISH_LANE = "measurements";
const REPLAY_LANE = "history";
const BATCH_SIZE = 128;
const REPLAY_RECORDS = 20_000;
const PAYLOAD_BYTES = 200;
const RAW_SUBJECTS = "bench.raw.rec";
/** BENCH_IN_FLIGHT=64 (or 1) measures one number of calls in flight (default both). */
const concurrencies = (process.env.BENCH_IN_FLIGHT ? process.env.BENCH_IN_FLIGHT.split(",").map(Number) : [1, 64]).filter((c) => c === 1 || c === 64);
const rounds = Math.max(1, Number(process.env.BENCH_ROUNDS) || 3);
/** BENCH_TARGETS=raw,single (any of raw, single, batch) measures those publish rows only; raw is always measured (it is the baseline). */
const publishTargets = (["raw", "single", "batch"] as const).filter((t) => t === "raw" || (process.env.BENCH_TARGETS ?? "single,batch").split(",").includes(t));
/** 32 bytes replaced by a fresh 32-hex id per request (the load generator's placeholder rule for binary bodies). */
const ID_PLACEHOLDER = "X".repeat(32);


export async function lanesPublish(): Promise<void> {
  const seconds = benchSeconds(3);
  // BENCH_PARTS=publish or read runs one half (default both).
  const parts = new Set((process.env.BENCH_PARTS ?? "publish,read").split(","));
  const started = Date.now();
  const payload = benchPayload(PAYLOAD_BYTES);
  const systems = await startLanesBench("lanes", {
    namespace: NAMESPACE,
    lanes: [
      { id: PUBLISH_LANE, owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"] },
      // Two subscribers: a project holds at most 32 Follow streams, so 64 followers are spread over both.
      { id: REPLAY_LANE, owner: "atlas", publishers: ["atlas"], subscribers: ["atlas", "beacon"] },
    ],
  });
  const { tokens, nats, monitor, laneway, profileDir } = systems;
  // The orchestrator's own connection reads stream state between runs, never during one.
  const nc = await connect({ servers: nats.url, name: "bench-orchestrator" });
  const jsm = await jetstreamManager(nc);
  const laneStream = streamName(NAMESPACE, PUBLISH_LANE);
  const replayStream = streamName(NAMESPACE, REPLAY_LANE);
  const messagesIn = async (stream: string) => (await jsm.streams.info(stream)).state.messages;
  const cpuNow = async () => ({ laneway: await processCpuUs(laneway.child.pid), nats: await processCpuUs(nats.pid) });

  async function counters(): Promise<Counters> {
    const varz = (await (await fetch(`${monitor}/varz`)).json()) as { in_msgs: number; out_msgs: number };
    const connz = (await (await fetch(`${monitor}/connz?limit=4096`)).json()) as { connections?: { name?: string; in_msgs: number; out_msgs: number }[] };
    const byName = new Map<string, { inMsgs: number; outMsgs: number }>();
    for (const c of connz.connections ?? []) {
      const name = c.name ?? "";
      const sum = byName.get(name) ?? { inMsgs: 0, outMsgs: 0 };
      byName.set(name, { inMsgs: sum.inMsgs + c.in_msgs, outMsgs: sum.outMsgs + c.out_msgs });
    }
    return { inMsgs: varz.in_msgs, outMsgs: varz.out_msgs, byName };
  }
  const delta = (before: Counters, after: Counters, name?: string) => {
    if (name === undefined) return { inMsgs: after.inMsgs - before.inMsgs, outMsgs: after.outMsgs - before.outMsgs };
    const a = after.byName.get(name) ?? { inMsgs: 0, outMsgs: 0 };
    const b = before.byName.get(name) ?? { inMsgs: 0, outMsgs: 0 };
    return { inMsgs: a.inMsgs - b.inMsgs, outMsgs: a.outMsgs - b.outMsgs };
  };

  // The raw baseline's stream: the lane stream's own configuration, another name and subjects.
  const laneConfig = (await jsm.streams.info(laneStream)).config;
  const rawStream = "BENCH-RAW";
  await jsm.streams.add({ ...(laneConfig as StreamConfig), name: rawStream, subjects: [`${RAW_SUBJECTS}.>`] });

  const singleBody = toBinary(
    PublishRequestSchema,
    create(PublishRequestSchema, { lane: PUBLISH_LANE, id: `r${ID_PLACEHOLDER}`, kind: RecordKind.EVENT, schema: "reading-v1", payload }),
  );
  const batchBody = toBinary(
    PublishBatchRequestSchema,
    create(PublishBatchRequestSchema, {
      lane: PUBLISH_LANE,
      records: Array.from({ length: BATCH_SIZE }, (_, i) => ({ id: `r${ID_PLACEHOLDER}-${i}`, kind: RecordKind.EVENT, schema: "reading-v1", payload })),
    }),
  );

  interface Run {
    records: number;
    calls: number;
    seconds: number;
    sent: number;
    received: number;
    /** CPU µs spent during the run: Laneway's process, nats-server's, and the load process's own (raw only). */
    lanewayCpu: number;
    natsCpu: number;
    clientCpu: number | undefined;
  }

  async function lanewayPublish(kind: "single" | "batch", concurrency: number, runSeconds = seconds): Promise<Run> {
    const perCall = kind === "single" ? 1 : BATCH_SIZE;
    const body = kind === "single" ? singleBody : batchBody;
    const before = await counters();
    const streamBefore = await messagesIn(laneStream);
    const cpuBefore = await cpuNow();
    const result = await runJson<LoadResult>("bench/load-generator.ts", [
      JSON.stringify({
        url: laneway.url,
        path: `/laneway.lane.v1.LaneService/${kind === "single" ? "Publish" : "PublishBatch"}`,
        protocol: "binary",
        token: tokens.ATLAS_LANE_TOKEN,
        bodyTemplate: Buffer.from(body).toString("latin1"),
        idPlaceholder: ID_PLACEHOLDER,
        concurrency,
        seconds: runSeconds,
      }),
    ]);
    const cpuAfter = await cpuNow();
    const after = await counters();
    const stored = (await messagesIn(laneStream)) - streamBefore;
    if (result.failed > 0 || stored !== result.completed * perCall) {
      throw new Error(`Laneway ${kind} publish at ${concurrency} in flight: ${result.failed} failed calls; ${stored} records stored for ${result.completed * perCall} acknowledged`);
    }
    const own = delta(before, after, "laneway");
    return {
      records: stored,
      calls: result.completed,
      seconds: result.seconds,
      sent: own.inMsgs,
      received: own.outMsgs,
      lanewayCpu: cpuAfter.laneway - cpuBefore.laneway,
      natsCpu: cpuAfter.nats - cpuBefore.nats,
      clientCpu: undefined,
    };
  }

  async function rawPublish(concurrency: number, runSeconds = seconds): Promise<Run> {
    const before = await counters();
    const streamBefore = await messagesIn(rawStream);
    const cpuBefore = await cpuNow();
    const result = await runJson<LoadResult>("bench/lanes-raw-publisher.ts", [
      JSON.stringify({ url: nats.url, subjectPrefix: `${RAW_SUBJECTS}.p`, payload: Buffer.from(payload).toString("base64"), concurrency, seconds: runSeconds }),
    ]);
    const cpuAfter = await cpuNow();
    const after = await counters();
    const stored = (await messagesIn(rawStream)) - streamBefore;
    if (result.failed > 0 || stored !== result.completed) throw new Error(`raw publish at ${concurrency}: ${result.failed} failed; ${stored} stored for ${result.completed} acknowledged`);
    // The publisher's connection is closed by now: the server-wide counts
    // (nothing else publishes meanwhile) stand for it.
    const all = delta(before, after);
    return {
      records: stored,
      calls: result.completed,
      seconds: result.seconds,
      sent: all.inMsgs,
      received: all.outMsgs,
      lanewayCpu: cpuAfter.laneway - cpuBefore.laneway,
      natsCpu: cpuAfter.nats - cpuBefore.nats,
      clientCpu: result.cpuMicros,
    };
  }

  interface ReadRun {
    records: number;
    pages: number;
    seconds: number;
    sent: number;
    received: number;
    lanewayCpu: number;
    natsCpu: number;
    clientCpu: number | undefined;
  }

  async function read(mode: "laneway" | "follow" | "raw", concurrency: number): Promise<ReadRun> {
    const before = await counters();
    const spec =
      mode === "laneway"
        ? { mode, url: laneway.url, token: tokens.ATLAS_LANE_TOKEN, lane: REPLAY_LANE, concurrency, seconds }
        : mode === "follow"
          ? { mode, url: laneway.url, tokens: [tokens.ATLAS_LANE_TOKEN, tokens.BEACON_LANE_TOKEN], lane: REPLAY_LANE, last: REPLAY_RECORDS, concurrency, seconds }
          : { mode, url: nats.url, stream: replayStream, concurrency, seconds };
    const cpuBefore = await cpuNow();
    const result = await runJson<ReaderResult>("bench/lanes-replay-reader.ts", [JSON.stringify(spec)]);
    const cpuAfter = await cpuNow();
    const after = await counters();
    // Replay and Follow read over Laneway's readers' connection.
    const own = mode === "raw" ? delta(before, after) : delta(before, after, "laneway-lanes-readers");
    return {
      records: result.records,
      pages: result.pages,
      seconds: result.seconds,
      sent: own.inMsgs,
      received: own.outMsgs,
      lanewayCpu: cpuAfter.laneway - cpuBefore.laneway,
      natsCpu: cpuAfter.nats - cpuBefore.nats,
      clientCpu: result.cpuMicros,
    };
  }

  let lanewayStopped = false;
  try {
    // The replayed lane: 20,000 events, published in batches before anything is measured.
    const setupTransport = createLanewayTransport({ baseUrl: laneway.url, token: tokens.ATLAS_LANE_TOKEN, protocol: "connect-binary" });
    const client = createClient(LaneService, setupTransport.transport);
    for (let offset = 0; offset < (parts.has("read") ? REPLAY_RECORDS : 0); offset += BATCH_SIZE * 8) {
      await Promise.all(
        Array.from({ length: 8 }, async (_, b) => {
          const from = offset + b * BATCH_SIZE;
          const count = Math.min(BATCH_SIZE, REPLAY_RECORDS - from);
          if (count <= 0) return;
          const answer = await client.publishBatch({
            lane: REPLAY_LANE,
            records: Array.from({ length: count }, (_, i) => ({ id: `h${from + i}`, kind: RecordKind.EVENT, schema: "reading-v1", payload })),
          });
          const failed = answer.results.filter((r) => r.outcome.case !== "published").length;
          if (failed > 0) throw new Error(`${failed} records of the replay lane failed to publish`);
        }),
      );
    }
    setupTransport.close();
    if (parts.has("read") && (await messagesIn(replayStream)) !== REPLAY_RECORDS) throw new Error("the replay lane does not hold the records published to it");

    // Warm-up: JIT, connections, stream files.
    if (parts.has("publish")) {
      await rawPublish(16, 1);
      if (publishTargets.includes("single")) await lanewayPublish("single", 16, 1);
      if (publishTargets.includes("batch")) await lanewayPublish("batch", 4, 1);
    }
    if (parts.has("read")) {
      await read("laneway", 1);
      await read("follow", 1);
      await read("raw", 1);
    }

    const targets = publishTargets;
    const runs = new Map<string, Run[]>();
    const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
    const windows: ProfileWindow[] = [];
    for (let round = 0; round < (parts.has("publish") ? rounds : 0); round++) {
      for (const concurrency of concurrencies) {
        for (const target of targets) {
          const startUs = monotonicUs();
          const run = target === "raw" ? await rawPublish(concurrency) : await lanewayPublish(target, concurrency);
          if (target !== "raw") windows.push({ label: `${target}@${concurrency}`, startUs, endUs: monotonicUs() });
          const key = `${target}@${concurrency}`;
          runs.set(key, [...(runs.get(key) ?? []), run]);
        }
      }
    }
    const readRuns = new Map<string, ReadRun[]>();
    for (let round = 0; round < (parts.has("read") ? rounds : 0); round++) {
      for (const concurrency of concurrencies) {
        for (const mode of ["raw", "laneway", "follow"] as const) {
          const key = `${mode}@${concurrency}`;
          readRuns.set(key, [...(readRuns.get(key) ?? []), await read(mode, concurrency)]);
        }
      }
    }
    const elapsed = (Date.now() - started) / 1000;

    const names = {
      raw: "raw JetStream js.publish, acked (baseline)",
      single: "Laneway Publish (Connect binary)",
      batch: `Laneway PublishBatch, ${BATCH_SIZE}/call (Connect binary)`,
    } as const;
    const rate = (r: Run | ReadRun) => r.records / r.seconds;
    /** A per-record figure over all rounds of a row (sums over sums, so no round's noise dominates). */
    const perRecord = (list: readonly (Run | ReadRun)[], field: "sent" | "received" | "lanewayCpu" | "natsCpu" | "clientCpu", digits = 2) => {
      const records = list.reduce((s, r) => s + r.records, 0);
      if (list.some((r) => r[field] === undefined)) return "";
      return (list.reduce((s, r) => s + (r[field] ?? 0), 0) / records).toFixed(digits);
    };
    const ratios = new Map<string, number>();
    if (parts.has("publish")) {
      console.log(`\nLanes publish: ${rounds} rounds of ${seconds}s, medians; ${PAYLOAD_BYTES} B payloads; one nats-server (JetStream, file storage)\n`);
      const rows: string[][] = [];
      for (const concurrency of concurrencies) {
        const base = median(runs.get(`raw@${concurrency}`)!.map(rate));
        for (const target of targets) {
          const list = runs.get(`${target}@${concurrency}`)!;
          const value = median(list.map(rate));
          ratios.set(`${target}@${concurrency}`, value / base);
          rows.push([
            names[target],
            String(concurrency),
            value.toFixed(0),
            (value / base).toFixed(2),
            median(list.map((r) => r.calls / r.seconds)).toFixed(0),
            perRecord(list, "sent"),
            perRecord(list, "received"),
            target === "raw" ? "" : perRecord(list, "lanewayCpu", 0),
            perRecord(list, "natsCpu", 0),
            perRecord(list, "clientCpu", 0),
          ]);
        }
      }
      printTable(
        ["target", "in flight", "records/s", "ratio to raw", "calls/s", "broker msgs sent/rec", "recv/rec", "Laneway CPU µs/rec", "nats-server CPU µs/rec", "client CPU µs/rec"],
        rows,
      );
      console.log(
        [
          "",
          `Rounds (records/s): ${[...runs.entries()].map(([key, list]) => `${key} ${list.map((r) => rate(r).toFixed(0)).join(", ")}`).join("; ")}.`,
          "in flight: calls awaiting an answer (a PublishBatch call carries 128 records). Every Laneway record was checked",
          "to be in the lane stream afterwards (stream growth = records acknowledged).",
          "broker msgs sent/record: for Laneway, messages its connection sent to nats-server per record (each a request or",
          "an acknowledged publish: one broker round trip), received = answers; for raw, all messages the server received",
          "(the publish) and sent (the PubAck) per message.",
          "CPU µs/rec: process CPU time (user + system, from /proc) over the runs of a row divided by the records they",
          "published; client: the raw publisher's own process (Laneway's load generator is not counted).",
        ].join("\n"),
      );
    }
    if (parts.has("read")) {
      console.log(`\nLanes replay: reading the ${REPLAY_RECORDS}-record lane from the start, again and again; ${rounds} rounds of ${seconds}s, medians\n`);
      const readRows: string[][] = [];
      for (const concurrency of concurrencies) {
        const base = median(readRuns.get(`raw@${concurrency}`)!.map(rate));
        for (const mode of ["raw", "laneway", "follow"] as const) {
          const list = readRuns.get(`${mode}@${concurrency}`)!;
          const value = median(list.map(rate));
          ratios.set(`replay-${mode}@${concurrency}`, value / base);
          const pages = list.reduce((s, r) => s + r.pages, 0);
          readRows.push([
            mode === "raw" ? "raw ordered consumer (baseline)" : mode === "laneway" ? "Laneway Replay, 128 events/page (Connect binary)" : "Laneway Follow, from 0 to the end (Connect binary)",
            String(concurrency),
            value.toFixed(0),
            (value / base).toFixed(2),
            mode === "raw" ? "" : median(list.map((r) => r.pages / r.seconds)).toFixed(0),
            mode === "raw" ? "" : (list.reduce((s, r) => s + r.sent, 0) / pages).toFixed(1),
            mode === "raw" ? "" : (list.reduce((s, r) => s + r.received, 0) / pages).toFixed(1),
            mode === "raw" ? "" : perRecord(list, "lanewayCpu", 1),
            perRecord(list, "natsCpu", 1),
            perRecord(list, "clientCpu", 1),
          ]);
        }
      }
      printTable(
        ["reader", "readers", "records/s", "ratio to raw", "pages/s", "broker msgs sent/page", "recv/page", "Laneway CPU µs/rec", "nats-server CPU µs/rec", "reader CPU µs/rec"],
        readRows,
      );
    }
    const batchGoal = ratios.get("batch@64") ?? Number.NaN;
    const singleGoal = ratios.get("single@64") ?? Number.NaN;
    const readGoals = (["laneway", "follow"] as const).flatMap((mode) =>
      concurrencies.map((c) => {
        const ratio = ratios.get(`replay-${mode}@${c}`) ?? Number.NaN;
        return `${mode === "laneway" ? "Replay" : "Follow"} at ${c} reader${c === 1 ? "" : "s"} ${ratio.toFixed(2)}× (${ratio >= 0.5 ? "met" : "missed"})`;
      }),
    );
    console.log(
      [
        "",
        `Rounds (records/s): ${[...readRuns.entries()].map(([key, list]) => `${key} ${list.map((r) => rate(r).toFixed(0)).join(", ")}`).join("; ")}.`,
        "readers: concurrent readers, each paging (or consuming) the whole lane from its start; Laneway's answers",
        "per page include every event's envelope decoded and re-encoded as Protobuf. Broker messages per page are",
        "those of Laneway's readers' connection (laneway-lanes-readers).",
        "",
        `Goals: PublishBatch at 64 in flight ≥ 0.2× raw JetStream: ${batchGoal.toFixed(2)}× (${batchGoal >= 0.2 ? "met" : "missed"}); ` +
          `Publish at 64 in flight ≥ 0.1×: ${singleGoal.toFixed(2)}× (${singleGoal >= 0.1 ? "met" : "missed"}); ` +
          `Replay and Follow ≥ 0.5× the raw ordered consumer: ${readGoals.join(", ")}.`,
        profileDir ? `CPU profile of the Laneway process: ${profileDir}` : "",
        `(lanes-publish took ${elapsed.toFixed(0)} s)`,
      ]
        .filter((line) => line !== "")
        .join("\n"),
    );
    if (profileDir !== undefined && windows.length > 0) {
      await laneway.stop();
      lanewayStopped = true;
      const path = await newestProfile(profileDir, started);
      console.log("");
      if (path === undefined) console.log(`(no .cpuprofile was written to ${profileDir})`);
      else {
        await writeFile(join(profileDir, "windows.json"), JSON.stringify(windows));
        await summarizeProfile(path, windows, 30);
      }
    }
  } finally {
    await nc.close();
    await systems.stop({ lanewayStopped });
  }
}
