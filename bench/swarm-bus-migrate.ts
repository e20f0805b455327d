/**
 * The migration process of `npm run bench swarm-bus`: moves a legacy lane
 * queue that holds `count` messages into the swarm's scoped lane queue.
 *
 * - `bus`: the hub's root bus (scoped, provisioning, its service
 *   credential) calling `migrateQueue(swarm, "swarm.<swarm>.ready.eng")`,
 *   with a progress display on stderr (the `onProgress` callback).
 * - `raw`: the same copy written directly against JetStream: pull 256
 *   from the legacy durable consumer, publish each copy with the same
 *   headers and message id, wait for the copies, confirm each legacy ack —
 *   without the pending mark, the checks (start point, other swarms' work,
 *   held work) or resumability.
 *
 * Usage (argv[2] is JSON): {mode, url, credentials (a .creds path; empty: none), swarm, count}
 * Prints {moved, seconds, cpuMicros}.
 */
import { readFile } from "node:fs/promises";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, headers as natsHeaders } from "@nats-io/transport-node";
import type { MigrationProgress } from "../src/swarm/index.js";
import { openBus, queueWorkSubject } from "../src/swarm-bus/index.js";
import { BUS_HEADERS, legacyQueueStreamName } from "../src/swarm-bus/internal.js";

interface Spec {
  mode: "bus" | "raw";
  url: string;
  credentials: string;
  swarm: string;
  count: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const name = `swarm.${spec.swarm}.ready.eng`;
const cpuAtStart = process.cpuUsage();
const startedAt = performance.now();
let moved = 0;

/** One line per tenth of the way (a terminal would redraw one line; a log keeps these). */
function display(label: string): (p: MigrationProgress) => void {
  let shown = 0;
  return (p) => {
    const done = p.copied + p.skipped;
    const tenth = Math.floor((done / Math.max(1, p.total)) * 10);
    if (tenth <= shown && done !== p.total) return;
    shown = tenth;
    const rate = done / ((performance.now() - startedAt) / 1000);
    process.stderr.write(`  ${label} ${name}: ${done.toLocaleString("en")} / ${p.total.toLocaleString("en")} (${Math.round((done / Math.max(1, p.total)) * 100)}%), ${Math.round(rate).toLocaleString("en")} msg/s\n`);
  };
}

if (spec.mode === "bus") {
  const bus = await openBus({ backend: "nats", url: spec.url, ...(spec.credentials ? { credentials: spec.credentials } : {}), scoped: true, bind: false, connectionName: "bench-hub-migrate" });
  const result = await bus.migrateQueue({ swarm: spec.swarm, name, onProgress: display("migrateQueue") });
  moved = result.copied + result.skipped;
  await bus.close();
} else {
  const nc = await connect({ servers: spec.url, ...(spec.credentials ? { authenticator: credsAuthenticator(await readFile(spec.credentials)) } : {}), reconnect: false, noAsyncTraces: true, name: "bench-hub-raw-copy" });
  const js = jetstream(nc, { timeout: 10_000 });
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const legacy = legacyQueueStreamName(name);
  const consumer = await js.consumers.get(legacy, "eng");
  const target = queueWorkSubject(spec.swarm, "eng");
  const show = display("raw copy");
  for (;;) {
    const info = await jsm.consumers.info(legacy, "eng");
    if (info.num_pending === 0 && info.num_ack_pending === 0) break;
    const batch = [];
    for await (const m of await consumer.fetch({ max_messages: Math.min(256, info.num_pending || info.num_ack_pending), expires: 1_000 })) batch.push(m);
    await Promise.all(
      batch.map((m) => {
        const h = natsHeaders();
        h.set(BUS_HEADERS.priorAttempts, String(m.info.deliveryCount - 1));
        h.set(BUS_HEADERS.migratedFrom, `${legacy}/${m.seq}`);
        return js.publish(target, m.data, { headers: h, msgID: `migrate:${legacy}:${m.seq}` });
      }),
    );
    await Promise.all(batch.map((m) => m.ackAck()));
    moved += batch.length;
    show({ copied: moved, skipped: 0, total: spec.count });
  }
  await nc.close();
}
const seconds = (performance.now() - startedAt) / 1000;
const cpu = process.cpuUsage(cpuAtStart);
process.stdout.write(`${JSON.stringify({ moved, seconds, cpuMicros: cpu.user + cpu.system })}\n`);
process.exit(0);
