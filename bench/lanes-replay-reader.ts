/**
 * The readers of `npm run bench lanes-publish`, run as their own process
 * so that no client CPU is charged to the server under test.
 *
 * - `laneway`: `concurrency` readers, each paging through the lane with
 *   Replay from cursor 0 (128 events a page, the most a page returns) on
 *   the generated client over Connect binary, starting again from 0 at the
 *   lane's end, for `seconds`.
 * - `follow`: `concurrency` readers, each following the lane from cursor 0
 *   on the generated client over Connect binary until its cursor reaches
 *   `last` (the lane's last sequence), then closing the stream and
 *   following again from 0, for `seconds`; reader i uses `tokens[i %
 *   tokens.length]` (a project holds at most 32 Follow streams).
 * - `raw`: `concurrency` readers, each reading the same lane's stream with
 *   an ordered consumer from its first sequence to its last, starting again
 *   with a new ordered consumer at the end, for `seconds`.
 *
 * Both count records delivered to the reader; neither decodes them further
 * (Laneway's client decodes the Protobuf response, the raw reader gets the
 * stored envelope bytes).
 *
 * Usage (argv[2] is JSON):
 *   {mode: "laneway", url, token, lane, concurrency, seconds}
 *   {mode: "raw", url, stream, concurrency, seconds}
 * Prints {records, pages, passes, seconds, cpuMicros} (cpuMicros: this process's CPU time while reading).
 * With READER_CPU_PROFILE=<file>, the reading is CPU-profiled into that file.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { dirname } from "node:path";
import { createClient } from "@connectrpc/connect";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { LaneService } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";

type Spec =
  | { mode: "laneway"; url: string; token: string; lane: string; concurrency: number; seconds: number }
  | { mode: "follow"; url: string; tokens: string[]; lane: string; last: number; concurrency: number; seconds: number }
  | { mode: "raw"; url: string; stream: string; concurrency: number; seconds: number };

const spec = JSON.parse(process.argv[2]!) as Spec;
const profileFile = process.env.READER_CPU_PROFILE;
const profiler = profileFile ? new Session() : undefined;
if (profiler !== undefined) {
  profiler.connect();
  await profiler.post("Profiler.enable");
  await profiler.post("Profiler.start");
}
let records = 0;
let pages = 0;
let passes = 0;
const cpuAtStart = process.cpuUsage();
const startedAt = Date.now();
const deadline = startedAt + spec.seconds * 1000;

if (spec.mode === "laneway") {
  const transport = createLanewayTransport({ baseUrl: spec.url, token: spec.token, protocol: "connect-binary" });
  const client = createClient(LaneService, transport.transport);
  const reader = async () => {
    let cursor = 0n;
    while (Date.now() < deadline) {
      const page = await client.replay({ lane: spec.lane, cursor });
      records += page.events.length;
      pages++;
      cursor = page.cursor;
      if (cursor >= page.lastSequence) {
        cursor = 0n;
        passes++;
      }
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, reader));
  transport.close();
} else if (spec.mode === "follow") {
  // One client per token: a project holds at most 32 Follow streams, so the readers take the tokens in turn.
  const transports = spec.tokens.map((token) => createLanewayTransport({ baseUrl: spec.url, token, protocol: "connect-binary" }));
  const clients = transports.map((t) => createClient(LaneService, t.transport));
  const reader = async (_: unknown, index: number) => {
    const client = clients[index % clients.length]!;
    while (Date.now() < deadline) {
      const abort = new AbortController();
      try {
        for await (const page of client.follow({ lane: spec.lane, cursor: 0n }, { signal: abort.signal })) {
          records += page.events.length;
          pages++;
          if (page.cursor >= BigInt(spec.last) || Date.now() >= deadline) break;
        }
      } finally {
        abort.abort();
      }
      passes++;
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, reader));
  for (const t of transports) t.close();
} else {
  const nc = await connect({ servers: spec.url, name: "bench-raw-reader" });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const { state } = await jsm.streams.info(spec.stream);
  const reader = async () => {
    while (Date.now() < deadline) {
      const consumer = await js.consumers.get(spec.stream, { deliver_policy: DeliverPolicy.All });
      const messages = await consumer.consume();
      for await (const message of messages) {
        records++;
        if (message.seq >= state.last_seq || Date.now() >= deadline) break;
      }
      await messages.close();
      passes++;
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, reader));
  await nc.close();
}
const seconds = (Date.now() - startedAt) / 1000;
const cpu = process.cpuUsage(cpuAtStart);
if (profiler !== undefined) {
  const { profile } = await profiler.post("Profiler.stop");
  await mkdir(dirname(profileFile!), { recursive: true });
  await writeFile(profileFile!, JSON.stringify(profile));
}
process.stdout.write(JSON.stringify({ records, pages, passes, seconds, cpuMicros: cpu.user + cpu.system }) + "\n");
