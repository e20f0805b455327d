import { createClient } from "@connectrpc/connect";
import { createLanewayTransport, LaneService } from "laneway/client";

// The generated client on Laneway's transport; gRPC and gRPC-Web work the
// same way (protocol: "grpc" or "grpc-web").
const { transport, close } = createLanewayTransport({
  baseUrl: process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600",
  protocol: "connect-binary",
  token: process.env.BEACON_LANE_TOKEN,
});
const lanes = createClient(LaneService, transport);

const registry = await lanes.getRegistry({});
for (const lane of registry.lanes) {
  console.log(`${registry.project} on ${lane.lane}: groups ${lane.groups.join(", ") || "none"}`);
}
close();
