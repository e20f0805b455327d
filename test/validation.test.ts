import { create } from "@bufbuild/protobuf";
import { expect, test } from "vitest";
import { GetCommandRequestSchema } from "../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { GetNodeRequestSchema } from "../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { AckRequestSchema, InspectGroupRequestSchema } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { MigrateDeadRequestSchema, ScopeRequestSchema } from "../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { contractValidator } from "../src/validation/contract-validator.js";

/**
 * The predefined rules of laneway/validate/v1/rules.proto are applied (a
 * validator without their extensions would skip them silently), each with
 * its own rule id.
 */

function ruleIds(result: ReturnType<typeof contractValidator.validate>): string[] {
  return result.kind === "invalid" ? result.violations.map((v) => v.ruleId).sort() : [];
}

test("identifier", () => {
  expect(ruleIds(contractValidator.validate(InspectGroupRequestSchema, create(InspectGroupRequestSchema, { lane: "measurements", group: "summarizers" })))).toEqual([]);
  expect(ruleIds(contractValidator.validate(InspectGroupRequestSchema, create(InspectGroupRequestSchema, { lane: "Measurements", group: "a".repeat(65) })))).toEqual([
    "laneway.identifier",
    "laneway.identifier",
  ]);
});

test("receipt", () => {
  const ok = create(AckRequestSchema, { lane: "l", group: "g", sequence: 1n, receipt: "a".repeat(64) });
  expect(ruleIds(contractValidator.validate(AckRequestSchema, ok))).toEqual([]);
  expect(ruleIds(contractValidator.validate(AckRequestSchema, { ...ok, receipt: "A".repeat(64) }))).toEqual(["laneway.receipt"]);
});

test("node_id and hex32", () => {
  expect(ruleIds(contractValidator.validate(GetNodeRequestSchema, create(GetNodeRequestSchema, { nodeId: "pending:x" })))).toEqual(["laneway.node_id"]);
  expect(ruleIds(contractValidator.validate(GetCommandRequestSchema, create(GetCommandRequestSchema, { idempotencyId: "0".repeat(31) })))).toEqual(["laneway.hex32"]);
  expect(ruleIds(contractValidator.validate(GetCommandRequestSchema, create(GetCommandRequestSchema, { idempotencyId: "0".repeat(32) })))).toEqual([]);
});

test("swarm", () => {
  expect(ruleIds(contractValidator.validate(MigrateDeadRequestSchema, create(MigrateDeadRequestSchema, { swarm: "rig-grade-swarm" })))).toEqual([]);
  for (const bad of ["", "a.b", "a*", ">", "has space", "x".repeat(65)]) {
    expect(ruleIds(contractValidator.validate(MigrateDeadRequestSchema, create(MigrateDeadRequestSchema, { swarm: bad }))), bad).toEqual(["laneway.swarm"]);
  }
  expect(ruleIds(contractValidator.validate(ScopeRequestSchema, create(ScopeRequestSchema, { swarms: ["rig", "a.b"] })))).toEqual(["laneway.swarm"]);
});
