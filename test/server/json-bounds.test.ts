import { getOption, hasOption, type DescMessage } from "@bufbuild/protobuf";
import { field as fieldRules } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import { describe, expect, test } from "vitest";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection as ServerReflectionV1 } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { lanewayServices } from "../../src/server/laneway-server.js";
import { ReplayRequestSchema } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { JSON_BOUNDS, jsonBoundsProblem, quoteIntegers } from "../../src/server/wire/json-bounds.js";
import { parseMessage } from "../../src/server/wire/request-body.js";
import { SeededRandom } from "../helpers/seeded-random.js";

/**
 * The JSON pre-scan of src/server/wire/json-bounds.ts on its own: what it
 * lets through and what it refuses, compared against JSON.parse on random
 * texts, and the contract's request types measured against its bounds.
 * (test/server/hostile-json.test.ts sends the hostile bodies to a server.)
 */

const scan = (text: string) => jsonBoundsProblem(Buffer.from(text, "utf8"));
const { maxDepth, maxMembers, maxTotalMembers } = JSON_BOUNDS;
const deep = `the request body nests JSON objects and arrays more than ${maxDepth} levels deep`;
const wide = `a JSON object or array in the request body has more than ${maxMembers} members`;
const many = `the request body holds more than ${maxTotalMembers} JSON members and elements in all`;
const duplicate = "a JSON object in the request body names the same key twice";
const notJson = "the request body is not valid JSON";

describe("well-formed messages within the bounds pass", () => {
  test.each([
    "{}",
    " \t\r\n{ } \n",
    '{"lane":"measurements","id":"a-1","kind":"RECORD_KIND_EVENT","payload":"AAEC"}',
    '{"a":[1,2.5e-3,-0,true,false,null,"x",{},[]],"b":{"c":{"d":[[[]]]}}}',
    String.raw`{"quote \" in a key":"a \\ backslash, a quote \" and brackets [{ inside","b":"\\"}`,
    String.raw`{"u":"\u0022\u005c","\\":"ends in a backslash\\","":"empty key"}`,
    '{"ü":"é","u":"ü"}',
    '{"same":{"same":{"same":1}},"other":[{"same":1},{"same":2}]}',
  ])("%s", (text) => {
    expect(scan(text)).toBeUndefined();
    expect(() => JSON.parse(text)).not.toThrow();
  });
});

describe("nesting", () => {
  test.each([
    ["arrays", (n: number) => `{"x":${"[".repeat(n - 1)}${"]".repeat(n - 1)}}`],
    ["objects", (n: number) => `${'{"a":'.repeat(n - 1)}{}${"}".repeat(n - 1)}`],
    ["both", (n: number) => `${Array.from({ length: n }, (_, i) => (i % 2 === 0 ? '{"a":' : "[")).join("")}1${Array.from({ length: n }, (_, i) => (i % 2 === 0 ? "}" : "]")).reverse().join("")}`],
  ])(`%s ${maxDepth} levels deep pass, one more is refused`, (_name, nested) => {
    expect(scan(nested(maxDepth))).toBeUndefined();
    expect(scan(nested(maxDepth + 1))).toBe(deep);
  });

  test("brackets inside strings do not count", () => {
    expect(scan(`{"x":"${"[{".repeat(10_000)}"}`)).toBeUndefined();
  });

  test("15 MB of [ is refused (the scan stops at the bound)", () => {
    expect(jsonBoundsProblem(Buffer.from(`{"x":${"[".repeat(15_000_000)}`))).toBe(deep);
  });
});

describe("members", () => {
  const array = (n: number) => `{"x":[${Array(n).fill("1").join(",")}]}`;
  const object = (n: number) => `{${Array.from({ length: n }, (_, i) => `"k${i}":${i % 3 === 0 ? '"v"' : i % 3 === 1 ? "{}" : "[0]"}`).join(",")}}`;

  test(`an array of ${maxMembers} elements passes, one more is refused`, () => {
    expect(scan(array(maxMembers))).toBeUndefined();
    expect(scan(array(maxMembers + 1))).toBe(wide);
  });

  test(`an object of ${maxMembers} members passes, one more is refused`, () => {
    expect(scan(object(maxMembers))).toBeUndefined();
    expect(scan(object(maxMembers + 1))).toBe(wide);
  });

  test("a million keys are refused", () => {
    expect(scan(`{"lane":"measurements","x":${object(1_000_000)}}`)).toBe(wide);
  });

  test(`${maxTotalMembers} members and elements in all pass, one more is refused`, () => {
    const lists = maxTotalMembers / maxMembers;
    // Each list is one member of the top object plus its elements.
    const full = (extra: number) =>
      `{${Array.from({ length: lists }, (_, i) => `"l${i}":[${Array(maxMembers - (i === 0 ? lists : 0) + (i === 0 ? extra : 0)).fill("0").join(",")}]`).join(",")}}`;
    expect(scan(full(0))).toBeUndefined();
    expect(scan(full(1))).toBe(many);
  });
});

describe("duplicate keys", () => {
  test.each([
    '{"idempotencyId":"a","idempotencyId":"b"}',
    '{"a":1,"b":2,"a":3}',
    String.raw`{"a":1,"\u0061":2}`,
    String.raw`{"\u00fc":1,"ü":2}`,
    '{"x":{"deep":[{"k":1,"k":2}]}}',
    '{"":1,"":2}',
  ])("%s is refused", (text) => {
    expect(scan(text)).toBe(duplicate);
  });

  test("the same key in sibling objects, at other depths, or as a value is not a duplicate", () => {
    expect(scan('{"a":"a","b":{"a":{"a":"a"}},"c":[{"a":1,"b":2},{"a":1,"b":2}]}')).toBeUndefined();
  });
});

describe("text the scan cannot follow is not JSON", () => {
  test.each(['{"a":"unterminated', '{"a":"ends in an escape\\', '{"a":[1,2}', '{"a":1]', "}", '{"a":1},', "{", '{"a\\u12"  :1, "b":2}'])("%s", (text) => {
    expect(scan(text)).toBe(notJson);
  });
});

/** A random JSON value, its text (with random escapes and spacing), and what the scan should find in it. */
interface Sample {
  readonly text: string;
  readonly depth: number;
  readonly widest: number;
  readonly total: number;
  readonly duplicate: boolean;
}

function randomText(random: SeededRandom): Sample {
  let widest = 0;
  let total = 0;
  let duplicateFound = false;
  let deepest = 1;
  const space = () => (random.chance(0.2) ? random.pick([" ", "\n", "\t ", "\r\n"]) : "");
  const keyPool = ["a", "b", "ü", "k\"q", "back\\slash", "[", "{", ",", ":", ""];
  const encodeString = (s: string) => {
    // JSON.stringify, then sometimes spell a character as a \u escape.
    let out = "";
    for (const ch of s) out += random.chance(0.3) ? `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}` : JSON.stringify(ch).slice(1, -1);
    return `"${out}"`;
  };
  const value = (depth: number): string => {
    const kind = depth >= 12 ? random.int(0, 2) : random.int(0, 5);
    if (kind === 0) return String(random.int(-1000, 1000));
    if (kind === 1) return random.pick(["true", "false", "null", "1.5e3"]);
    if (kind === 2) return encodeString(random.pick(keyPool) + random.pick(["", "x", "]}"]));
    deepest = Math.max(deepest, depth);
    const n = random.int(0, 6);
    widest = Math.max(widest, n);
    total += n;
    if (kind === 3) return `[${space()}${Array.from({ length: n }, () => value(depth + 1)).join(`${space()},${space()}`)}${space()}]`;
    const used = new Set<string>();
    const members: string[] = [];
    for (let i = 0; i < n; i++) {
      const key = random.pick(keyPool);
      if (used.has(key)) duplicateFound = true;
      used.add(key);
      members.push(`${encodeString(key)}${space()}:${space()}${value(depth + 1)}`);
    }
    return `{${space()}${members.join(",")}${space()}}`;
  };
  const text = `{"root":${value(2)}}`;
  return { text, depth: deepest, widest: Math.max(widest, 1), total: total + 1, duplicate: duplicateFound };
}

test("on random JSON texts the scan finds exactly the depth, width, total and duplicate keys the text has", () => {
  for (let seed = 1; seed <= 400; seed++) {
    const random = new SeededRandom(seed);
    const sample = randomText(random);
    expect(() => JSON.parse(sample.text), sample.text).not.toThrow();
    const bytes = Buffer.from(sample.text, "utf8");
    // The bounds exactly at the sample's own measures: it passes unless it repeats a key.
    const exact = { maxDepth: sample.depth, maxMembers: sample.widest, maxTotalMembers: sample.total };
    expect(jsonBoundsProblem(bytes, exact), `seed ${seed}: ${sample.text}`).toBe(sample.duplicate ? duplicate : undefined);
    if (sample.duplicate) continue;
    // One less of any measure is refused.
    if (sample.depth > 1) expect(jsonBoundsProblem(bytes, { ...exact, maxDepth: sample.depth - 1 }), `seed ${seed}`).toMatch(/levels deep$/);
    if (sample.widest > 1) expect(jsonBoundsProblem(bytes, { ...exact, maxMembers: sample.widest - 1 }), `seed ${seed}`).toMatch(/members$/);
    expect(jsonBoundsProblem(bytes, { ...exact, maxTotalMembers: sample.total - 1 }), `seed ${seed}`).toMatch(/in all$/);
  }
});

describe("the contract's requests fit the bounds with room to spare", () => {
  const services = [...lanewayServices, Health, ServerReflectionV1, ServerReflectionV1alpha];
  const inputs = [...new Map(services.flatMap((s) => s.methods.map((m) => [m.input.typeName, m.input] as const))).values()];

  /** The JSON depth, widest container and members in all of the largest message of a type the contract accepts. */
  function largest(desc: DescMessage, seen: readonly string[] = []): { depth: number; widest: number; total: number } {
    if (seen.includes(desc.typeName)) throw new Error(`${desc.typeName} is recursive: its JSON depth has no bound`);
    let depth = 1;
    let widest = desc.fields.length;
    let total = desc.fields.length;
    for (const field of desc.fields) {
      const rules = hasOption(field, fieldRules) ? getOption(field, fieldRules) : undefined;
      const inner = (m: DescMessage | undefined) => (m === undefined || m.typeName.startsWith("google.protobuf.") ? { depth: 0, widest: 0, total: 0 } : largest(m, [...seen, desc.typeName]));
      if (field.fieldKind === "message") {
        const sub = inner(field.message);
        depth = Math.max(depth, 1 + sub.depth);
        widest = Math.max(widest, sub.widest);
        total += sub.total;
      } else if (field.fieldKind === "list" || field.fieldKind === "map") {
        const max = field.fieldKind === "list" ? (rules?.type.case === "repeated" ? Number(rules.type.value.maxItems ?? 0) : 0) : rules?.type.case === "map" ? Number(rules.type.value.maxPairs ?? 0) : 0;
        expect(max, `${desc.typeName}.${field.name} needs a max_items or max_pairs rule`).toBeGreaterThan(0);
        const element = field.fieldKind === "list" ? (field.listKind === "message" ? field.message : undefined) : field.mapKind === "message" ? field.message : undefined;
        const sub = inner(element);
        depth = Math.max(depth, 2 + sub.depth);
        widest = Math.max(widest, max, sub.widest);
        total += max * (1 + sub.total);
      }
    }
    return { depth, widest, total };
  }

  test.each(inputs.map((m) => [m.typeName, m] as const))("%s", (_name, input) => {
    const size = largest(input);
    expect(size.depth).toBeLessThan(10);
    expect(size.widest * 8).toBeLessThanOrEqual(maxMembers);
    expect(size.total * 10).toBeLessThanOrEqual(maxTotalMembers);
  });
});

describe("integers beyond 2^53 keep every digit", () => {
  const quoted = (text: string) => {
    const ranges: number[] = [];
    expect(jsonBoundsProblem(Buffer.from(text, "utf8"), JSON_BOUNDS, ranges)).toBeUndefined();
    return Buffer.from(quoteIntegers(Buffer.from(text, "utf8"), ranges)).toString("utf8");
  };

  test("an unsafe integer literal is quoted, a safe one or a decimal is not", () => {
    expect(quoted('{"cursor":9223372036854775808}')).toBe('{"cursor":"9223372036854775808"}');
    expect(quoted('{"a":9007199254740991,"b":9007199254740992,"c":-9007199254740993}')).toBe('{"a":9007199254740991,"b":"9007199254740992","c":"-9007199254740993"}');
    expect(quoted('{"a":1.5e300,"b":"9223372036854775808","c":[18446744073709551615, 1]}')).toBe('{"a":1.5e300,"b":"9223372036854775808","c":["18446744073709551615", 1]}');
  });

  test("byte offsets hold after multi-byte characters", () => {
    expect(quoted('{"é✓":"ü","n":12345678901234567890}')).toBe('{"é✓":"ü","n":"12345678901234567890"}');
  });

  test("the message parsed from JSON holds the exact value", () => {
    const parsed = parseMessage(ReplayRequestSchema, Buffer.from('{"lane":"l","cursor":9223372036854775809}', "utf8"), false);
    expect("message" in parsed && (parsed.message as unknown as { cursor: bigint }).cursor).toBe(2n ** 63n + 1n);
  });
});
