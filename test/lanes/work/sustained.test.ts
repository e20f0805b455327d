import { readFile } from "node:fs/promises";
import { ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { Participant } from "../../../src/participant/index.js";
import { exampleLanesConfig, generateTokens, startLanewayProcess, type ChildLaneway } from "../../helpers/laneway.js";
import { reasonOf, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { completedCount, groupBucketUsage, inspectGroup, publishWork } from "../../helpers/work.js";

/**
 * A work group keeps up with a sustained load, with the default bounds
 * (max_ledger 256, max_pending 64, ack_retention 24 h): the specification's
 * example lane (`measurements`, group `summarizers`, beacon working what
 * atlas publishes — what `npm start` serves), `laneway serve` as a child
 * process, the participant library with 64 handlers in this process.
 *
 * Work is published and completed in phases up to each checkpoint (1,000,
 * 10,000 items; LANEWAY_SUSTAINED_ITEMS=100000 adds 100,000). At each
 * checkpoint — every item so far acknowledged, nothing in flight — the
 * group holds no unfinished delivery, its completion history is one range
 * (work completed within one history bucket merges, however it was
 * ordered), and its stored state is the same size within a few bytes
 * (sequences and counts grow by a varint byte now and then): it does not
 * grow with completions. Every item is acknowledged once, no claim meets
 * lane_capacity. Laneway's resident memory is printed at each checkpoint.
 */

const EXTRA = Number(process.env.LANEWAY_SUSTAINED_ITEMS ?? 0);
const CHECKPOINTS = [1_000, 10_000, ...(EXTRA > 10_000 ? [EXTRA] : [])];
const tokens = generateTokens();

let nats: NatsServerHandle;
let laneway: ChildLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig({ namespace: "sustained" }), tokens });
  atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: tokens.beacon, protocol: "connect-binary" });
}, 120_000);

afterAll(async () => {
  await laneway?.remove();
  await nats?.remove();
});

/** The child's resident and peak memory, in MiB. */
async function memoryOf(pid: number): Promise<{ rss: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0) / 1024;
  return { rss: field("VmRSS"), peak: field("VmHWM") };
}

test(`${CHECKPOINTS.at(-1)!.toLocaleString("en")} work items through one group with the default bounds: each acknowledged once, no lane_capacity, the stored group state flat`, async () => {
  const handled = new Map<bigint, number>();
  const failures = new Map<string, number>();
  const participant = new Participant({
    client: beacon,
    lane: "measurements",
    group: "summarizers",
    concurrency: 64,
    waitMs: 1_000,
    onError: (error) => {
      const reason = reasonOf(ConnectError.from(error)) ?? "transport";
      failures.set(reason, (failures.get(reason) ?? 0) + 1);
    },
  });
  participant.handle("job-v1", "atlas", async (work) => {
    handled.set(work.sequence, (handled.get(work.sequence) ?? 0) + 1);
  });
  const running = participant.run();
  const report: string[] = [];
  const sizes: number[] = [];
  let published = 0;
  try {
    for (const checkpoint of CHECKPOINTS) {
      for (let offset = published; offset < checkpoint; offset += 5_000) {
        const count = Math.min(5_000, checkpoint - offset);
        await publishWork(atlas, "measurements", Array.from({ length: count }, (_, i) => `item-${offset + i}`), { parallel: 4 });
      }
      published = checkpoint;
      await waitFor(() => participant.stats.acked >= checkpoint, { timeoutMs: 600_000, intervalMs: 100, what: `${checkpoint} acknowledgements` });
      const group = await inspectGroup(beacon, "measurements", "summarizers");
      const usage = await groupBucketUsage(nats.url, "sustained", "measurements", "summarizers");
      const memory = await memoryOf(laneway.pid);
      // Quiescent: nothing unfinished, every completion in the history, merged into one range.
      expect(group.deliveries).toEqual([]);
      expect(completedCount(group)).toBe(checkpoint);
      expect(group.completions.flatMap((b) => b.ranges).length).toBe(1);
      sizes.push(usage.valueBytes!);
      report.push(
        `${checkpoint.toLocaleString("en")} items: state ${usage.valueBytes} bytes (history ${group.historyBytes} of ${group.historyBudget}, slots ${group.slots}, revision ${group.revision}); Laneway RSS ${memory.rss.toFixed(0)} MiB (peak ${memory.peak.toFixed(0)})`,
      );
    }
  } finally {
    await participant.stop(5_000);
    await running;
  }
  console.log(`[sustained] ${report.join("\n[sustained] ")}`);
  const total = CHECKPOINTS.at(-1)!;
  expect(participant.stats.acked).toBe(total);
  expect(participant.stats.nacked).toBe(0);
  expect(handled.size).toBe(total);
  expect([...handled.values()].filter((n) => n > 1)).toEqual([]);
  expect(failures.get("lane_capacity") ?? 0).toBe(0);
  // Flat: the sizes differ only by the widths of growing numbers.
  expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(16);
}, 1_200_000);
