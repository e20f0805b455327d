import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService, RecordKind } from "laneway/client";

// Follow with a saved cursor: beacon follows the lane, saving the cursor
// after it has processed each page, and stops. atlas publishes more while
// nobody follows; beacon resumes from the saved cursor and gets exactly
// what it has not seen: nothing missed, nothing repeated.
const baseUrl = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const atlasTransport = createLanewayTransport({ baseUrl, token: process.env.ATLAS_LANE_TOKEN });
const beaconTransport = createLanewayTransport({ baseUrl, token: process.env.BEACON_LANE_TOKEN });
const atlas = createClient(LaneService, atlasTransport.transport);
const beacon = createClient(LaneService, beaconTransport.transport);

const dir = await mkdtemp(join(tmpdir(), "follower-"));
const cursorFile = join(dir, "cursor");
const publish = (id: string) =>
  atlas.publish({ lane: "measurements", id, kind: RecordKind.EVENT, schema: "temperature-v1", payload: new TextEncoder().encode('{"celsius":20}') });

// Start after what the lane holds now.
const { lastSequence } = await beacon.replay({ lane: "measurements", cursor: 0n, maxEvents: 1 });
await writeFile(cursorFile, String(lastSequence));

/** Follows from the saved cursor until `last` has been processed; returns the ids seen. */
async function follow(last: string): Promise<string[]> {
  const seen: string[] = [];
  const cursor = BigInt(await readFile(cursorFile, "utf8"));
  for await (const page of beacon.follow({ lane: "measurements", cursor })) {
    for (const event of page.events) seen.push(event.id); // process the page ...
    await writeFile(cursorFile, String(page.cursor)); // ... then save its cursor
    if (seen.includes(last)) break; // leaving the loop ends the stream
  }
  return seen;
}

await publish("follow-1");
await publish("follow-2");
const first = await follow("follow-2");
console.log(`first run: ${first.join(", ")}`);

await publish("follow-3"); // published while nobody follows
await publish("follow-4");
const second = await follow("follow-4");
console.log(`resumed from the saved cursor: ${second.join(", ")}`);

const all = [...first, ...second];
console.log(`missed: ${["follow-1", "follow-2", "follow-3", "follow-4"].filter((id) => !all.includes(id)).length}, repeated: ${all.length - new Set(all).size}`);

await rm(dir, { recursive: true });
atlasTransport.close();
beaconTransport.close();
