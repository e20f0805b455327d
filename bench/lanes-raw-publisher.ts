/**
 * The raw JetStream baseline of `npm run bench lanes-publish`, run as its
 * own process: `concurrency` callers each send an acknowledged JetStream
 * publish (`js.publish`, waiting for the PubAck) as soon as the previous one
 * was acknowledged, for `seconds`. Each message goes to its own subject
 * (`<subjectPrefix>.<n>`), as a lane record does, and carries the same
 * payload bytes the Laneway runs publish.
 *
 * Usage (argv[2] is JSON): {url, subjectPrefix, payload (base64), concurrency, seconds}
 * Prints {completed, failed, seconds, cpuMicros} (cpuMicros: this process's CPU time while publishing).
 */
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

interface Spec {
  url: string;
  subjectPrefix: string;
  payload: string;
  concurrency: number;
  seconds: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const payload = Buffer.from(spec.payload, "base64");
const nc = await connect({ servers: spec.url, name: "bench-raw-publisher" });
const js = jetstream(nc);
const runId = process.pid.toString(36);
let completed = 0;
let failed = 0;
let next = 0;
const cpuAtStart = process.cpuUsage();
const startedAt = Date.now();
const deadline = startedAt + spec.seconds * 1000;

async function caller(): Promise<void> {
  while (Date.now() < deadline) {
    try {
      await js.publish(`${spec.subjectPrefix}.r${runId}-${next++}`, payload);
      completed++;
    } catch {
      failed++;
    }
  }
}

await Promise.all(Array.from({ length: spec.concurrency }, caller));
const seconds = (Date.now() - startedAt) / 1000;
await nc.close();
const cpu = process.cpuUsage(cpuAtStart);
process.stdout.write(JSON.stringify({ completed, failed, seconds, cpuMicros: cpu.user + cpu.system }) + "\n");
