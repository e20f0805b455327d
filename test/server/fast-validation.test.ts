import { create, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import type { Validator } from "@bufbuild/protovalidate";
import { expect, test } from "vitest";
import { AckRequestSchema, ClaimRequestSchema } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { lanewayServices } from "../../src/server/laneway-server.js";
import { fastPathValidator, hasFastCheck } from "../../src/server/wire/fast-validation.js";
import { contractValidator } from "../../src/validation/contract-validator.js";

/**
 * The server validates requests with protovalidate behind a fast check
 * (src/server/wire/fast-validation.ts) that may answer "valid" without
 * evaluating CEL. It must never accept what protovalidate refuses: here,
 * for every request type that has a fast check, messages built from edge
 * values of each field are judged by both, and whenever the fast check
 * answered alone, protovalidate agrees.
 */

const strings = ["", "a", "jobs", "a-b_c9", "Jobs", "1ab", "-ab", "a".repeat(64), "a".repeat(65), "0".repeat(32), "0".repeat(31), "f".repeat(64), "F".repeat(64), "0".repeat(63), "0".repeat(65), "é", "a\n", "ab ", "a.b"];
const uint64s = [0n, 1n, 2n, 18446744073709551615n];
const uint32s = [0, 1, 2, 63, 64, 65, 128, 4294967295];
const durations = [
  undefined,
  create(DurationSchema, {}),
  create(DurationSchema, { seconds: 60n }),
  create(DurationSchema, { seconds: 60n, nanos: 1 }),
  create(DurationSchema, { seconds: 59n, nanos: 999_999_999 }),
  create(DurationSchema, { seconds: -1n }),
  create(DurationSchema, { nanos: -1 }),
  create(DurationSchema, { seconds: 1n, nanos: 1_000_000_000 }),
  create(DurationSchema, { seconds: 1n, nanos: -5 }),
  create(DurationSchema, { seconds: 61n }),
];

function candidates(f: DescField): readonly unknown[] | undefined {
  if (f.fieldKind === "scalar") {
    switch (f.scalar) {
      case 9: // string
        return strings;
      case 4: // uint64
        return uint64s;
      case 13: // uint32
        return uint32s;
      default:
        return undefined;
    }
  }
  if (f.fieldKind === "message" && f.message.typeName === "google.protobuf.Duration") return durations;
  return undefined;
}

/** A deterministic pseudo-random sequence (the test must not depend on luck). */
function sequence(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x / 2147483648;
  };
}

const inputs: DescMessage[] = [...new Map(lanewayServices.flatMap((s) => s.methods.map((m) => [m.input.typeName, m.input] as const))).values()];

test("the hot lane requests have a fast check", () => {
  expect(hasFastCheck(ClaimRequestSchema)).toBe(true);
  expect(hasFastCheck(AckRequestSchema)).toBe(true);
});

test("a fast check accepts only what protovalidate accepts, and the answer is always protovalidate's", () => {
  let innerCalls = 0;
  const counting: Validator = {
    validate: (schema, message) => {
      innerCalls += 1;
      return contractValidator.validate(schema, message);
    },
  };
  const validator = fastPathValidator(counting);
  const random = sequence(17);
  let fastAnswers = 0;
  let checkedTypes = 0;
  for (const schema of inputs) {
    if (!hasFastCheck(schema)) continue;
    checkedTypes += 1;
    const fields = schema.fields.map((f) => ({ f, values: candidates(f) }));
    for (let i = 0; i < 120; i++) {
      const message = create(schema) as Message & Record<string, unknown>;
      for (const { f, values } of fields) {
        if (values !== undefined) message[f.localName] = values[Math.floor(random() * values.length)];
      }
      innerCalls = 0;
      const fast = validator.validate(schema, message);
      const truth = contractValidator.validate(schema, message);
      expect(fast.kind, `${schema.typeName} ${JSON.stringify(message, (_, v: unknown) => (typeof v === "bigint" ? `${v}n` : v))}`).toBe(truth.kind);
      if (innerCalls === 0) {
        fastAnswers += 1;
        expect(truth.kind).toBe("valid");
      } else if (truth.kind === "invalid" && fast.kind === "invalid") {
        expect(fast.violations.map((v) => v.ruleId)).toEqual(truth.violations.map((v) => v.ruleId));
      }
    }
  }
  expect(checkedTypes).toBeGreaterThanOrEqual(2);
  // The comparison above meant something: the fast checks did answer.
  expect(fastAnswers).toBeGreaterThan(0);
});

test("typical Claim and Ack requests are answered by the fast check", () => {
  let innerCalls = 0;
  const validator = fastPathValidator({
    validate: (schema, message) => {
      innerCalls += 1;
      return contractValidator.validate(schema, message);
    },
  });
  const claim = create(ClaimRequestSchema, { lane: "jobs", group: "workers", wait: { seconds: 1n } });
  const ack = create(AckRequestSchema, { lane: "jobs", group: "workers", sequence: 7n, receipt: "ab".repeat(32) });
  expect(validator.validate(ClaimRequestSchema, claim).kind).toBe("valid");
  expect(validator.validate(AckRequestSchema, ack).kind).toBe("valid");
  expect(innerCalls).toBe(0);
  // A refused one gets protovalidate's own violations.
  const bad = validator.validate(AckRequestSchema, create(AckRequestSchema, { ...ack, sequence: 0n, receipt: "AB".repeat(32) }));
  expect(innerCalls).toBe(1);
  expect(bad.kind === "invalid" ? bad.violations.map((v) => v.ruleId).sort() : []).toEqual(["laneway.receipt", "uint64.gt"]);
});
