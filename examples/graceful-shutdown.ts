import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService, RecordKind } from "laneway/client";
import { Participant } from "laneway/participant";

// A worker that shuts down gracefully on SIGTERM: it stops claiming, lets
// the handler that can finish finish (acked), aborts the one still running
// when the grace ends (nacked, so it is retried), and leaves unclaimed work
// in the group. The next worker gets everything that was not completed.
const baseUrl = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const atlasTransport = createLanewayTransport({ baseUrl, token: process.env.ATLAS_LANE_TOKEN });
const beaconTransport = createLanewayTransport({ baseUrl, token: process.env.BEACON_LANE_TOKEN });
const atlas = createClient(LaneService, atlasTransport.transport);
const beacon = createClient(LaneService, beaconTransport.transport);

for (const id of ["quick-one", "slow-one", "later-one"]) {
  await atlas.publish({ lane: "measurements", id, kind: RecordKind.WORK, schema: "shutdown-v1", payload: new Uint8Array() });
}

let terminated!: () => void;
const sigterm = new Promise<void>((resolve) => (terminated = resolve));
const started = new Set<string>();
const log: string[] = [];

const worker = new Participant({ client: beacon, lane: "measurements", group: "summarizers", concurrency: 2 });
process.once("SIGTERM", () => {
  terminated();
  void worker.stop(1_000); // running handlers get one second, then their signals abort
});
worker.handle("shutdown-v1", "atlas", async (work, signal) => {
  started.add(work.id);
  if (started.size === 2) process.kill(process.pid, "SIGTERM"); // as an orchestrator would
  await sigterm;
  if (work.id === "quick-one") {
    log.push(`${work.id}: finished after SIGTERM`);
    return;
  }
  // Work that honors its signal stops when the grace ends.
  await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  log.push(`${work.id}: aborted at the end of the grace`);
  signal.throwIfAborted();
});
await worker.run(); // resolves once every claimed record is acked or nacked
console.log(log.sort().join("\n"));
console.log(`first worker: claimed ${worker.stats.claimed}, acked ${worker.stats.acked}, nacked ${worker.stats.nacked}`);

// The next worker: the nacked delivery comes back (attempt 2), the unclaimed one is fresh.
const next = new Participant({ client: beacon, lane: "measurements", group: "summarizers" });
const redone = new Map<string, number>();
next.handle("shutdown-v1", "atlas", async (work) => {
  redone.set(work.id, work.attempt);
  if (redone.size === 2) void next.stop();
});
await next.run();
for (const [id, attempt] of [...redone].sort()) console.log(`next worker: ${id}, attempt ${attempt}`);

atlasTransport.close();
beaconTransport.close();
