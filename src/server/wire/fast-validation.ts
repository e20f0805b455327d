import { getExtension, getOption, hasExtension, hasOption, isFieldSet, type DescField, type DescMessage, type Message, type MessageShape, type MessageValidType } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import type { ValidationResult, Validator } from "@bufbuild/protovalidate";
import {
  BytesRulesSchema,
  DurationRulesSchema,
  EnumRulesSchema,
  FieldRulesSchema,
  Ignore,
  RepeatedRulesSchema,
  StringRulesSchema,
  UInt32RulesSchema,
  UInt64RulesSchema,
  field as fieldRules,
  message as messageRules,
  oneof as oneofRules,
  type FieldRules,
  type StringRules,
} from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { hex32, identifier, node_id, receipt } from "../../../gen/laneway/validate/v1/rules_pb.js";

/**
 * A validator that answers `valid` for the messages it can prove valid
 * without evaluating CEL, and asks protovalidate about everything else.
 *
 * protovalidate evaluates each of Laneway's predefined rules (identifier,
 * receipt, …) as a CEL program on every call, which costs more than the
 * rest of a small call's server layer. Most requests carry only those
 * rules and simple numeric bounds, so for each request type this builds,
 * once, a plain check from its descriptor: but only when every rule of the
 * type is one it knows exactly (a Laneway string rule set to true, an
 * unsigned or duration bound, a byte length bound, an enum that must be
 * defined or in or outside a list, an item count bound on a list of
 * messages it can check the same way, a nested message it can check the
 * same way, nothing message-level, no oneof). A scalar whose rules are
 * ignored when it is zero (IGNORE_IF_ZERO_VALUE) is accepted fast only at
 * its zero value, whatever those rules are. A type with any other rule
 * gets no fast check.
 *
 * The fast check may only say "valid" when protovalidate would: a message
 * it does not accept goes to protovalidate, which gives the exact
 * violations (ids, field paths, messages) a client receives. So the
 * answer is always protovalidate's; only the work differs.
 * test/server/fast-validation.test.ts compares the two on valid and
 * invalid messages of every type that has a fast check.
 */
export function fastPathValidator(inner: Validator): Validator {
  const checks = new Map<string, Check | null>();
  function validate<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): ValidationResult<MessageValidType<Desc>, MessageShape<Desc>> {
    let check = checks.get(schema.typeName);
    if (check === undefined) {
      check = compileMessage(schema, new Set()) ?? null;
      checks.set(schema.typeName, check);
    }
    if (check !== null && (message as Message).$typeName === schema.typeName && check(message as Message)) {
      return { kind: "valid", message: message as MessageValidType<Desc>, error: undefined, violations: undefined };
    }
    return inner.validate(schema, message);
  }
  return { validate };
}

/** Whether a request type has a fast check (for the tests). */
export function hasFastCheck(schema: DescMessage): boolean {
  return compileMessage(schema, new Set()) !== undefined;
}

type Check = (message: Message) => boolean;
type ValueCheck = (value: unknown) => boolean;

const always: Check = () => true;

/** The fast check of a message type, or undefined when a rule is not one this knows. */
function compileMessage(schema: DescMessage, visiting: Set<string>): Check | undefined {
  if (visiting.has(schema.typeName)) return undefined; // recursive types: protovalidate's
  if (hasOption(schema, messageRules) || schema.oneofs.length > 0) return undefined;
  visiting.add(schema.typeName);
  try {
    const fields: [string, ValueCheck][] = [];
    for (const f of schema.fields) {
      const check = compileField(f, visiting);
      if (check === undefined) return undefined;
      if (check !== null) fields.push([f.localName, check]);
    }
    if (fields.length === 0) return always;
    return (message) => {
      const record = message as unknown as Record<string, unknown>;
      for (const [name, check] of fields) if (!check(record[name])) return false;
      return true;
    };
  } finally {
    visiting.delete(schema.typeName);
  }
}

/** A field's check; null when nothing is to be checked; undefined when the field has a rule this does not know. */
function compileField(f: DescField, visiting: Set<string>): ValueCheck | null | undefined {
  if (f.oneof !== undefined) return undefined;
  const rules = hasOption(f, fieldRules) ? getOption(f, fieldRules) : undefined;
  if (rules === undefined) {
    // No rule of its own: protovalidate still validates a nested message.
    if (f.fieldKind === "scalar" || f.fieldKind === "enum") return null;
    if (f.fieldKind === "message") {
      const nested = compileMessage(f.message, visiting);
      if (nested === undefined) return undefined;
      if (nested === always) return null;
      return (value) => value === undefined || nested(value as Message);
    }
    if (f.fieldKind === "list" && f.listKind !== "message") return null;
    if (f.fieldKind === "map" && f.mapKind !== "message") return null;
    return undefined;
  }
  // A scalar whose rules apply only when it is set (IGNORE_IF_ZERO_VALUE):
  // its zero value is valid whatever the rules; any other value is
  // protovalidate's to judge (a provenance URI, for example).
  if (f.fieldKind === "scalar" && rules.ignore === Ignore.IF_ZERO_VALUE && onlyTypeRules(rules, ["ignore", "cel"])) return (value) => isZero(value);
  if (!onlyTypeRules(rules)) return undefined;
  const type = rules.type;
  switch (type.case) {
    case "string":
      return f.fieldKind === "scalar" ? stringCheck(type.value) : undefined;
    case "bytes": {
      const r = type.value;
      if (f.fieldKind !== "scalar" || !onlySet(r, BytesRulesSchema, ["min_len", "max_len"])) return undefined;
      // Lengths as numbers, once: a byte string or a list is far shorter than 2^53.
      const min = isFieldSet(r, BytesRulesSchema.field.minLen) ? Number(r.minLen) : 0;
      const max = isFieldSet(r, BytesRulesSchema.field.maxLen) ? Number(r.maxLen) : Number.POSITIVE_INFINITY;
      return (value) => value instanceof Uint8Array && value.byteLength >= min && value.byteLength <= max;
    }
    case "enum": {
      const r = type.value;
      if (f.fieldKind !== "enum" || !onlySet(r, EnumRulesSchema, ["defined_only", "in", "not_in"])) return undefined;
      const defined = new Set(f.enum.values.map((v) => v.number));
      const allowed = r.in.length > 0 ? new Set(r.in) : undefined;
      const refused = new Set(r.notIn);
      return (value) =>
        typeof value === "number" && (!r.definedOnly || defined.has(value)) && (allowed === undefined || allowed.has(value)) && !refused.has(value);
    }
    case "repeated": {
      const r = type.value;
      if (f.fieldKind !== "list" || !onlySet(r, RepeatedRulesSchema, ["min_items", "max_items"])) return undefined;
      const min = isFieldSet(r, RepeatedRulesSchema.field.minItems) ? Number(r.minItems) : 0;
      const max = isFieldSet(r, RepeatedRulesSchema.field.maxItems) ? Number(r.maxItems) : Number.POSITIVE_INFINITY;
      let item: ValueCheck | null;
      if (f.listKind === "message") {
        const nested = compileMessage(f.message, visiting);
        if (nested === undefined) return undefined;
        item = nested === always ? null : (value) => nested(value as Message);
      } else item = null;
      return (value) => {
        if (!Array.isArray(value)) return false;
        if (value.length < min || value.length > max) return false;
        if (item !== null) for (const each of value) if (!item(each)) return false;
        return true;
      };
    }
    case "uint64":
    case "uint32": {
      if (f.fieldKind !== "scalar") return undefined;
      const r = type.value;
      const schema = type.case === "uint64" ? UInt64RulesSchema : UInt32RulesSchema;
      if (!onlySet(r, schema, ["lt", "lte", "gt", "gte"])) return undefined;
      return boundsCheck(r.greaterThan, r.lessThan, (v) => BigInt(v as bigint | number));
    }
    case "duration": {
      if (f.fieldKind !== "message" || f.message.typeName !== "google.protobuf.Duration") return undefined;
      const r = type.value;
      if (!onlySet(r, DurationRulesSchema, ["lt", "lte", "gt", "gte"])) return undefined;
      const nanosOf = (d: Duration) => d.seconds * 1_000_000_000n + BigInt(d.nanos);
      const bounds = boundsCheck(
        r.greaterThan.case === undefined ? r.greaterThan : { case: r.greaterThan.case, value: nanosOf(r.greaterThan.value) },
        r.lessThan.case === undefined ? r.lessThan : { case: r.lessThan.case, value: nanosOf(r.lessThan.value) },
        (v) => nanosOf(v as Duration),
      );
      if (bounds === undefined) return undefined;
      // Rules apply to a set duration only; one outside the canonical form is protovalidate's to judge.
      return (value) => value === undefined || (canonicalDuration(value as Duration) && bounds(value));
    }
    default:
      return undefined;
  }
}

/** Only the rule type is set (and the named fields of FieldRules): no CEL, no required, no ignore, nothing unknown. */
function onlyTypeRules(rules: FieldRules, alsoAllowed: readonly string[] = []): boolean {
  for (const f of FieldRulesSchema.fields) {
    if (f.oneof?.name === "type" || alsoAllowed.includes(f.name)) continue;
    if (isFieldSet(rules, f)) return false;
  }
  return (rules.$unknown ?? []).length === 0;
}

/** A scalar's zero value: what IGNORE_IF_ZERO_VALUE skips. */
function isZero(value: unknown): boolean {
  if (value instanceof Uint8Array) return value.byteLength === 0;
  return value === "" || value === 0 || value === 0n || value === false;
}

/** Only the named fields of a rules message are set, and no extension. */
function onlySet(rules: Message, schema: DescMessage, allowed: readonly string[]): boolean {
  for (const f of schema.fields) if (!allowed.includes(f.name) && isFieldSet(rules as never, f)) return false;
  return ((rules as { $unknown?: unknown[] }).$unknown ?? []).length === 0;
}

type Bound = { case: undefined; value?: undefined } | { case: string; value: bigint | number };

/** A lower and an upper bound as protovalidate reads them, when they form one ordinary range (or one side). */
function boundsCheck(lower: Bound, upper: Bound, valueOf: (value: unknown) => bigint): ValueCheck | undefined {
  const lo = lower.case === undefined ? undefined : { strict: lower.case === "gt", value: BigInt(lower.value) };
  const hi = upper.case === undefined ? undefined : { strict: upper.case === "lt", value: BigInt(upper.value) };
  // An upper bound below the lower one means "outside the range" to protovalidate: not handled here.
  if (lo !== undefined && hi !== undefined && hi.value < lo.value) return undefined;
  return (value) => {
    if (value === undefined) return false; // an unset optional field: protovalidate's to judge
    const v = valueOf(value);
    if (lo !== undefined && (lo.strict ? v <= lo.value : v < lo.value)) return false;
    if (hi !== undefined && (hi.strict ? v >= hi.value : v > hi.value)) return false;
    return true;
  };
}

function canonicalDuration(d: Duration): boolean {
  const max = 315_576_000_000n;
  if (d.seconds > max || d.seconds < -max || d.nanos > 999_999_999 || d.nanos < -999_999_999) return false;
  return !((d.seconds > 0n && d.nanos < 0) || (d.seconds < 0n && d.nanos > 0));
}

/**
 * Laneway's string rules (rules.proto), exactly as their CEL expressions
 * say; the regular expressions admit ASCII only, so a string's length is
 * its size in code points as CEL counts it.
 */
const stringRules = [
  { extension: identifier, test: (s: string) => s.length <= 64 && /^[a-z][a-z0-9_-]*$/.test(s) },
  { extension: node_id, test: (s: string) => /^[0-9a-f]{32}$/.test(s) },
  { extension: hex32, test: (s: string) => /^[0-9a-f]{32}$/.test(s) },
  { extension: receipt, test: (s: string) => /^[0-9a-f]{64}$/.test(s) },
] as const;

function stringCheck(rules: StringRules): ValueCheck | null | undefined {
  for (const f of StringRulesSchema.fields) if (isFieldSet(rules, f)) return undefined;
  const known = new Set<number>(stringRules.map((r) => r.extension.number));
  if ((rules.$unknown ?? []).some((u) => !known.has(u.no))) return undefined;
  const tests = stringRules.filter((r) => hasExtension(rules, r.extension) && getExtension(rules, r.extension)).map((r) => r.test);
  if (tests.length === 0) return null;
  return (value) => typeof value === "string" && tests.every((test) => test(value));
}
