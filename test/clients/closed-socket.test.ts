import { execFileSync } from "node:child_process";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport, keepAliveAgent } from "../../src/client/transport.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";

/**
 * The keep-alive race no timer closes: a client busy elsewhere reads a
 * response late, the server's keep-alive timeout closes the idle socket
 * meanwhile, and the client's next call goes out on that socket before its
 * event loop saw the close. Reproduced without timing: after a first call,
 * the test keeps its own event loop blocked until the kernel shows the
 * socket half closed by the server (CLOSE_WAIT), then makes the next call
 * at once. A plain Connect transport on the same agent fails that call
 * (the race is real); Laneway's transport sends it again on a new socket
 * and it succeeds.
 */

let laneway: ChildLaneway;

beforeAll(async () => {
  laneway = await startLanewayProcess();
}, 60_000);

afterAll(async () => {
  await laneway?.remove();
});

/** Blocks this process (no event loop turn) until a socket to `port` is half closed by the server. */
function blockUntilServerClosed(port: number): void {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const sockets = execFileSync("ss", ["-Htn", "state", "close-wait", "dst", `127.0.0.1:${port}`], { encoding: "utf8" });
    if (sockets.trim() !== "") return;
    execFileSync("sleep", ["0.1"]);
  }
  throw new Error("the server never closed the idle keep-alive socket");
}

/** A first call, then a second one on the same kept-alive socket after the server closed it. */
async function callAfterServerClosed(call: () => Promise<unknown>): Promise<unknown> {
  await call();
  const port = Number(new URL(laneway.url).port);
  blockUntilServerClosed(port);
  // No await between: the client's event loop has not seen the close.
  return await call();
}

test("a call on a kept-alive socket the server closed meanwhile fails on a plain transport and is sent again by Laneway's", async () => {
  const plainAgent = keepAliveAgent(laneway.url);
  const plain = createClient(LaneService, createConnectTransport({ baseUrl: laneway.url, httpVersion: "1.1", useBinaryFormat: true, nodeOptions: { agent: plainAgent } }));
  const failure = await callAfterServerClosed(() => plain.getRegistry({}, { headers: { Authorization: `Bearer ${laneway.tokens.atlas}` } })).then(
    () => undefined,
    (error: unknown) => ConnectError.from(error),
  );
  plainAgent.destroy();
  expect(failure, "the plain transport's call on the closed socket").toBeInstanceOf(ConnectError);
  expect([Code.Internal, Code.Aborted]).toContain((failure as ConnectError).code);
  expect((failure as ConnectError).rawMessage).toMatch(/EPIPE|socket hang up|ECONNRESET/);

  // One event, so that a Follow from cursor 0 has a first page to answer.
  const setup = createLanewayTransport({ baseUrl: laneway.url, protocol: "connect-binary", token: laneway.tokens.atlas });
  await createClient(LaneService, setup.transport).publish({ lane: "measurements", id: "first", kind: RecordKind.EVENT, schema: "note-v1", payload: new Uint8Array([1]) });
  setup.close();

  // Connect (unary and server streaming) and gRPC-Web (server streaming) over HTTP/1.1; gRPC runs on HTTP/2.
  for (const [protocol, unary] of [["connect-binary", true], ["grpc-web", false]] as const) {
    const transport = createLanewayTransport({ baseUrl: laneway.url, protocol, token: laneway.tokens.atlas });
    const client = createClient(LaneService, transport.transport);
    if (unary) {
      const registry = (await callAfterServerClosed(() => client.getRegistry({}))) as Awaited<ReturnType<typeof client.getRegistry>>;
      expect(registry.lanes.length, protocol).toBeGreaterThan(0);
    }
    // A server-streaming call's request is kept for its second sending too.
    const follow = async () => {
      const abort = new AbortController();
      const it = client.follow({ lane: "measurements", cursor: 0n }, { signal: abort.signal })[Symbol.asyncIterator]();
      try {
        return await it.next();
      } finally {
        abort.abort();
      }
    };
    await client.getRegistry({});
    blockUntilServerClosed(Number(new URL(laneway.url).port));
    const first = await follow();
    expect(first.done, protocol).toBe(false);
    transport.close();
  }
}, 120_000);
