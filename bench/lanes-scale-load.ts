/**
 * The load generator of `npm run bench lanes-scale`, one process for every
 * run so that the runs with one and with two replicas meet the same
 * generator: `publishers` loops publishing work (PublishBatch, `batch`
 * records a call, a fresh id per record) and `workers` loops claiming
 * (ClaimBatch, up to `batch`, waiting up to 200 ms) and acknowledging
 * (AckBatch) on one group, for `seconds`. Loop i talks to `urls[i %
 * urls.length]`: the load is spread evenly over the replicas.
 *
 * Publishers keep at most `backlog` records published and not yet
 * acknowledged (default: two batches per publisher): publication stays in
 * step with the workers, so that every run publishes about as many records
 * as it acknowledges and CPU per item compares runs that did the same work
 * (unbounded, publishers outran the workers by a different share in each
 * run).
 *
 * Checked: every publication and every ack succeeded (an ack answered
 * with an error, or a record failing to publish, is an error).
 *
 * Usage (argv[2] is JSON): {urls, publisherToken, workerToken, lane, group, tag, publishers, workers, batch, seconds}
 * Prints {published, acked, seconds, errors, firstError?, cpuMicros}.
 */
import { createClient } from "@connectrpc/connect";
import { LaneService, RecordKind } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";

interface Spec {
  urls: string[];
  publisherToken: string;
  workerToken: string;
  lane: string;
  group: string;
  tag: string;
  publishers: number;
  workers: number;
  batch: number;
  seconds: number;
  backlog?: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const transports = spec.urls.flatMap((url) => [
  createLanewayTransport({ baseUrl: url, token: spec.publisherToken, protocol: "connect-binary" }),
  createLanewayTransport({ baseUrl: url, token: spec.workerToken, protocol: "connect-binary" }),
]);
const publishers = spec.urls.map((_, i) => createClient(LaneService, transports[2 * i]!.transport));
const workers = spec.urls.map((_, i) => createClient(LaneService, transports[2 * i + 1]!.transport));
const payload = Buffer.from(JSON.stringify({ job: "x".repeat(160) }));
const cpuAtStart = process.cpuUsage();
const startedAt = Date.now();
const deadline = startedAt + spec.seconds * 1000;
let published = 0;
let acked = 0;
let errors = 0;
let firstError: string | undefined;
let ids = 0;
const fail = (message: string) => {
  errors += 1;
  firstError ??= message;
};

const backlog = spec.backlog ?? 2 * spec.batch * spec.publishers;
/** Records published and not yet acknowledged, counting the batches on their way. */
let ahead = 0;
const publisher = async (index: number) => {
  const client = publishers[index % publishers.length]!;
  while (Date.now() < deadline) {
    if (ahead + spec.batch > backlog) {
      await new Promise((resolve) => setTimeout(resolve, 2));
      continue;
    }
    ahead += spec.batch;
    const base = ids;
    ids += spec.batch;
    try {
      const answer = await client.publishBatch({
        lane: spec.lane,
        records: Array.from({ length: spec.batch }, (_, i) => ({ id: `${spec.tag}-${base + i}`, kind: RecordKind.WORK, schema: "job-v1", payload })),
      });
      for (const result of answer.results) {
        if (result.outcome.case === "published") published += 1;
        else {
          ahead -= 1;
          fail(`publish: ${result.outcome.value?.message ?? "no outcome"}`);
        }
      }
    } catch (error) {
      ahead -= spec.batch;
      fail(`publish: ${String(error)}`);
    }
  }
};

const worker = async (index: number) => {
  const client = workers[index % workers.length]!;
  while (Date.now() < deadline) {
    try {
      const { work } = await client.claimBatch({ lane: spec.lane, group: spec.group, maxRecords: spec.batch, wait: { seconds: 0n, nanos: 200_000_000 } });
      if (work.length === 0) continue;
      const answer = await client.ackBatch({ lane: spec.lane, group: spec.group, receipts: work.map((w) => ({ sequence: w.record!.sequence, receipt: w.receipt })) });
      for (const result of answer.results) {
        if (result.outcome.case === "acked") {
          acked += 1;
          ahead -= 1;
        }
        else fail(`ack: ${result.outcome.value?.message ?? "no outcome"}`);
      }
    } catch (error) {
      fail(`claim or ack: ${String(error)}`);
    }
  }
};

await Promise.all([...Array.from({ length: spec.publishers }, (_, i) => publisher(i)), ...Array.from({ length: spec.workers }, (_, i) => worker(i))]);
const seconds = (Date.now() - startedAt) / 1000;
for (const t of transports) t.close();
const cpu = process.cpuUsage(cpuAtStart);
process.stdout.write(JSON.stringify({ published, acked, seconds, errors, firstError, cpuMicros: cpu.user + cpu.system }) + "\n");
