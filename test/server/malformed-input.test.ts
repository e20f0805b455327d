import * as http2 from "node:http2";
import { create, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { GetCommandRequestSchema, SubmitCommandRequestSchema, WatchCommandsRequestSchema } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { FollowRequestSchema, PublishRequestSchema } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { envelope, rawCall, type RawProtocol } from "../helpers/raw-rpc.js";

/**
 * Every way a request body can be malformed, on every protocol and for
 * unary and server-streaming methods alike: the answer is the documented
 * code with an ErrorDetail (reason and domain) and a message Laneway wrote —
 * never `internal`, never a library's text — and the server keeps serving.
 */

const LIMIT = 65_536;
let laneway: InProcessLaneway;

beforeAll(async () => {
  laneway = await startLanewayInProcess({ args: ["--max-request-bytes", String(LIMIT)] });
});

afterAll(async () => {
  await laneway?.stop();
});

interface Wire {
  readonly name: string;
  readonly protocol: RawProtocol;
  readonly binary: boolean;
  contentType(streaming: boolean): string;
}

const wires: readonly Wire[] = [
  { name: "Connect JSON", protocol: "connect", binary: false, contentType: (s) => (s ? "application/connect+json" : "application/json") },
  { name: "Connect binary", protocol: "connect", binary: true, contentType: (s) => (s ? "application/connect+proto" : "application/proto") },
  { name: "gRPC", protocol: "grpc", binary: true, contentType: () => "application/grpc" },
  { name: "gRPC with JSON", protocol: "grpc", binary: false, contentType: () => "application/grpc+json" },
  { name: "gRPC-Web", protocol: "grpc-web", binary: true, contentType: () => "application/grpc-web+proto" },
  { name: "gRPC-Web with JSON", protocol: "grpc-web", binary: false, contentType: () => "application/grpc-web+json" },
];

interface Method {
  readonly path: string;
  readonly input: DescMessage;
  readonly streaming: boolean;
  readonly token: (l: InProcessLaneway) => string;
  readonly domain: string;
  readonly invalid: string;
}

const submit: Method = {
  path: "/laneway.kmap.v1.KmapCommandService/SubmitCommand",
  input: SubmitCommandRequestSchema,
  streaming: false,
  token: (l) => l.tokens.admin,
  domain: "kmap",
  invalid: "invalid_input",
};
const watch: Method = {
  path: "/laneway.kmap.v1.KmapCommandService/WatchCommands",
  input: WatchCommandsRequestSchema,
  streaming: true,
  token: (l) => l.tokens.admin,
  domain: "kmap",
  invalid: "invalid_input",
};
const follow: Method = {
  path: "/laneway.lane.v1.LaneService/Follow",
  input: FollowRequestSchema,
  streaming: true,
  token: (l) => l.tokens.atlas,
  domain: "lanes",
  invalid: "lane_invalid",
};
const publish: Method = {
  path: "/laneway.lane.v1.LaneService/Publish",
  input: PublishRequestSchema,
  streaming: false,
  token: (l) => l.tokens.atlas,
  domain: "lanes",
  invalid: "lane_invalid",
};

const validSubmit = toBinary(
  SubmitCommandRequestSchema,
  create(SubmitCommandRequestSchema, {
    idempotencyId: "0123456789abcdef0123456789abcdef",
    command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: "a title long enough to cut" } } }),
  }),
);

interface Case {
  readonly name: string;
  /** Which codec the body is written in; undefined for both. */
  readonly binary?: boolean;
  readonly methods: readonly Method[];
  /** The message bytes (framed by the test as the protocol expects). */
  readonly message: (m: Method) => Uint8Array;
  readonly headers?: (w: Wire, streaming: boolean) => Record<string, string>;
  readonly code: Code;
  readonly reason: (m: Method) => string;
  readonly text: (m: Method) => string;
}

const bytes = (...b: number[]) => new Uint8Array(b);
const text = (s: string) => new TextEncoder().encode(s);
const notBinary = (m: Method) => `the request body is not a valid ${m.input.typeName} in the protobuf binary format`;

const cases: readonly Case[] = [
  { name: "binary garbage", binary: true, methods: [submit, watch, follow, publish], message: () => bytes(0xff, 0xff, 0xff, 0xff, 0x0f), code: Code.InvalidArgument, reason: (m) => m.invalid, text: notBinary },
  { name: "a truncated message", binary: true, methods: [submit], message: () => validSubmit.subarray(0, validSubmit.length - 7), code: Code.InvalidArgument, reason: (m) => m.invalid, text: notBinary },
  { name: "invalid UTF-8 in a string field", binary: true, methods: [submit, watch, follow], message: () => bytes(0x0a, 0x02, 0xff, 0xfe), code: Code.InvalidArgument, reason: (m) => m.invalid, text: notBinary },
  { name: "a JSON syntax error", binary: false, methods: [submit, watch, follow, publish], message: () => text('{"idempotencyId":'), code: Code.InvalidArgument, reason: (m) => m.invalid, text: () => "the request body is not valid JSON" },
  { name: "invalid UTF-8 in JSON", binary: false, methods: [submit, follow], message: () => bytes(...text('{"lane":"'), 0xff, ...text('"}')), code: Code.InvalidArgument, reason: (m) => m.invalid, text: () => "the request body is not valid UTF-8" },
  {
    name: "a JSON field of the wrong type",
    binary: false,
    methods: [submit, publish],
    message: (m) => text(m === submit ? '{"idempotencyId":5}' : '{"lane":{"x":1}}'),
    code: Code.InvalidArgument,
    reason: (m) => m.invalid,
    text: (m) => `the request body does not match ${m.input.typeName}: a field has the wrong type or an invalid value`,
  },
  {
    name: "an unknown enum name in JSON",
    binary: false,
    methods: [publish],
    message: () => text('{"lane":"measurements","kind":"RECORD_KIND_BOGUS"}'),
    code: Code.InvalidArgument,
    reason: (m) => m.invalid,
    text: () => "the request field kind names an enum value the contract does not define",
  },
  { name: "a JSON array instead of an object", binary: false, methods: [watch], message: () => text("[1,2]"), code: Code.InvalidArgument, reason: (m) => m.invalid, text: (m) => `the request body must be a JSON object (a ${m.input.typeName})` },
  {
    name: "a body over the read limit",
    methods: [submit, follow],
    message: () => new Uint8Array(LIMIT + 100).fill(0x20),
    code: Code.ResourceExhausted,
    reason: () => "message_too_large",
    text: () => `the request message is larger than the server's limit of ${LIMIT} bytes`,
  },
  {
    name: "a content encoding the server does not accept",
    methods: [submit, watch],
    message: () => bytes(1, 2, 3),
    headers: (w, streaming) => ({ [w.protocol === "connect" ? (streaming ? "connect-content-encoding" : "content-encoding") : "grpc-encoding"]: "br" }),
    code: Code.Unimplemented,
    reason: () => "unimplemented",
    text: () => "the request's content encoding is not supported: send it uncompressed or with gzip",
  },
];

/** Text that would mean a library's message reached the client. */
const libraryText = /parse binary|premature EOF|illegal tag|wire type|cannot decode|Unexpected (token|end)|JSON at position|invalid UTF-8|decompression failed/i;

async function expectHealthy(): Promise<void> {
  const health = laneway.clients.client(Health);
  expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
}

describe.each(wires)("over $name", (wire) => {
  const applicable = cases.flatMap((c) => (c.binary === undefined || c.binary === wire.binary ? c.methods.map((m) => [c, m] as const) : []));
  test.each(applicable.map(([c, m]) => [`${c.name} to ${m.path}`, c, m] as const))("%s", async (_name, c, m) => {
    const message = c.message(m);
    const framed = wire.protocol !== "connect" || m.streaming ? envelope(message) : message;
    const result = await rawCall({
      baseUrl: laneway.url,
      protocol: wire.protocol,
      path: m.path,
      contentType: wire.contentType(m.streaming),
      body: framed,
      token: m.token(laneway),
      headers: c.headers?.(wire, m.streaming) ?? {},
    });
    expect(result.error, `no error: HTTP ${result.status} ${result.body.toString("utf8").slice(0, 200)}`).toBeDefined();
    expect(Code[result.error!.code]).toBe(Code[c.code]);
    expect({ reason: result.reason, domain: result.domain }).toEqual({ reason: c.reason(m), domain: m.domain });
    expect(result.error!.rawMessage).toBe(c.text(m));
    expect(result.error!.rawMessage).not.toMatch(libraryText);
    await expectHealthy();
  });
});

describe("content type and routes", () => {
  test.each([
    ["text/plain", "text/plain"],
    ["no content type", undefined],
    ["a streaming type on a unary method", "application/connect+json"],
    ["gRPC-Web text", "application/grpc-web-text"],
  ])("%s answers 415 with the domain's invalid reason", async (_name, contentType) => {
    const result = await rawCall({ baseUrl: laneway.url, protocol: "connect", path: submit.path, contentType, body: text("{}"), token: laneway.tokens.admin });
    expect(result.status).toBe(415);
    expect(Code[result.error!.code]).toBe("InvalidArgument");
    expect({ reason: result.reason, domain: result.domain }).toEqual({ reason: "invalid_input", domain: "kmap" });
    expect(result.error!.rawMessage).toMatch(/^unsupported content type/);
    await expectHealthy();
  });

  test.each(["connect", "grpc", "grpc-web"] as const)("a method that does not exist answers unimplemented in the %s form", async (protocol) => {
    const contentType = { connect: "application/json", grpc: "application/grpc", "grpc-web": "application/grpc-web+proto" }[protocol];
    const result = await rawCall({ baseUrl: laneway.url, protocol, path: "/laneway.kmap.v1.KmapCommandService/Nope", contentType, body: protocol === "connect" ? text("{}") : envelope(new Uint8Array()) });
    expect(Code[result.error!.code]).toBe("Unimplemented");
    expect({ reason: result.reason, domain: result.domain }).toEqual({ reason: "unimplemented", domain: "server" });
    // gRPC: a trailers-only response (HTTP 200, grpc-status in the headers); Connect: 404.
    expect(result.status).toBe(protocol === "connect" ? 404 : 200);
  });

  test.each(["application/grpc", "application/grpc-web+proto"])(
    "over HTTP/2, %s gets the trailers-only answer as one HEADERS frame that ends the stream",
    async (contentType) => {
      const session = http2.connect(laneway.url);
      try {
        const stream = session.request({ ":method": "POST", ":path": "/laneway.kmap.v1.KmapCommandService/Nope", "content-type": contentType, te: "trailers" });
        const answer = await new Promise<{ headers: http2.IncomingHttpHeaders; flags: number; data: number; rstCode: number | undefined }>((resolve, reject) => {
          let headers: http2.IncomingHttpHeaders = {};
          let flags = 0;
          let data = 0;
          stream.on("response", (h, f) => {
            headers = h;
            flags = f;
          });
          stream.on("data", (c: Buffer) => (data += c.byteLength));
          stream.on("error", reject);
          stream.on("close", () => resolve({ headers, flags, data, rstCode: stream.rstCode }));
          stream.end(envelope(new Uint8Array()));
        });
        expect(answer.flags & http2.constants.NGHTTP2_FLAG_END_STREAM).toBe(http2.constants.NGHTTP2_FLAG_END_STREAM);
        expect(answer.headers[":status"]).toBe(200);
        expect(answer.headers["grpc-status"]).toBe("12");
        expect(answer.headers["grpc-status-details-bin"]).toBeDefined();
        expect(answer.data).toBe(0);
        expect(answer.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
      } finally {
        session.close();
      }
    },
  );

  test("a Connect GET with a malformed query answers the domain's invalid reason after authentication", async () => {
    const path = "/laneway.lane.v1.LaneService/GetRegistry?encoding=json&message=%7Bbad";
    const unauthenticated = await fetch(new URL(path, laneway.url));
    expect(unauthenticated.status).toBe(401);
    const malformed = await fetch(new URL(path, laneway.url), { headers: { authorization: `Bearer ${laneway.tokens.atlas}` } });
    expect(malformed.status).toBe(400);
    const body = (await malformed.json()) as { code: string; message: string; details: { debug: { reason: string; domain: string } }[] };
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toBe("the request body is not valid JSON");
    expect(body.details[0]!.debug).toEqual({ reason: "lane_invalid", domain: "lanes" });
  });

  test.each([
    ["JSON", `encoding=json&message=${encodeURIComponent('{"idempotencyId":"ffffffffffffffffffffffffffffffff","futureField":[1]}')}`],
    [
      "binary, base64",
      `encoding=proto&base64=1&message=${Buffer.from(toBinary(GetCommandRequestSchema, create(GetCommandRequestSchema, { idempotencyId: "ffffffffffffffffffffffffffffffff" }))).toString("base64url")}`,
    ],
  ])("a Connect GET with a valid %s query reaches the service with the message it carries", async (_name, query) => {
    // not_found (rather than a validation error for an empty id) shows the service got the query's message.
    const answer = await fetch(new URL(`/laneway.kmap.v1.KmapCommandService/GetCommand?${query}`, laneway.url), { headers: { authorization: `Bearer ${laneway.tokens.admin}` } });
    const body = (await answer.json()) as { code: string; details: { debug: { reason: string; domain: string } }[] };
    expect(answer.status).toBe(404);
    expect(body.code).toBe("not_found");
    expect(body.details[0]!.debug).toEqual({ reason: "not_found", domain: "kmap" });
  });

  test("unknown JSON fields stay ignored (forward compatibility)", async () => {
    const result = await rawCall({
      baseUrl: laneway.url,
      protocol: "connect",
      path: "/laneway.lane.v1.LaneService/GetRegistry",
      contentType: "application/json",
      body: text('{"aFieldFromTheFuture":1}'),
      token: laneway.tokens.atlas,
    });
    expect(result.error).toBeUndefined();
    expect(JSON.parse(result.body.toString("utf8")).project).toBe("atlas");
  });
});
