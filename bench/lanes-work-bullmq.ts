/**
 * The BullMQ baseline of `npm run bench lanes-work`, run as its own
 * process: one BullMQ Worker with `concurrency` slots on a queue the
 * orchestrator filled with exactly `items` jobs (addBulk; `data.i` numbers
 * them 0..items-1) before starting it. The processor does nothing; the
 * worker completes jobs until every one is completed. Completed jobs are
 * kept for 1 s (`removeOnComplete: {age: 1}`), as Laneway keeps
 * acknowledgements for the lane's ack_retention of 1 s in this benchmark.
 *
 * Checked here: every job was processed exactly once and completed, none
 * failed. The orchestrator then checks the queue has nothing waiting,
 * active, delayed or failed.
 *
 * Usage (argv[2] is JSON): {host, port, prefix, queue, items, concurrency}
 * Prints {items, seconds, cpuMicros, errors}.
 */
import { Worker } from "bullmq";

interface Spec {
  host: string;
  port: number;
  prefix: string;
  queue: string;
  items: number;
  concurrency: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const handled = new Uint8Array(spec.items);
let duplicates = 0;
let outOfRange = 0;
let completed = 0;
let failedJobs = 0;
let firstError: string | undefined;
let endedAt = 0;
let done: () => void = () => {};
const allDone = new Promise<void>((resolve) => (done = resolve));

const worker = new Worker(
  spec.queue,
  async (job) => {
    const index = (job.data as { i: number }).i;
    if (!(index >= 0 && index < spec.items)) outOfRange += 1;
    else if (handled[index]!++ > 0) duplicates += 1;
  },
  {
    connection: { host: spec.host, port: spec.port },
    prefix: spec.prefix,
    concurrency: spec.concurrency,
    autorun: false,
    removeOnComplete: { age: 1 },
    drainDelay: 1,
  },
);
worker.on("completed", () => {
  completed += 1;
  if (completed === spec.items) {
    endedAt = performance.now();
    done();
  }
});
worker.on("failed", (_job, error) => {
  failedJobs += 1;
  firstError ??= error.message;
});
worker.on("error", (error) => {
  firstError ??= error.message;
});
await worker.waitUntilReady();

const cpuAtStart = process.cpuUsage();
const startedAt = performance.now();
const running = worker.run();
const giveUp = setTimeout(() => {
  endedAt = performance.now();
  done();
}, 60_000 + spec.items);
await allDone;
clearTimeout(giveUp);
const cpu = process.cpuUsage(cpuAtStart);
await worker.close();
await running;

const missing = handled.reduce((n, h) => n + (h === 0 ? 1 : 0), 0);
let errors = failedJobs;
if (duplicates > 0 || outOfRange > 0 || missing > 0 || completed !== spec.items) {
  errors += 1;
  firstError ??= `${missing} of ${spec.items} jobs never processed, ${duplicates} processed twice, ${outOfRange} unknown, ${completed} completed`;
}
process.stdout.write(JSON.stringify({ items: completed, seconds: (endedAt - startedAt) / 1000, cpuMicros: cpu.user + cpu.system, errors, firstError }) + "\n");
