import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createLanewayTransport, ErrorDetailSchema, LaneService } from "laneway/client";

// Reading the reason of a failed call: a call without a token is refused
// as unauthorized; the caller switches on the detail's reason (never on the
// message), loads its project token and calls again.
const baseUrl = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const lanesWith = (token?: string) => {
  const { transport, close } = createLanewayTransport({ baseUrl, token });
  return { lanes: createClient(LaneService, transport), close };
};

const anonymous = lanesWith();
try {
  await anonymous.lanes.getRegistry({});
} catch (err) {
  const error = ConnectError.from(err);
  const [detail] = error.findDetails(ErrorDetailSchema);
  console.log(`${Code[error.code]}: reason ${detail?.reason}, domain ${detail?.domain}`);
  if (detail?.reason === "unauthorized") {
    // load the project token
    const beacon = lanesWith(process.env.BEACON_LANE_TOKEN);
    console.log(`with the project token: registry of ${(await beacon.lanes.getRegistry({})).project}`);
    beacon.close();
  }
} finally {
  anonymous.close();
}
