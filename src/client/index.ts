/**
 * Laneway's client side, imported as `laneway/client`: the transports for
 * the generated clients, the services they call, and the client-side check
 * of a Kmap transaction's signature. Loads no storage: importing it starts
 * no SQLite and no NATS connection.
 *
 * The generated messages of every service are under `laneway/gen/…`
 * (for example `laneway/gen/laneway/lane/v1/lane_service_pb.js`).
 */
export { createLanewayTransport, wireProtocols, type LanewayTransport, type LanewayTransportOptions, type WireProtocol } from "./transport.js";
export { verifyTransaction } from "./verify-transaction.js";
export { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
export { KmapCommandService, CommandEventKind } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
export { CommandState } from "../../gen/laneway/kmap/v1/command_pb.js";
export { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
export { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
export { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
export { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
