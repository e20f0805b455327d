import { HealthCheckResponseSchema, Health } from "../../gen/grpc/health/v1/health_pb.js";
import { parseCommand, printMessage, UsageError, withClient, type CliIo } from "./command.js";

/** `laneway health [service]`: the gRPC health status (no token needed). */
export async function healthCommand(args: readonly string[], io: CliIo): Promise<void> {
  const { values, positionals: rest } = parseCommand(args, {});
  if (rest.length > 1) throw new UsageError("usage: laneway health [service]");
  const res = await withClient(Health, values, io, (client) => client.check({ service: rest[0] ?? "" }, { signal: io.signal }));
  printMessage(io, HealthCheckResponseSchema, res);
}
