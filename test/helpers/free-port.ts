import { createServer, type AddressInfo, type Server } from "node:net";

/**
 * Free loopback TCP ports, for the servers tests and benchmarks start
 * (nats-server listeners and monitors, redis-server). A port is free when
 * it was chosen, not reserved: the caller binds it at once.
 */

/** `count` distinct free loopback ports (held together while choosing, so none repeats). */
export async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve, reject) => {
          const server = createServer();
          server.once("error", reject);
          server.listen(0, "127.0.0.1", () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  return ports;
}

/** One free loopback port. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}
