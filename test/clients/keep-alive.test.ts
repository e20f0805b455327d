import * as http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterAll, beforeAll, expect, test } from "vitest";
import { keepAliveAgent } from "../../src/client/transport.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * A client must not reuse a keep-alive socket the server is about to close
 * (the request would fail with ECONNRESET). Laneway's agent closes an idle
 * socket itself, long before the server's announced keep-alive timeout:
 * against a server that announces 60 s, the client's FIN arrives while the
 * server would still keep the socket for most of a minute.
 */

let server: http.Server;
let baseUrl: string;
const ended: Socket[] = [];

beforeAll(async () => {
  server = http.createServer({ keepAliveTimeout: 60_000 }, (_req, res) => res.end("ok"));
  server.on("connection", (socket: Socket) => socket.once("end", () => ended.push(socket)));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

test("an idle keep-alive socket is closed by the client, not left for the server to close", async () => {
  const agent = keepAliveAgent(baseUrl);
  const get = () =>
    new Promise<string>((resolve, reject) => {
      http
        .get(`${baseUrl}/`, { agent }, (res) => {
          let body = "";
          res.on("data", (chunk: Buffer) => (body += chunk.toString()));
          res.on("end", () => resolve(body));
        })
        .on("error", reject);
    });
  expect(await get()).toBe("ok");
  expect(await get()).toBe("ok");
  // Both calls used one socket, kept alive between them.
  expect(await new Promise<number>((resolve) => server.getConnections((_error, count) => resolve(count)))).toBe(1);
  const end = await waitFor(() => ended[0], { timeoutMs: 30_000, what: "the client to close its idle socket" });
  expect(end).toBeDefined();
  expect(Object.values(agent.freeSockets).flat()).toHaveLength(0);
  agent.destroy();
});
