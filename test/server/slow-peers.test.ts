import * as http2 from "node:http2";
import * as net from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { CommandEventKind, KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { envelope } from "../helpers/raw-rpc.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Slow and silent peers against `laneway serve` with short limits: every
 * connection that stops making progress is closed by the documented
 * timeout, a flood of such connections does not stop other clients from
 * being served, and a long-lived server stream stays open while the peer
 * keeps reading. Nothing here measures time: each test waits (generously)
 * for the closing it expects.
 */

let laneway: ChildLaneway;
const limits = ["--headers-timeout", "1s", "--request-timeout", "2s", "--idle-timeout", "2s", "--max-connections", "40"];

beforeAll(async () => {
  laneway = await startLanewayProcess({ args: limits });
});

afterAll(async () => {
  await laneway?.remove();
});

function address(): { host: string; port: number } {
  const url = new URL(laneway.url);
  return { host: url.hostname, port: Number(url.port) };
}

/** A raw TCP connection that records when the server closes it. */
async function rawSocket(): Promise<{ socket: net.Socket; closed: Promise<void>; isClosed: () => boolean }> {
  const socket = net.connect(address());
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  let isClosed = false;
  socket.on("error", () => {});
  socket.on("data", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => ((isClosed = true), resolve())));
  return { socket, closed, isClosed: () => isClosed };
}

const eventually = { timeoutMs: 20_000, what: "the server to close the connection" };

describe("HTTP/1.1 and unsniffed connections", () => {
  test("a connection that sends one byte and stops is closed", async () => {
    const { socket, closed } = await rawSocket();
    socket.write("P");
    await closed;
  });

  test("a connection trickling the HTTP/2 preface a byte at a time is closed", async () => {
    const { socket, isClosed } = await rawSocket();
    const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let i = 0;
    // A byte well within every timeout (so a deadline that each byte moved
    // would never come), and all but the last of the 24 bytes in about 7 s:
    // the 1 s headers timeout closes the connection long before that, with
    // seconds to spare for a busy machine.
    const trickle = setInterval(() => {
      if (!isClosed() && i < preface.length - 1) socket.write(preface[i++]!);
    }, 300);
    try {
      await waitFor(isClosed, eventually);
    } finally {
      clearInterval(trickle);
    }
    expect(i).toBeLessThan(preface.length - 1);
  });

  test("request headers trickled forever are cut off", async () => {
    const { socket, isClosed } = await rawSocket();
    socket.write("POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: laneway\r\n");
    const trickle = setInterval(() => {
      if (!isClosed()) socket.write("X");
    }, 100);
    try {
      await waitFor(isClosed, eventually);
    } finally {
      clearInterval(trickle);
    }
  });

  test("a body stalled below its Content-Length is cut off", async () => {
    const { socket, closed } = await rawSocket();
    socket.write("POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: laneway\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"serv");
    await closed;
  });
});

describe("HTTP/2", () => {
  test("a session that never opens a stream is closed", async () => {
    const session = http2.connect(laneway.url);
    session.on("error", () => {});
    await new Promise<void>((resolve) => session.once("close", resolve));
  });

  test("an idle session is closed after its last stream, and the call on it succeeded", async () => {
    const session = http2.connect(laneway.url);
    session.on("error", () => {});
    const closed = new Promise<void>((resolve) => session.once("close", resolve));
    const status = await new Promise<number>((resolve, reject) => {
      const stream = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
      stream.on("response", (h) => resolve(Number(h[":status"])));
      stream.on("error", reject);
      stream.on("data", () => {});
      stream.end(envelope(new Uint8Array()));
    });
    expect(status).toBe(200);
    await closed;
  });

  test("a stream whose request body stalls is reset, and the session serves other streams", async () => {
    const session = http2.connect(laneway.url);
    session.on("error", () => {});
    const stalled = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
    stalled.on("error", () => {});
    stalled.on("data", () => {});
    // An envelope announcing 100 bytes, of which 3 arrive.
    stalled.write(Buffer.from([0, 0, 0, 0, 100, 1, 2, 3]));
    const reset = await new Promise<number>((resolve) => stalled.once("close", () => resolve(stalled.rstCode)));
    expect(reset).toBe(http2.constants.NGHTTP2_CANCEL);
    const status = await new Promise<string | undefined>((resolve, reject) => {
      const stream = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
      let grpcStatus: string | undefined;
      stream.on("response", (h) => (grpcStatus ??= h["grpc-status"] as string | undefined));
      stream.on("trailers", (t) => (grpcStatus = t["grpc-status"] as string | undefined));
      stream.on("data", () => {});
      stream.on("error", reject);
      stream.on("close", () => resolve(grpcStatus));
      stream.end(envelope(new Uint8Array()));
    });
    expect(status).toBe("0");
    session.destroy();
  });

  test("a response the peer never reads (zero flow-control window) is reset", async () => {
    const session = http2.connect(laneway.url, { settings: { initialWindowSize: 0 } });
    session.on("error", () => {});
    const stream = session.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Check", "content-type": "application/grpc", te: "trailers" });
    stream.on("error", () => {});
    stream.end(envelope(new Uint8Array()));
    const reset = await new Promise<number>((resolve) => stream.once("close", () => resolve(stream.rstCode)));
    expect(reset).toBe(http2.constants.NGHTTP2_CANCEL);
    session.destroy();
  });
});

test("a long-lived server stream stays open past the idle timeout while the peer reads, and keeps delivering", async () => {
  const commands = laneway.clients.client(KmapCommandService, { token: laneway.tokens.admin, protocol: "grpc" });
  const abort = new AbortController();
  const seen: string[] = [];
  const watching = (async () => {
    for await (const event of commands.watchCommands({ afterPosition: 0n }, { signal: abort.signal })) {
      if (event.kind === CommandEventKind.QUEUED) seen.push(event.record!.submission!.idempotencyId);
    }
  })().catch((error: unknown) => error);
  // Idle for several idle timeouts: the stream has nothing to send and the peer is reading.
  await new Promise((resolve) => setTimeout(resolve, 7_000));
  const id = "5".repeat(32);
  await commands.submitCommand({ idempotencyId: id, command: { operation: { case: "createNode", value: { kind: "topic", title: "after the idle time" } } } });
  await waitFor(() => seen.includes(id), { timeoutMs: 20_000, what: "the watch to deliver the new command" });
  abort.abort();
  await watching;
});

test("a flood of silent connections past the connection limit does not stop other clients", async () => {
  const flood: net.Socket[] = [];
  for (let i = 0; i < 120; i++) {
    const socket = net.connect(address());
    socket.on("error", () => {});
    socket.on("connect", () => socket.write("P"));
    flood.push(socket);
  }
  await Promise.all(flood.map((s) => new Promise<void>((resolve) => (s.readyState === "open" ? resolve() : s.once("connect", () => resolve()).once("close", () => resolve())))));
  try {
    for (const protocol of ["connect-json", "grpc"] as const) {
      const health = laneway.clients.client(Health, { protocol });
      expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    }
  } finally {
    for (const socket of flood) socket.destroy();
  }
});

test("under a low open-file limit the connection cap is lowered, so a flood cannot exhaust the process's files", async () => {
  const limited = await startLanewayProcess({ lanesConfig: false, openFileLimit: 256, args: ["--headers-timeout", "5s"] });
  const { hostname, port } = new URL(limited.url);
  const flood: net.Socket[] = [];
  try {
    expect(limited.stderr.join("\n")).toContain("the connection cap is lowered");
    for (let i = 0; i < 400; i++) {
      const socket = net.connect({ host: hostname, port: Number(port) });
      socket.on("error", () => {});
      socket.on("connect", () => socket.write("P"));
      flood.push(socket);
    }
    await Promise.all(flood.map((s) => new Promise<void>((resolve) => s.once("connect", () => resolve()).once("close", () => resolve()))));
    const health = limited.clients.client(Health);
    expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  } finally {
    for (const socket of flood) socket.destroy();
    await limited.remove();
  }
});
