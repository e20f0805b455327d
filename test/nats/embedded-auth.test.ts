import { stat } from "node:fs/promises";
import * as net from "node:net";
import { join } from "node:path";
import { connect, nkeyAuthenticator } from "@nats-io/transport-node";
import { createUser } from "@nats-io/nkeys";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";

/**
 * The embedded nats-server admits Laneway alone: a client without
 * credentials, or with another nkey, is refused, while Laneway's own
 * connection (a user nkey whose seed is in the data directory, mode 0600)
 * serves lanes. Participants never get broker credentials.
 */

let laneway: InProcessLaneway;

beforeAll(async () => {
  laneway = await startLanewayInProcess();
});

afterAll(async () => {
  await laneway?.stop();
});

function natsAddress(): { host: string; port: number } {
  const url = new URL(laneway.server.embeddedNatsUrl!.replace("nats://", "http://"));
  return { host: url.hostname, port: Number(url.port) };
}

test("a raw client without credentials is refused before it can reach JetStream", async () => {
  const socket = net.connect(natsAddress());
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString("utf8")));
  socket.on("error", () => {});
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  socket.write('CONNECT {"verbose":false,"pedantic":false}\r\nPUB $JS.API.INFO _INBOX.x 0\r\n\r\nPING\r\n');
  await new Promise<void>((resolve) => socket.once("close", () => resolve()));
  expect(received).toContain("-ERR 'Authorization Violation'");
  expect(received).not.toContain('"type":"io.nats.jetstream.api.v1.account_info_response"');
});

test("a client with another nkey is refused", async () => {
  const { host, port } = natsAddress();
  const attempt = connect({ servers: `nats://${host}:${port}`, authenticator: nkeyAuthenticator(createUser().getSeed()), reconnect: false, timeout: 5_000 });
  await expect(attempt).rejects.toThrow(/Authorization/i);
});

test("Laneway's own credential is private to the data directory, and lanes work through it", async () => {
  const seed = await stat(join(laneway.dataDir, "nats", "laneway-service.nk"));
  expect(seed.mode & 0o777).toBe(0o600);
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const published = await atlas.publish({ lane: "measurements", id: "only-laneway", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([1]) });
  expect(published.record?.sequence).toBe(1n);
  const page = await atlas.replay({ lane: "measurements" });
  expect(page.events.map((e) => e.id)).toEqual(["only-laneway"]);
});
