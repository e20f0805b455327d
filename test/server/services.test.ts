import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ViolationsSchema } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { KmapReadService } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { wireProtocols } from "../../src/client/transport.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";

/**
 * Every service through every transport of the generated client: the
 * registry answers from configuration, authentication and authorization
 * refuse the wrong principals, the error mapping gives the documented codes
 * and detail messages, and no secret shows up in an error or a log line.
 */

let laneway: InProcessLaneway;
const seenErrors: ConnectError[] = [];

beforeAll(async () => {
  laneway = await startLanewayInProcess();
});

afterAll(async () => {
  const report = await laneway?.stop();
  expect(report?.ok).toBe(true);
});

async function failure(call: () => Promise<unknown>): Promise<ConnectError> {
  try {
    await call();
  } catch (error) {
    const connectError = ConnectError.from(error);
    seenErrors.push(connectError);
    return connectError;
  }
  throw new Error("the call succeeded but was expected to fail");
}

function reasonOf(error: ConnectError): { reason: string; domain: string } | undefined {
  const [detail] = error.findDetails(ErrorDetailSchema);
  return detail ? { reason: detail.reason, domain: detail.domain } : undefined;
}

describe.each(wireProtocols)("over %s", (protocol) => {
  test("the registry shows each project only its own capabilities, without credentials", async () => {
    const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol });
    const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon, protocol });
    const a = await atlas.getRegistry({});
    expect(a.project).toBe("atlas");
    expect(a.namespace).toBe("commons");
    expect(a.lanes).toHaveLength(1);
    expect(a.lanes[0]).toMatchObject({ lane: "measurements", owner: "atlas", publish: true, subscribe: true, groups: [], recoverGroups: [] });
    const b = await beacon.getRegistry({});
    expect(b.project).toBe("beacon");
    expect(b.lanes[0]).toMatchObject({ lane: "measurements", owner: "atlas", groups: ["summarizers"], recoverGroups: ["summarizers"] });
    expect(b.bounds?.maxPending).toBe(64);
    expect(Number(b.bounds?.lease?.seconds)).toBe(30);
    const text = JSON.stringify([a, b], (_k, v) => (typeof v === "bigint" ? v.toString() : v));
    for (const secret of Object.values(laneway.tokens)) expect(text).not.toContain(secret);
  });

  test("a missing or unknown token is unauthenticated", async () => {
    const anonymous = laneway.clients.client(LaneService, { protocol });
    const missing = await failure(() => anonymous.getRegistry({}));
    expect(missing.code).toBe(Code.Unauthenticated);
    expect(reasonOf(missing)).toEqual({ reason: "unauthorized", domain: "lanes" });
    const stranger = laneway.clients.client(LaneService, { token: "x".repeat(64), protocol });
    const unknown = await failure(() => stranger.getRegistry({}));
    expect(unknown.code).toBe(Code.Unauthenticated);
    expect(unknown.rawMessage).toBe("unknown bearer token");
  });

  test("the operator token grants no lane access and project tokens no operator access", async () => {
    const operatorOnLanes = laneway.clients.client(LaneService, { token: laneway.tokens.admin, protocol });
    const denied = await failure(() => operatorOnLanes.getRegistry({}));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect(reasonOf(denied)).toEqual({ reason: "forbidden", domain: "lanes" });
    for (const service of [KmapCommandService, KmapReadService, HiveHubService] as const) {
      const projectOnOperator = laneway.clients.client(service, { token: laneway.tokens.atlas, protocol });
      const method = service.methods.find((m) => m.methodKind === "unary")!;
      const call = (projectOnOperator as unknown as Record<string, (req: object) => Promise<unknown>>)[method.localName]!;
      const error = await failure(() => call({}));
      expect(error.code, `${service.typeName}.${method.name}`).toBe(Code.PermissionDenied);
      expect(reasonOf(error)?.reason).toBe("forbidden");
    }
  });

  test("without a hive, hub operations answer unavailable and no invite secret is known", async () => {
    const hub = laneway.clients.client(HiveHubService, { token: laneway.tokens.admin, protocol });
    // Without `laneway hive init` the hub answers unavailable, migrations included.
    const migrate = await failure(() => hub.migrateDead({ swarm: "rig" }));
    expect(migrate.code).toBe(Code.Unavailable);
    expect(reasonOf(migrate)).toEqual({ reason: "swarm_unavailable", domain: "swarm" });
    const scope = await failure(() => hub.scope({}));
    expect(scope.code).toBe(Code.Unavailable);
    expect(reasonOf(scope)).toEqual({ reason: "swarm_unavailable", domain: "swarm" });
    const member = laneway.clients.client(HiveMemberService, { token: "an-invite-secret-" + "x".repeat(40), protocol });
    const join = await failure(() => member.join({}));
    expect(join.code).toBe(Code.Unauthenticated);
  });

  test("a request that breaks the contract is invalid_argument with the violations and the lane reason", async () => {
    const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol });
    const error = await failure(() =>
      atlas.publish({ lane: "Not-An-Id", id: "reading-one", kind: RecordKind.EVENT, schema: "temperature-v1", provenance: "https://user:pw@example.net/x" }),
    );
    expect(error.code).toBe(Code.InvalidArgument);
    expect(reasonOf(error)).toEqual({ reason: "lane_invalid", domain: "lanes" });
    const [violations] = error.findDetails(ViolationsSchema);
    const fields = violations?.violations.map((v) => v.field?.elements.map((e) => e.fieldName).join(".")).sort();
    expect(fields).toEqual(["lane", "provenance"]);
    expect(error.rawMessage).not.toContain("user:pw");
  });

  test("validation runs only after authentication", async () => {
    const anonymous = laneway.clients.client(LaneService, { protocol });
    const error = await failure(() => anonymous.publish({ lane: "Not-An-Id" }));
    expect(error.code).toBe(Code.Unauthenticated);
  });

  test("health needs no token and reports the service and NATS", async () => {
    const health = laneway.clients.client(Health, { protocol });
    expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: "laneway.nats" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await health.check({ service: LaneService.typeName })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    const unknown = await failure(() => health.check({ service: "no.such.Service" }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(reasonOf(unknown)).toEqual({ reason: "not_found", domain: "server" });
  });
});

test("no token appears in any error message or log line", () => {
  expect(seenErrors.length).toBeGreaterThan(20);
  const secrets = Object.values(laneway.tokens);
  for (const error of seenErrors) {
    for (const secret of secrets) expect(error.message).not.toContain(secret);
  }
  expect(laneway.logs.length).toBeGreaterThan(0);
  for (const line of laneway.logs) {
    for (const secret of secrets) expect(line).not.toContain(secret);
  }
});

test("without a lanes configuration LaneService still answers, refusing every token with a reason", async () => {
  const off = await startLanewayInProcess({ lanesConfig: false });
  try {
    const stranger = off.clients.client(LaneService, { token: off.tokens.atlas, protocol: "grpc" });
    const unknown = await failure(() => stranger.getRegistry({}));
    expect(unknown.code).toBe(Code.Unauthenticated);
    expect(reasonOf(unknown)).toEqual({ reason: "unauthorized", domain: "lanes" });
    const operator = off.clients.client(LaneService, { token: off.tokens.admin, protocol: "connect-json" });
    expect(reasonOf(await failure(() => operator.getRegistry({})))).toEqual({ reason: "forbidden", domain: "lanes" });
    const health = off.clients.client(Health, { protocol: "grpc" });
    expect((await health.check({ service: LaneService.typeName })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
  } finally {
    expect((await off.stop()).ok).toBe(true);
  }
});
