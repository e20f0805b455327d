import { create, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import type { Validator } from "@bufbuild/protovalidate";
import { expect, test } from "vitest";
import {
  AckBatchRequestSchema,
  AckRequestSchema,
  ClaimBatchRequestSchema,
  ClaimRequestSchema,
  NackBatchRequestSchema,
  PublishBatchRequestSchema,
  PublishRequestSchema,
  RecordKind,
  RenewBatchRequestSchema,
} from "../../gen/laneway/lane/v1/lane_service_pb.js";
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

const byteStrings = [new Uint8Array(0), new Uint8Array(1), new Uint8Array(200), new Uint8Array(1_048_576), new Uint8Array(1_048_577)];
const provenances = ["https://example.com/a", "https://user:pw@example.com/a", "not a uri", "urn:laneway:x", "x".repeat(2_100)];

/** Values to try for a field; `next` draws the choices, `depth` bounds the messages built inside lists. */
function candidates(f: DescField, next: () => number, depth = 0): readonly unknown[] | undefined {
  if (f.fieldKind === "enum") return [0, 1, 2, 3, 99, -1];
  if (f.fieldKind === "list" && f.listKind === "message" && depth === 0) {
    const item = () => build(f.message, next, depth + 1);
    return [[], [item()], [item(), item()], Array.from({ length: 64 }, item), Array.from({ length: 65 }, item), Array.from({ length: 128 }, item), Array.from({ length: 129 }, item)];
  }
  if (f.fieldKind === "scalar") {
    switch (f.scalar) {
      case 12: // bytes
        return byteStrings;
      case 9: // string
        return f.name === "provenance" ? ["", ...provenances] : strings;
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

/** A message of `schema` with each field drawn from its candidates. */
function build(schema: DescMessage, next: () => number, depth = 0): Message & Record<string, unknown> {
  const message = create(schema) as Message & Record<string, unknown>;
  for (const f of schema.fields) {
    const values = candidates(f, next, depth);
    if (values !== undefined) message[f.localName] = values[Math.floor(next() * values.length)];
  }
  return message;
}

/** A message for a failure's text: bytes by their length, lists by their size. */
function describe(message: unknown): string {
  return JSON.stringify(message, (_, v: unknown) =>
    typeof v === "bigint" ? `${v}n` : v instanceof Uint8Array ? `<${v.byteLength} bytes>` : Array.isArray(v) && v.length > 3 ? `<${v.length} items>` : v,
  );
}

/** The fast validator in front of protovalidate, counting the calls that reached protovalidate. */
function countingValidator(): { validator: Validator; innerCalls: () => number; reset: () => void } {
  let calls = 0;
  const validator = fastPathValidator({
    validate: (schema, message) => {
      calls += 1;
      return contractValidator.validate(schema, message);
    },
  });
  return { validator, innerCalls: () => calls, reset: () => (calls = 0) };
}

const inputs: DescMessage[] = [...new Map(lanewayServices.flatMap((s) => s.methods.map((m) => [m.input.typeName, m.input] as const))).values()];

test("the hot lane requests have a fast check", () => {
  for (const schema of [ClaimRequestSchema, AckRequestSchema, PublishRequestSchema, PublishBatchRequestSchema, AckBatchRequestSchema, NackBatchRequestSchema, RenewBatchRequestSchema, ClaimBatchRequestSchema]) {
    expect(hasFastCheck(schema), schema.typeName).toBe(true);
  }
});

test("a fast check accepts only what protovalidate accepts, and the answer is always protovalidate's", () => {
  const { validator, innerCalls, reset } = countingValidator();
  const random = sequence(17);
  let fastAnswers = 0;
  let checkedTypes = 0;
  for (const schema of inputs) {
    if (!hasFastCheck(schema)) continue;
    checkedTypes += 1;
    for (let i = 0; i < 120; i++) {
      const message = build(schema, random);
      reset();
      const fast = validator.validate(schema, message);
      const truth = contractValidator.validate(schema, message);
      if (fast.kind !== truth.kind) expect.fail(`${schema.typeName} ${describe(message)}: fast ${fast.kind}, protovalidate ${truth.kind}`);
      if (innerCalls() === 0) {
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
  const { validator, innerCalls } = countingValidator();
  const claim = create(ClaimRequestSchema, { lane: "jobs", group: "workers", wait: { seconds: 1n } });
  const ack = create(AckRequestSchema, { lane: "jobs", group: "workers", sequence: 7n, receipt: "ab".repeat(32) });
  expect(validator.validate(ClaimRequestSchema, claim).kind).toBe("valid");
  expect(validator.validate(AckRequestSchema, ack).kind).toBe("valid");
  expect(innerCalls()).toBe(0);
  // A refused one gets protovalidate's own violations.
  const bad = validator.validate(AckRequestSchema, create(AckRequestSchema, { ...ack, sequence: 0n, receipt: "AB".repeat(32) }));
  expect(innerCalls()).toBe(1);
  expect(bad.kind === "invalid" ? bad.violations.map((v) => v.ruleId).sort() : []).toEqual(["laneway.receipt", "uint64.gt"]);
});

test("typical Publish, PublishBatch and AckBatch requests are answered by the fast check; a provenance, or a bad kind, goes to protovalidate", () => {
  const { validator, innerCalls } = countingValidator();
  const record = { id: "r-1", kind: RecordKind.WORK, schema: "job", payload: new Uint8Array(200) };
  const publish = create(PublishRequestSchema, { lane: "jobs", ...record });
  const batch = create(PublishBatchRequestSchema, { lane: "jobs", records: Array.from({ length: 128 }, (_, i) => ({ ...record, id: `r-${i}` })) });
  const acks = create(AckBatchRequestSchema, { lane: "jobs", group: "workers", receipts: [{ sequence: 7n, receipt: "ab".repeat(32) }] });
  expect(validator.validate(PublishRequestSchema, publish).kind).toBe("valid");
  expect(validator.validate(PublishBatchRequestSchema, batch).kind).toBe("valid");
  expect(validator.validate(AckBatchRequestSchema, acks).kind).toBe("valid");
  expect(innerCalls()).toBe(0);
  // A set provenance is protovalidate's to judge: a valid one passes, one with credentials does not.
  expect(validator.validate(PublishRequestSchema, create(PublishRequestSchema, { ...publish, provenance: "https://example.com/x" })).kind).toBe("valid");
  expect(innerCalls()).toBe(1);
  const credentials = validator.validate(PublishRequestSchema, create(PublishRequestSchema, { ...publish, provenance: "https://u:p@example.com/x" }));
  expect(credentials.kind === "invalid" ? credentials.violations.map((v) => v.ruleId) : []).toEqual(["provenance.no_credentials"]);
  const unset = validator.validate(PublishRequestSchema, create(PublishRequestSchema, { ...publish, kind: RecordKind.UNSPECIFIED }));
  expect(unset.kind === "invalid" ? unset.violations.map((v) => v.ruleId) : []).toEqual(["enum.not_in"]);
  const tooMany = validator.validate(PublishBatchRequestSchema, create(PublishBatchRequestSchema, { lane: "jobs", records: [...batch.records, batch.records[0]!] }));
  expect(tooMany.kind === "invalid" ? tooMany.violations.map((v) => v.ruleId) : []).toEqual(["repeated.max_items"]);
  expect(innerCalls()).toBe(4);
});
