import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService, RecordKind } from "laneway/client";
import { Participant } from "laneway/participant";

// A work group with the participant: atlas publishes three pieces of work,
// beacon (a member of the group summarizers) runs them with a handler
// registered for summary-v1 from atlas. A handler that returns is acked;
// stop() stops claiming and returns once everything claimed is settled.
const baseUrl = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const atlasTransport = createLanewayTransport({ baseUrl, token: process.env.ATLAS_LANE_TOKEN });
const beaconTransport = createLanewayTransport({ baseUrl, token: process.env.BEACON_LANE_TOKEN });
const atlas = createClient(LaneService, atlasTransport.transport);
const beacon = createClient(LaneService, beaconTransport.transport);

const work = { "sum-a": [1, 2], "sum-b": [3, 4], "sum-c": [5, 6] };
for (const [id, values] of Object.entries(work)) {
  const payload = new TextEncoder().encode(JSON.stringify({ values }));
  await atlas.publish({ lane: "measurements", id, kind: RecordKind.WORK, schema: "summary-v1", payload });
}

const results = new Map<string, string>();
const participant = new Participant({ client: beacon, lane: "measurements", group: "summarizers", concurrency: 2 });
participant.handle("summary-v1", "atlas", async (item, signal) => {
  // `signal` aborts when the lease ends; the participant renews it before that.
  signal.throwIfAborted();
  const { values } = JSON.parse(new TextDecoder().decode(item.payload)) as { values: number[] };
  results.set(item.id, `sum ${values.reduce((a, b) => a + b, 0)}, attempt ${item.attempt}`);
  if (results.size === Object.keys(work).length) void participant.stop();
});
await participant.run(); // resolves once stop() has settled every claimed record

for (const id of [...results.keys()].sort()) console.log(`${id}: ${results.get(id)}`);
console.log(`acked ${participant.stats.acked}, nacked ${participant.stats.nacked}`);
const { group } = await beacon.inspectGroup({ lane: "measurements", group: "summarizers" });
console.log(`unfinished deliveries: ${group?.deliveries.length}`);

atlasTransport.close();
beaconTransport.close();
