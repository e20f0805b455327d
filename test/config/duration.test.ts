import { describe, expect, test } from "vitest";
import { DurationError, formatGoDuration, millisToNanos, nanosToMillis, parseGoDuration } from "../../src/config/index.js";

// Expected values were produced by Go 1.19's time.ParseDuration and
// Duration.String() (and cross-checked against 30,000 generated inputs).
const PARSES: ReadonlyArray<readonly [string, bigint, string]> = [
  ["300ms", 300_000_000n, "300ms"],
  ["1.5h", 5_400_000_000_000n, "1h30m0s"],
  ["2h45m", 9_900_000_000_000n, "2h45m0s"],
  ["1h0m0.5s", 3_600_500_000_000n, "1h0m0.5s"],
  ["-1.5h", -5_400_000_000_000n, "-1h30m0s"],
  ["1h15m30.918273645s", 4_530_918_273_645n, "1h15m30.918273645s"],
  ["0", 0n, "0s"],
  ["+0", 0n, "0s"],
  ["-0", 0n, "0s"],
  ["0s", 0n, "0s"],
  [".5s", 500_000_000n, "500ms"],
  ["5.s", 5_000_000_000n, "5s"],
  ["+5m", 300_000_000_000n, "5m0s"],
  ["1ns", 1n, "1ns"],
  ["1us", 1_000n, "1µs"],
  ["1\u00b5s", 1_000n, "1µs"],
  ["1\u03bcs", 1_000n, "1µs"],
  ["1.5ms", 1_500_000n, "1.5ms"],
  ["1.s2.m", 121_000_000_000n, "2m1s"],
  [".5h.5m", 1_830_000_000_000n, "30m30s"],
  ["0.000000001s", 1n, "1ns"],
  ["0.0000000001s", 0n, "0s"],
  ["0.1ns", 0n, "0s"],
  ["1.9999999999ns", 1n, "1ns"],
  ["0.3333333333333333333333h", 1_200_000_000_000n, "20m0s"],
  // Go's float64 fraction arithmetic rounds this up to exactly 16h.
  ["15.9999999999999999999999999h", 57_600_000_000_000n, "16h0m0s"],
  ["1.00000000000000000000000000001h", 3_600_000_000_000n, "1h0m0s"],
  ["922337203685477580.7ns", 922_337_203_685_477_580n, "256204h46m43.68547758s"],
  ["9223372036854775807ns", 9_223_372_036_854_775_807n, "2562047h47m16.854775807s"],
  ["9223372036.854775807s", 9_223_372_036_854_775_807n, "2562047h47m16.854775807s"],
  ["2562047h47m16.854775807s", 9_223_372_036_854_775_807n, "2562047h47m16.854775807s"],
  ["-9223372036854775808ns", -9_223_372_036_854_775_808n, "-2562047h47m16.854775808s"],
  ["-2562047h47m16.854775808s", -9_223_372_036_854_775_808n, "-2562047h47m16.854775808s"],
];

const ERRORS: ReadonlyArray<readonly [string, string]> = [
  ["", 'time: invalid duration ""'],
  ["1", 'time: missing unit in duration "1"'],
  ["30", 'time: missing unit in duration "30"'],
  ["1e3s", 'time: unknown unit "e" in duration "1e3s"'],
  [".s", 'time: invalid duration ".s"'],
  ["-.s", 'time: invalid duration "-.s"'],
  ["--5m", 'time: invalid duration "--5m"'],
  ["1m1", 'time: missing unit in duration "1m1"'],
  ["1h 2m", 'time: unknown unit "h " in duration "1h 2m"'],
  ["1hh", 'time: unknown unit "hh" in duration "1hh"'],
  ["1d", 'time: unknown unit "d" in duration "1d"'],
  ["1.5.5s", 'time: missing unit in duration "1.5.5s"'],
  ["s", 'time: invalid duration "s"'],
  // Overflow in every place Go checks it.
  ["9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'],
  ["-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'],
  ["2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'],
  ["9223372036.854775808s", 'time: invalid duration "9223372036.854775808s"'],
  ["3000000h", 'time: invalid duration "3000000h"'],
  ["100000000000000000000ns", 'time: invalid duration "100000000000000000000ns"'],
  // Go's quoting of non-ASCII and control characters.
  ["1\u00b5", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'],
  ["1\u00e9s", 'time: unknown unit "\\xc3\\xa9s" in duration "1\\xc3\\xa9s"'],
  ["1\ts", 'time: unknown unit "\\x09s" in duration "1\\x09s"'],
  ['"1s', 'time: invalid duration "\\"1s"'],
  ["1\\s", 'time: unknown unit "\\\\s" in duration "1\\\\s"'],
];

describe("parseGoDuration matches Go's time.ParseDuration", () => {
  test.each(PARSES)("%s", (input, ns, formatted) => {
    expect(parseGoDuration(input)).toBe(ns);
    expect(formatGoDuration(parseGoDuration(input))).toBe(formatted);
  });

  test.each(ERRORS)("rejects %j", (input, message) => {
    expect(() => parseGoDuration(input)).toThrow(new DurationError(message));
    expect(() => parseGoDuration(input)).toThrow(DurationError);
  });
});

describe("formatGoDuration matches Go's Duration.String()", () => {
  const FORMATS: ReadonlyArray<readonly [bigint, string]> = [
    [0n, "0s"],
    [1n, "1ns"],
    [-1n, "-1ns"],
    [999n, "999ns"],
    [1_000n, "1µs"],
    [1_001n, "1.001µs"],
    [999_999n, "999.999µs"],
    [1_000_000n, "1ms"],
    [1_500_000n, "1.5ms"],
    [500_000_000n, "500ms"],
    [1_000_000_000n, "1s"],
    [1_500_000_000n, "1.5s"],
    [-5_000_000_000n, "-5s"],
    [59_999_999_999n, "59.999999999s"],
    [60_000_000_000n, "1m0s"],
    [3_599_999_999_999n, "59m59.999999999s"],
    [3_600_000_000_000n, "1h0m0s"],
    [5_400_000_000_000n, "1h30m0s"],
    [31_536_000_000_000_000n, "8760h0m0s"],
    [9_223_372_036_854_775_807n, "2562047h47m16.854775807s"],
    [-9_223_372_036_854_775_808n, "-2562047h47m16.854775808s"],
  ];
  test.each(FORMATS)("%s ns", (ns, text) => {
    expect(formatGoDuration(ns)).toBe(text);
  });

  test("values outside int64 are refused", () => {
    expect(() => formatGoDuration(1n << 63n)).toThrow(RangeError);
  });
});

describe("millisecond conversion", () => {
  test("truncates toward zero and handles values beyond 2^53 nanoseconds", () => {
    expect(nanosToMillis(31_536_000_000_000_000n)).toBe(31_536_000_000);
    expect(nanosToMillis(1_999_999n)).toBe(1);
    expect(nanosToMillis(-1_999_999n)).toBe(-1);
    expect(millisToNanos(31_536_000_000)).toBe(31_536_000_000_000_000n);
    // Whole milliseconds convert to exact nanoseconds in a double, too.
    expect(BigInt(31_536_000_000 * 1e6)).toBe(31_536_000_000_000_000n);
  });
});
