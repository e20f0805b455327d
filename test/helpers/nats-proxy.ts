/**
 * A TCP proxy in front of a test's nats-server that knows each client
 * connection by the name it gives in its CONNECT line, so that a test can
 * cut one of a process's broker connections (and keep it cut) while the
 * others carry on. Bytes pass through unchanged: the client and the server
 * speak to each other exactly as they would directly.
 */
import * as net from "node:net";

export interface NatsProxy {
  /** `nats://127.0.0.1:<port>`: give it to the client instead of the server's url. */
  readonly url: string;
  /** Names of the client connections open now (those that sent CONNECT). */
  names(): string[];
  /** Cuts every connection named `name`, now and each time it comes back, until `release`. */
  hold(name: string): void;
  release(name: string): void;
  close(): Promise<void>;
}

interface Link {
  readonly client: net.Socket;
  readonly upstream: net.Socket;
  name: string | undefined;
}

export async function startNatsProxy(target: string): Promise<NatsProxy> {
  const { hostname, port } = new URL(target);
  const links = new Set<Link>();
  const held = new Set<string>();
  const cut = (link: Link) => {
    link.client.destroy();
    link.upstream.destroy();
  };
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: hostname, port: Number(port) });
    const link: Link = { client, upstream, name: undefined };
    links.add(link);
    let head = "";
    client.on("data", (chunk: Buffer) => {
      if (link.name === undefined && head.length < 8_192) {
        head += chunk.toString("latin1");
        const connect = /CONNECT (\{.*?\})\r\n/.exec(head);
        if (connect) {
          link.name = (JSON.parse(connect[1]!) as { name?: string }).name ?? "";
          if (held.has(link.name)) return cut(link);
        }
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
    const close = () => {
      links.delete(link);
      cut(link);
    };
    client.on("close", close).on("error", close);
    upstream.on("close", close).on("error", close);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address() as net.AddressInfo;
  return {
    url: `nats://127.0.0.1:${address.port}`,
    names: () => [...links].map((l) => l.name).filter((n): n is string => n !== undefined),
    hold(name) {
      held.add(name);
      for (const link of links) if (link.name === name) cut(link);
    },
    release(name) {
      held.delete(name);
    },
    async close() {
      for (const link of links) cut(link);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
