/**
 * A latency probe of single Claim and Ack calls at one worker: starts the
 * systems of `npm run bench lanes-work` (a nats-server and `laneway
 * serve`), publishes N work records, then times N Claim + Ack pairs one at
 * a time from this process, and prints the median and p90 of each call,
 * with the broker messages Laneway's connection sent per call (from the
 * monitoring port). Not part of `npm run bench`: a tool for finding where
 * a single call's time goes (`node --import tsx bench/lanes-work-probe.ts [N]`).
 */
import { createClient } from "@connectrpc/connect";
import { LaneService, RecordKind } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";
import { benchPayload, median, percentile, startLanesBench } from "./harness.js";

const n = Number(process.argv[2]) || 300;
const systems = await startLanesBench("probe", {
  namespace: "bench",
  lanes: [{ id: "jobs", owner: "atlas", publishers: ["atlas"], subscribers: ["atlas"], groups: { workers: ["beacon"] }, recoverers: { workers: ["beacon"] } }],
});
const sent = async () => {
  const connz = (await (await fetch(`${systems.monitor}/connz?limit=4096`)).json()) as { connections?: { name?: string; in_msgs: number }[] };
  return (connz.connections ?? []).filter((c) => c.name === "laneway").reduce((s, c) => s + c.in_msgs, 0);
};
const atlasT = createLanewayTransport({ baseUrl: systems.laneway.url, token: systems.tokens.ATLAS_LANE_TOKEN, protocol: "connect-binary" });
const beaconT = createLanewayTransport({ baseUrl: systems.laneway.url, token: systems.tokens.BEACON_LANE_TOKEN, protocol: "connect-binary" });
const atlas = createClient(LaneService, atlasT.transport);
const beacon = createClient(LaneService, beaconT.transport);
try {
  const payload = benchPayload(200);
  for (let i = 0; i < n + 50; i += 100) {
    await atlas.publishBatch({ lane: "jobs", records: Array.from({ length: 100 }, (_, k) => ({ id: `p-${i + k}`, kind: RecordKind.WORK, schema: "job-v1", payload })) });
  }
  const claims: number[] = [];
  const acks: number[] = [];
  const inspects: number[] = [];
  // Warm-up.
  for (let i = 0; i < 50; i++) {
    const { work } = await beacon.claim({ lane: "jobs", group: "workers", wait: { seconds: 1n, nanos: 0 } });
    await beacon.ack({ lane: "jobs", group: "workers", sequence: work!.record!.sequence, receipt: work!.receipt });
  }
  const before = await sent();
  for (let i = 0; i < n; i++) {
    let t = performance.now();
    const { work } = await beacon.claim({ lane: "jobs", group: "workers", wait: { seconds: 1n, nanos: 0 } });
    claims.push(performance.now() - t);
    t = performance.now();
    await beacon.ack({ lane: "jobs", group: "workers", sequence: work!.record!.sequence, receipt: work!.receipt });
    acks.push(performance.now() - t);
  }
  const messages = (await sent()) - before;
  for (let i = 0; i < 100; i++) {
    const t = performance.now();
    await beacon.getRegistry({});
    inspects.push(performance.now() - t);
  }
  const f = (xs: number[]) => `median ${median(xs).toFixed(2)} ms, p90 ${percentile(xs, 90).toFixed(2)} ms`;
  console.log(`Claim: ${f(claims)}\nAck: ${f(acks)}\nGetRegistry (no broker): ${f(inspects)}\nbroker messages sent by Laneway per Claim+Ack: ${(messages / n).toFixed(2)}`);
} finally {
  atlasT.close();
  beaconT.close();
  await systems.stop();
}
