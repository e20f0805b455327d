import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService, RecordKind } from "laneway/client";

// The specification's forge-free exchange between two projects: atlas
// publishes an event and a piece of work; beacon and atlas each replay the
// lane from their own cursor. The token alone says who is calling.
const address = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const atlasTransport = createLanewayTransport({ baseUrl: address, token: process.env.ATLAS_LANE_TOKEN });
const beaconTransport = createLanewayTransport({ baseUrl: address, protocol: "grpc", token: process.env.BEACON_LANE_TOKEN });
const atlas = createClient(LaneService, atlasTransport.transport);
const beacon = createClient(LaneService, beaconTransport.transport);

const reading = await atlas.publish({
  lane: "measurements",
  id: "reading-one",
  kind: RecordKind.EVENT,
  schema: "temperature-v1",
  payload: new TextEncoder().encode('{"celsius":21}'),
});
console.log(`atlas published reading-one at sequence ${reading.record?.sequence}`);

await atlas.publish({
  lane: "measurements",
  id: "summarize-one",
  kind: RecordKind.WORK,
  schema: "summary-v1",
  payload: new TextEncoder().encode('{"values":[21,22]}'),
});

// Publishing the same id again returns the original record.
const again = await atlas.publish({
  lane: "measurements",
  id: "reading-one",
  kind: RecordKind.EVENT,
  schema: "temperature-v1",
  payload: new TextEncoder().encode('{"celsius":21}'),
});
console.log(`the repeat is a duplicate of sequence ${again.record?.sequence}: ${again.duplicate}`);

// Each subscriber keeps its own cursor; save it only after processing the events.
for (const [name, client] of [["beacon", beacon], ["atlas", atlas]] as const) {
  const page = await client.replay({ lane: "measurements", cursor: 0n });
  const ids = page.events.map((event) => `${event.id} (${event.schema})`).join(", ");
  console.log(`${name} replayed ${ids}; cursor ${page.cursor}`);
}

atlasTransport.close();
beaconTransport.close();
