/**
 * A process that holds Laneway's NATS pieces the way `laneway serve` wires
 * them — a supervised embedded nats-server, a BrokerConnection whose lost
 * connections the supervisor explains, and logBrokerState — so that a test
 * can stop this process (SIGSTOP) while its broker keeps running, and see
 * what the connection says once it runs again.
 *
 * Run as `node --import tsx test/helpers/broker-client-process.ts` with
 * BROKER_STORE_DIR (the server's store) and BROKER_SERVER_CONFIG (JSON of
 * extra nats-server settings). Prints one JSON line
 * `{"ready":{"url","clientId","serverPid"}}`, then every log line (JSON) on
 * stdout. SIGTERM closes everything and exits 0.
 */
import { BrokerConnection } from "../../src/nats/broker-connection.js";
import { logBrokerState } from "../../src/nats/broker-state-log.js";
import { SupervisedNatsServer } from "../../src/nats/supervised-server.js";
import { createLogger } from "../../src/log/logger.js";

const log = createLogger({ level: "debug", write: (line) => process.stdout.write(line) });
const server = await SupervisedNatsServer.start({
  server: { storeDir: process.env["BROKER_STORE_DIR"]!, extraConfig: JSON.parse(process.env["BROKER_SERVER_CONFIG"] ?? "{}") as Record<string, unknown> },
  log,
});
const broker = await BrokerConnection.open({
  servers: server.url,
  name: "laneway",
  backoff: { initialMs: 20, maxMs: 200 },
  explainDisconnect: (clientId) => server.disconnectReason(clientId),
});
logBrokerState(broker, log);
// A subscription the test can flood.
broker.connection().subscribe("flood.>", { callback: () => {} });
await broker.connection().flush();
process.stdout.write(`${JSON.stringify({ ready: { url: server.url, clientId: broker.connection().info?.client_id, serverPid: server.pid } })}\n`);

process.once("SIGTERM", () => {
  void (async () => {
    await broker.close();
    await server.stop();
    process.exit(0);
  })();
});
