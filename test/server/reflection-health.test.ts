import { execFile } from "node:child_process";
import { once } from "node:events";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";

import { create, fromBinary } from "@bufbuild/protobuf";
import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { ConnectRouter, Transport } from "@connectrpc/connect";
import { connectNodeAdapter, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import {
  ServerReflection as ServerReflectionV1,
  ServerReflectionRequestSchema as RequestSchemaV1,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import type { ServerReflectionResponse } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { file_laneway_errors_v1_errors } from "../../gen/laneway/errors/v1/errors_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { healthRoutes, HealthStatus } from "../../src/server/health.js";
import { reflectionRoutes } from "../../src/server/reflection.js";

const BUF = fileURLToPath(new URL("../../node_modules/.bin/buf", import.meta.url));

const lanewayServices: readonly DescService[] = [
  LaneService,
  HiveHubService,
  HiveMemberService,
  KmapCommandService,
  KmapReadService,
];

const expectedServices = [
  "laneway.lane.v1.LaneService",
  "laneway.swarm.v1.HiveHubService",
  "laneway.swarm.v1.HiveMemberService",
  "laneway.kmap.v1.KmapCommandService",
  "laneway.kmap.v1.KmapReadService",
  "grpc.health.v1.Health",
  "grpc.reflection.v1.ServerReflection",
  "grpc.reflection.v1alpha.ServerReflection",
];

/** A real h2c server plus a gRPC client transport whose sessions can be closed. */
interface Running {
  readonly baseUrl: string;
  readonly transport: Transport;
  /** Close client sessions, then server sessions, then the server. */
  close(): Promise<void>;
}

async function startServer(health: HealthStatus): Promise<Running> {
  const routes = (router: ConnectRouter) => {
    // Empty implementations: Connect answers unimplemented, which is enough
    // to prove the schema reached the client.
    for (const service of lanewayServices) router.service(service, {});
    healthRoutes(router, health);
    reflectionRoutes(router, [...lanewayServices, Health], { files: [file_laneway_errors_v1_errors] });
  };
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const baseUrl = `http://127.0.0.1:${port}`;
  const sessionManager = new Http2SessionManager(baseUrl);
  const transport = createGrpcTransport({ baseUrl, sessionManager }); // gRPC is always HTTP/2
  return {
    baseUrl,
    transport,
    async close() {
      sessionManager.abort();
      for (const session of sessions) session.close();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

interface BufResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Run `buf curl` asynchronously: the server runs in this process and must keep serving. */
function bufCurl(...args: string[]): Promise<BufResult> {
  return new Promise((resolve) => {
    execFile(BUF, ["curl", ...args], { timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Send all requests on one reflection stream and collect every answer. */
async function reflect(
  transport: Transport,
  requests: MessageInitShape<typeof RequestSchemaV1>[],
): Promise<ServerReflectionResponse[]> {
  const client = createClient(ServerReflectionV1, transport);
  async function* send() {
    for (const request of requests) yield create(RequestSchemaV1, request);
  }
  const answers: ServerReflectionResponse[] = [];
  for await (const answer of client.serverReflectionInfo(send())) answers.push(answer);
  return answers;
}

/** File names in a file_descriptor_response, in the order sent. */
function fileNames(answer: ServerReflectionResponse | undefined): string[] {
  if (answer?.messageResponse.case !== "fileDescriptorResponse") {
    throw new Error(`expected files, got ${answer?.messageResponse.case}`);
  }
  return answer.messageResponse.value.fileDescriptorProto.map((b) => fromBinary(FileDescriptorProtoSchema, b).name);
}

function errorCode(answer: ServerReflectionResponse | undefined): number | undefined {
  return answer?.messageResponse.case === "errorResponse" ? answer.messageResponse.value.errorCode : undefined;
}

function firstUnaryMethod(service: DescService): string {
  const method = service.methods.find((m) => m.methodKind === "unary");
  if (!method) throw new Error(`${service.typeName} has no unary method`);
  return `${service.typeName}/${method.name}`;
}

describe("reflection and health on a real h2c server", () => {
  const health = new HealthStatus();
  let running: Running;

  beforeAll(async () => {
    running = await startServer(health);
  });

  afterAll(async () => {
    health.shutdown();
    await running?.close();
  });

  describe("buf curl", () => {
    it("--list-services lists Laneway, health and both reflection services", async () => {
      const result = await bufCurl("--list-services", "--protocol", "grpc", "--http2-prior-knowledge", running.baseUrl);
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      const listed = result.stdout.trim().split("\n");
      for (const name of expectedServices) expect(listed).toContain(name);
    });

    it("calls Health/Check schema-less (via reflection) and gets SERVING", async () => {
      const result = await bufCurl(
        "--protocol", "grpc", "--http2-prior-knowledge", "-d", "{}",
        `${running.baseUrl}/grpc.health.v1.Health/Check`,
      );
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      expect(JSON.parse(result.stdout)).toEqual({ status: "SERVING" });
    });

    for (const reflectProtocol of ["grpc-v1", "grpc-v1alpha"]) {
      describe(`--reflect-protocol ${reflectProtocol}`, () => {
        const common = ["--protocol", "grpc", "--http2-prior-knowledge", "--reflect-protocol", reflectProtocol];

        it("lists every method of every service (needs buf/validate and google/protobuf dependencies)", async () => {
          const result = await bufCurl(...common, "--list-methods", running.baseUrl);
          expect(result.stderr).toBe("");
          expect(result.code).toBe(0);
          const listed = result.stdout.trim().split("\n");
          for (const service of [...lanewayServices, Health]) {
            for (const method of service.methods) expect(listed).toContain(`${service.typeName}/${method.name}`);
          }
        });

        it("calls Health/Check", async () => {
          const result = await bufCurl(...common, "-d", '{"service":""}', `${running.baseUrl}/grpc.health.v1.Health/Check`);
          expect(result.stderr).toBe("");
          expect(JSON.parse(result.stdout)).toEqual({ status: "SERVING" });
        });

        it("calls a Laneway method schema-less and reaches the server (unimplemented)", async () => {
          const result = await bufCurl(...common, "-d", "{}", `${running.baseUrl}/${firstUnaryMethod(LaneService)}`);
          // buf curl exits with 8 × the Connect code: the schema resolved and
          // the call got as far as the (empty) implementation.
          expect(result.code).toBe(8 * Code.Unimplemented);
          expect(result.stderr).toMatch(/unimplemented/);
        });
      });
    }
  });

  describe("reflection (Connect client)", () => {
    it("finds the file of services, methods, messages, nested types, fields and enum values", async () => {
      const symbols = [
        "grpc.health.v1.Health",
        "grpc.health.v1.Health.Watch",
        "grpc.health.v1.HealthCheckRequest",
        "grpc.health.v1.HealthCheckRequest.service",
        "grpc.health.v1.HealthCheckResponse.ServingStatus",
        "grpc.health.v1.HealthCheckResponse.SERVING",
        "grpc.health.v1.HealthListResponse.StatusesEntry",
      ];
      const answers = await reflect(
        running.transport,
        symbols.map((symbol) => ({ messageRequest: { case: "fileContainingSymbol", value: symbol } })),
      );
      expect(answers).toHaveLength(symbols.length);
      for (const answer of answers) expect(fileNames(answer)[0]).toBe("grpc/health/v1/health.proto");
    });

    it("sends the requested file plus transitive dependencies, each dependency once per stream", async () => {
      const [lane, hub, laneAgain] = await reflect(running.transport, [
        { messageRequest: { case: "fileContainingSymbol", value: "laneway.lane.v1.LaneService" } },
        { messageRequest: { case: "fileContainingSymbol", value: "laneway.swarm.v1.HiveHubService" } },
        { messageRequest: { case: "fileByFilename", value: "laneway/lane/v1/lane_service.proto" } },
      ]);
      const laneFiles = fileNames(lane);
      expect(laneFiles[0]).toBe("laneway/lane/v1/lane_service.proto");
      expect(laneFiles).toEqual(
        expect.arrayContaining([
          "buf/validate/validate.proto",
          "google/protobuf/descriptor.proto",
          "google/protobuf/duration.proto",
          "google/protobuf/timestamp.proto",
          "google/protobuf/field_mask.proto",
        ]),
      );
      expect(new Set(laneFiles).size).toBe(laneFiles.length);
      // Everything the hive hub imports was already sent with the lane file.
      expect(fileNames(hub)).toEqual(["laneway/swarm/v1/hive_hub_service.proto"]);
      // A file asked for by name always comes back, even if sent before.
      expect(fileNames(laneAgain)).toEqual(["laneway/lane/v1/lane_service.proto"]);
    });

    it("serves the FileDescriptorProto the generated code embeds", async () => {
      const [answer] = await reflect(running.transport, [
        { messageRequest: { case: "fileByFilename", value: "grpc/health/v1/health.proto" } },
      ]);
      if (answer?.messageResponse.case !== "fileDescriptorResponse") throw new Error("expected files");
      const [bytes] = answer.messageResponse.value.fileDescriptorProto;
      const proto = fromBinary(FileDescriptorProtoSchema, bytes ?? new Uint8Array());
      expect(proto.package).toBe("grpc.health.v1");
      expect(proto.service.map((s) => s.method.map((m) => m.name))).toEqual([["Check", "Watch", "List"]]);
    });

    it("describes extra files such as the error detail types", async () => {
      const [answer] = await reflect(running.transport, [
        { messageRequest: { case: "fileContainingSymbol", value: "laneway.errors.v1.ErrorDetail" } },
      ]);
      expect(fileNames(answer)[0]).toBe("laneway/errors/v1/errors.proto");
    });

    it("answers extension requests", async () => {
      const [numbers, byExtension, plain, unknownType, unknownExtension] = await reflect(running.transport, [
        { messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.FieldOptions" } },
        {
          messageRequest: {
            case: "fileContainingExtension",
            value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 1159 },
          },
        },
        { messageRequest: { case: "allExtensionNumbersOfType", value: "grpc.health.v1.HealthCheckRequest" } },
        { messageRequest: { case: "allExtensionNumbersOfType", value: "no.such.Type" } },
        {
          messageRequest: {
            case: "fileContainingExtension",
            value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 99999 },
          },
        },
      ]);
      expect(numbers?.messageResponse.case).toBe("allExtensionNumbersResponse");
      if (numbers?.messageResponse.case === "allExtensionNumbersResponse") {
        expect(numbers.messageResponse.value.baseTypeName).toBe("google.protobuf.FieldOptions");
        expect(numbers.messageResponse.value.extensionNumber).toContain(1159); // (buf.validate.field)
      }
      expect(fileNames(byExtension)[0]).toBe("buf/validate/validate.proto");
      expect(plain?.messageResponse).toMatchObject({
        case: "allExtensionNumbersResponse",
        value: { extensionNumber: [] },
      });
      expect(errorCode(unknownType)).toBe(Code.NotFound);
      expect(errorCode(unknownExtension)).toBe(Code.NotFound);
    });

    it("answers unknown symbols and files with NOT_FOUND and keeps the stream going", async () => {
      const answers = await reflect(running.transport, [
        { host: "example", messageRequest: { case: "fileContainingSymbol", value: "no.such.Symbol" } },
        { messageRequest: { case: "fileByFilename", value: "no/such.proto" } },
        { messageRequest: { case: "listServices", value: "" } },
      ]);
      expect(answers.map(errorCode)).toEqual([Code.NotFound, Code.NotFound, undefined]);
      expect(answers[0]?.validHost).toBe("example");
      expect(answers[0]?.originalRequest?.messageRequest).toEqual({
        case: "fileContainingSymbol",
        value: "no.such.Symbol",
      });
      const list = answers[2]?.messageResponse;
      expect(list?.case).toBe("listServicesResponse");
      if (list?.case === "listServicesResponse") {
        expect(list.value.service.map((s) => s.name).sort()).toEqual([...expectedServices].sort());
      }
    });

    it("serves v1alpha with the same answers", async () => {
      const client = createClient(ServerReflectionV1alpha, running.transport);
      async function* send() {
        yield { messageRequest: { case: "fileContainingSymbol" as const, value: "grpc.health.v1.Health" } };
        yield { messageRequest: { case: "fileContainingSymbol" as const, value: "no.such.Symbol" } };
      }
      const answers = [];
      for await (const answer of client.serverReflectionInfo(send())) answers.push(answer);
      expect(answers[0]?.$typeName).toBe("grpc.reflection.v1alpha.ServerReflectionResponse");
      const files = answers[0]?.messageResponse;
      expect(files?.case).toBe("fileDescriptorResponse");
      if (files?.case === "fileDescriptorResponse") {
        const [bytes] = files.value.fileDescriptorProto;
        expect(fromBinary(FileDescriptorProtoSchema, bytes ?? new Uint8Array()).name).toBe(
          "grpc/health/v1/health.proto",
        );
      }
      expect(answers[1]?.messageResponse).toMatchObject({ case: "errorResponse", value: { errorCode: Code.NotFound } });
    });
  });

  describe("health (Connect client)", () => {
    it("Check reports the overall status and NOT_FOUND for unknown names", async () => {
      const client = createClient(Health, running.transport);
      expect((await client.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      const err = await client.check({ service: "no.such.Service" }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.NotFound);
    });

    it("Watch sends the current status at once, then every change, until cancelled", async () => {
      const client = createClient(Health, running.transport);
      const abort = new AbortController();
      const stream = client.watch({ service: "laneway.test.Watched" }, { signal: abort.signal });
      const it = stream[Symbol.asyncIterator]();
      const S = HealthCheckResponse_ServingStatus;

      expect((await it.next()).value?.status).toBe(S.SERVICE_UNKNOWN);
      expect(health.watcherCount).toBe(1);
      health.set("laneway.test.Watched", "SERVING");
      expect((await it.next()).value?.status).toBe(S.SERVING);
      health.set("laneway.test.Watched", "SERVING"); // no change: nothing sent
      health.set("laneway.test.Watched", "NOT_SERVING");
      expect((await it.next()).value?.status).toBe(S.NOT_SERVING);
      health.set("laneway.test.Watched", "SERVICE_UNKNOWN");
      expect((await it.next()).value?.status).toBe(S.SERVICE_UNKNOWN);

      abort.abort();
      await expect(it.next()).rejects.toMatchObject({ code: Code.Canceled });
      await expect.poll(() => health.watcherCount).toBe(0);
    });

    it("List returns every registered status", async () => {
      health.set("laneway.test.Listed", "NOT_SERVING");
      const client = createClient(Health, running.transport);
      const { statuses } = await client.list({});
      expect(statuses[""]?.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      expect(statuses["laneway.test.Listed"]?.status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
      health.set("laneway.test.Listed", "SERVICE_UNKNOWN");
    });
  });
});

describe("health shutdown", () => {
  it("ends open Watch streams with a final NOT_SERVING so the server can close", async () => {
    const health = new HealthStatus();
    const running = await startServer(health);
    try {
      const client = createClient(Health, running.transport);
      const received: HealthCheckResponse_ServingStatus[] = [];
      const done = (async () => {
        for await (const { status } of client.watch({ service: "" })) received.push(status);
      })();
      await expect.poll(() => received.length).toBe(1);

      health.shutdown();
      await done; // the stream ends normally
      expect(received).toEqual([
        HealthCheckResponse_ServingStatus.SERVING,
        HealthCheckResponse_ServingStatus.NOT_SERVING,
      ]);
      expect(health.watcherCount).toBe(0);

      health.set("", "SERVING"); // ignored after shutdown
      expect(health.get("")).toBe("NOT_SERVING");
      // A watch started after shutdown gets the status and ends at once.
      const late = [];
      for await (const { status } of client.watch({ service: "" })) late.push(status);
      expect(late).toEqual([HealthCheckResponse_ServingStatus.NOT_SERVING]);
    } finally {
      await running.close();
    }
  });
});

describe("HealthStatus", () => {
  it("coalesces changes for a slow watcher to the latest status", async () => {
    const health = new HealthStatus();
    const abort = new AbortController();
    const it = health.watch("svc", abort.signal);
    expect((await it.next()).value).toBe("SERVICE_UNKNOWN");
    health.set("svc", "SERVING");
    health.set("svc", "NOT_SERVING");
    expect((await it.next()).value).toBe("NOT_SERVING");
    const pending = it.next();
    abort.abort();
    expect(await pending).toEqual({ done: true, value: undefined });
    expect(health.watcherCount).toBe(0);
  });
});
