import { create, toBinary } from "@bufbuild/protobuf";
import { expect, test } from "vitest";
import { HealthCheckRequestSchema, type HealthCheckRequest } from "../../gen/grpc/health/v1/health_pb.js";
import { checkedRequestBody, ParsedMessages, RequestProblemError } from "../../src/server/wire/request-body.js";
import { envelope } from "../helpers/raw-rpc.js";
import { SeededRandom } from "../helpers/seeded-random.js";

/**
 * The enveloped request body (gRPC, gRPC-Web, Connect streaming) read from
 * chunks split at random places: every message is parsed whole and in
 * order whatever the chunk boundaries (Connect reads an empty stand-in for
 * each), and a body that ends inside a frame is refused.
 */

const binary = { enveloped: true, binary: true, encoding: undefined } as const;
const MAX = 1024 * 1024;

async function* chunked(body: Uint8Array, random: SeededRandom): AsyncGenerator<Uint8Array> {
  let at = 0;
  while (at < body.byteLength) {
    const size = random.pick([1, 2, 3, 4, 5, 6, 7, 16, 100, 4096, 16_384, 70_000]);
    yield body.subarray(at, at + size);
    at += size;
  }
}

async function collect(source: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const out: Uint8Array[] = [];
  for await (const chunk of source) out.push(chunk);
  return Buffer.concat(out);
}

test("messages split across chunks at random places are parsed whole and in order", async () => {
  for (let seed = 1; seed <= 60; seed++) {
    const random = new SeededRandom(seed);
    const services = Array.from({ length: random.int(1, 6) }, (_, i) => `${i}`.repeat(random.pick([1, 3, 200, 40_000, 300_000])));
    const body = Buffer.concat(services.map((service) => envelope(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service })))));
    const parsed = new ParsedMessages();
    const out = await collect(checkedRequestBody(chunked(body, random), HealthCheckRequestSchema, binary, MAX, false, parsed));
    // Connect reads an empty stand-in per message; the parsed messages wait in order.
    expect(out.equals(Buffer.concat(services.map(() => envelope(new Uint8Array())))), `seed ${seed}`).toBe(true);
    const taken: string[] = [];
    for (let message = parsed.take(); message !== undefined; message = parsed.take()) taken.push((message as HealthCheckRequest).service);
    expect(taken, `seed ${seed}`).toEqual(services);
  }
});

test("a body that ends inside a frame is refused, wherever the chunks split it", async () => {
  for (let seed = 1; seed <= 20; seed++) {
    const random = new SeededRandom(seed);
    const whole = envelope(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "x".repeat(50_000) })));
    const cut = whole.subarray(0, random.int(1, whole.byteLength - 1));
    const reading = collect(checkedRequestBody(chunked(cut, random), HealthCheckRequestSchema, binary, MAX, true, new ParsedMessages()));
    await expect(reading).rejects.toBeInstanceOf(RequestProblemError);
    await expect(reading).rejects.toMatchObject({ problem: { kind: "malformed", message: "the request body ends inside a message frame" } });
  }
});
