import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { rpcCommand } from "./rpc-command.js";

/** `laneway health [service]`: the gRPC health status (no token needed). */
export const healthCommand = rpcCommand({
  method: Health.method.check,
  usage: "health [service]",
  summary: 'the serving status of the server (no service) or of one service',
  args: ["service?"],
  request: (i) => ({ service: i.arg("service") }),
});
