import { rm } from "node:fs/promises";
import * as net from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { expect, test } from "vitest";
import { ServerReflection, ServerReflectionRequestSchema, type ServerReflectionRequest } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { startLanewayInProcess } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Once shutdown has begun, a request that arrives on a connection that was
 * already open is refused before it executes: it is answered `unavailable`
 * when the connection can still carry an answer, and it never runs — the
 * command it carried does not exist after a restart.
 */
test("a submit written after shutdown began on an open keep-alive connection is not executed", async () => {
  const first = await startLanewayInProcess({ lanesConfig: false, args: ["--shutdown-timeout", "3s"] });
  const { dataDir, tokens } = first;

  // A call that keeps the server draining: a reflection stream held open.
  const reflection = first.clients.client(ServerReflection, { protocol: "grpc" });
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  async function* requests(): AsyncGenerator<ServerReflectionRequest> {
    yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
    await held;
  }
  let answers = 0;
  const streaming = (async () => {
    for await (const _ of reflection.serverReflectionInfo(requests())) answers += 1;
  })().catch(() => {});
  await waitFor(() => answers === 1, { what: "the reflection stream to answer" });

  // A keep-alive HTTP/1.1 connection that has served one call and is idle.
  const { hostname, port } = new URL(first.url);
  const socket = net.connect({ host: hostname, port: Number(port) });
  socket.on("error", () => {});
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString("utf8")));
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  const request = (path: string, body: string) =>
    `POST ${path} HTTP/1.1\r\nHost: laneway\r\nAuthorization: Bearer ${tokens.admin}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  socket.write(request("/laneway.kmap.v1.KmapCommandService/ListCommands", "{}"));
  await waitFor(() => received.includes("\r\n\r\n{"), { what: "the first answer" });
  received = "";

  const closing = first.server.close();
  const id = "d".repeat(32);
  socket.write(request("/laneway.kmap.v1.KmapCommandService/SubmitCommand", JSON.stringify({ idempotencyId: id, command: { createNode: { kind: "topic", title: "late" } } })));
  await new Promise<void>((resolve) => socket.once("close", () => resolve()));
  // If an answer got through, it says the server is shutting down.
  if (received !== "") {
    expect(received).toMatch(/^HTTP\/1\.1 503 /);
    expect(received).toContain('"code":"unavailable"');
  }
  release();
  await streaming;
  await closing;
  first.clients.closeAll();

  const second = await startLanewayInProcess({ lanesConfig: false, dataDir, tokens });
  try {
    const commands = second.clients.client(KmapCommandService, { token: tokens.admin });
    const missing = await commands.getCommand({ idempotencyId: id }).then(
      () => undefined,
      (error: unknown) => ConnectError.from(error),
    );
    expect(missing?.code).toBe(Code.NotFound);
  } finally {
    await second.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
});
