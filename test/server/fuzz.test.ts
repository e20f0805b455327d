import * as http2 from "node:http2";
import { readFile } from "node:fs/promises";
import { create, toBinary, type DescField, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { lanewayServices } from "../../src/server/laneway-server.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { envelope, rawCall, type RawAnswer, type RawProtocol } from "../helpers/raw-rpc.js";
import { SeededRandom } from "../helpers/seeded-random.js";

/**
 * Random and mutated request bodies to every method of every Laneway service
 * (and health), over Connect binary and gRPC, from a fixed seed so a failure
 * can be repeated. Mutations start from well-formed messages built from each
 * method's own descriptor: flipped bytes, truncations, duplicated and
 * inserted runs, wrong lengths. No answer may be `internal` or `unknown`,
 * every failure carries an ErrorDetail, no message carries a parser's text,
 * and afterwards the process still serves with bounded memory.
 */

const SEED = Number(process.env.LANEWAY_FUZZ_SEED ?? 20261201);
const BODIES_PER_METHOD = 120;
const BODIES_PER_STREAMING_METHOD = 12;
const PEAK_GROWTH_BOUND = 200 * 1024 * 1024;
const libraryText = /parse binary|premature EOF|illegal tag|wire type|cannot decode|Unexpected (token|end)|JSON at position|invalid UTF-8|decompression failed|internal error/i;

let laneway: ChildLaneway;

beforeAll(async () => {
  laneway = await startLanewayProcess();
});

afterAll(async () => {
  await laneway?.remove();
});

/** A random message of `desc` (depth-limited), for mutation. */
function randomMessage(random: SeededRandom, desc: DescMessage, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of desc.fields) {
    if (field.oneof && random.chance(0.6)) continue;
    if (!random.chance(0.7)) continue;
    const value = randomValue(random, field, depth);
    if (value !== undefined) out[field.localName] = value;
  }
  return out;
}

function randomValue(random: SeededRandom, field: DescField, depth: number): unknown {
  const scalar = (kind: string): unknown => {
    switch (kind) {
      case "string":
        return random.pick(["", "measurements", "summarizers", "atlas", random.hexId(), "Bad Id", "x".repeat(random.int(0, 80))]);
      case "bytes":
        return new Uint8Array(random.int(0, 32)).map(() => random.int(0, 255));
      case "bool":
        return random.chance(0.5);
      default:
        return random.int(0, 1000);
    }
  };
  switch (field.fieldKind) {
    case "scalar": {
      const v = scalar(typeName(field.scalar));
      return field.scalar === 3 || field.scalar === 4 || field.scalar === 6 || field.scalar === 16 || field.scalar === 18 ? BigInt(v as number) : v;
    }
    case "enum":
      return random.pick(field.enum.values).number;
    case "message":
      return depth > 2 || field.message.typeName.startsWith("google.protobuf.") ? undefined : randomMessage(random, field.message, depth + 1);
    case "list":
      return field.listKind === "message" ? (depth > 2 ? [] : [randomMessage(random, field.message, depth + 1)]) : field.listKind === "scalar" && ![3, 4, 6, 16, 18].includes(field.scalar) ? [scalar(typeName(field.scalar))] : [];
    case "map":
      return {};
  }
}

function typeName(scalar: number): string {
  return scalar === 9 ? "string" : scalar === 12 ? "bytes" : scalar === 8 ? "bool" : "number";
}

function mutate(random: SeededRandom, bytes: Uint8Array): Uint8Array {
  const out = Buffer.from(bytes);
  switch (random.int(0, 5)) {
    case 0: // random bytes
      return new Uint8Array(random.int(0, 48)).map(() => random.int(0, 255));
    case 1: // flip bytes
      for (let i = 0; i < random.int(1, 4) && out.length > 0; i++) out[random.int(0, out.length - 1)]! ^= 1 << random.int(0, 7);
      return out;
    case 2: // truncate
      return out.subarray(0, random.int(0, Math.max(0, out.length - 1)));
    case 3: {
      // duplicate a run
      const at = random.int(0, out.length);
      return Buffer.concat([out.subarray(0, at), out.subarray(Math.max(0, at - 8), at), out.subarray(at)]);
    }
    case 4: // insert a field with a huge or bogus length
      return Buffer.concat([Buffer.from([random.int(1, 255), 0xff, 0xff, 0xff, 0xff, 0x0f]), out]);
    default:
      return out; // well-formed (it may well be valid)
  }
}

function tokenFor(method: DescMethod): string | undefined {
  const service = method.parent.typeName;
  if (service.startsWith("laneway.lane.")) return laneway.tokens.atlas;
  if (service.startsWith("laneway.kmap.") || service === "laneway.swarm.v1.HiveHubService") return laneway.tokens.admin;
  return undefined;
}

async function memoryPeak(): Promise<number> {
  const status = await readFile(`/proc/${laneway.pid}/status`, "utf8");
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1]) * 1024;
}

test.each(["connect", "grpc"] as const)("random and mutated bodies over %s never answer internal or library text", async (protocol: RawProtocol) => {
  const random = new SeededRandom(SEED + (protocol === "grpc" ? 1 : 0));
  const methods = [...lanewayServices, Health].flatMap((s) => s.methods).filter((m) => m.methodKind !== "bidi_streaming" && m.methodKind !== "client_streaming");
  const session = protocol === "grpc" ? http2.connect(laneway.url) : undefined;
  const before = await memoryPeak();
  const seen = new Map<string, number>();
  try {
    for (const method of methods) {
      const streaming = method.methodKind === "server_streaming";
      const count = streaming ? BODIES_PER_STREAMING_METHOD : BODIES_PER_METHOD;
      for (let i = 0; i < count; i++) {
        const valid = toBinary(method.input, create(method.input, randomMessage(random, method.input) as never));
        const body = mutate(random, valid);
        const framed = protocol === "grpc" || streaming ? envelope(body) : body;
        let result: RawAnswer;
        try {
          result = await rawCall({
            baseUrl: laneway.url,
            protocol,
            path: `/${method.parent.typeName}/${method.name}`,
            contentType: protocol === "grpc" ? "application/grpc" : streaming ? "application/connect+proto" : "application/proto",
            body: framed,
            token: tokenFor(method),
            // Well-formed watches and follows would stay open: give each call a short deadline.
            headers: protocol === "grpc" ? { "grpc-timeout": "300m" } : { "connect-timeout-ms": "300" },
            session,
          });
        } catch (error) {
          throw new Error(`seed ${SEED}: ${method.name} body ${Buffer.from(body).toString("hex")} failed at the transport: ${(error as Error).message}`);
        }
        const where = `seed ${SEED}, ${protocol}, ${method.parent.name}/${method.name}, body ${Buffer.from(body).toString("hex")}`;
        if (result.error) {
          expect([Code.Internal, Code.Unknown, Code.DataLoss], where).not.toContain(result.error.code);
          expect(result.reason, `${where}: no ErrorDetail`).toBeDefined();
          expect(result.error.rawMessage, where).not.toMatch(libraryText);
          seen.set(Code[result.error.code]!, (seen.get(Code[result.error.code]!) ?? 0) + 1);
        } else {
          seen.set("ok", (seen.get("ok") ?? 0) + 1);
        }
      }
    }
  } finally {
    session?.close();
  }
  // The bodies reached the decoders: most are refused as malformed, some pass.
  expect(seen.get("InvalidArgument") ?? 0).toBeGreaterThan(100);
  const health = laneway.clients.client(Health);
  expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  expect((await memoryPeak()) - before).toBeLessThan(PEAK_GROWTH_BOUND);
  // A guard, not a speed figure: some thousands of calls, each one round trip,
  // take minutes on a machine whose cores are taken by other work.
}, 300_000);
