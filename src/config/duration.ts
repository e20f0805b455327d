/**
 * Go `time.Duration` parsing and formatting.
 *
 * A core's configuration format may be shared with Go services (the
 * specification says duration fields accept "a string parsed by Go
 * time.ParseDuration"), so the same file must mean the same thing here.
 * This is a line-by-line port of Go's `ParseDuration` and
 * `Duration.String` (Go 1.19+), including the float64 fraction arithmetic,
 * the int64 overflow rules and the exact error texts. Values are BigInt
 * nanoseconds because durations up to the int64 limit (about 292 years)
 * exceed Number's 2^53 safe range.
 */
import { DurationError } from "./errors.js";

export const NANOSECOND = 1n;
export const MICROSECOND = 1_000n;
export const MILLISECOND = 1_000_000n;
export const SECOND = 1_000_000_000n;
export const MINUTE = 60n * SECOND;
export const HOUR = 60n * MINUTE;

/** 1<<63 — the magnitude of the most negative int64; Go's overflow checks are against it. */
const TWO_POW_63 = 1n << 63n;
const MAX_INT64 = TWO_POW_63 - 1n;

/** Go's unitMap: both micro spellings (U+00B5 micro sign, U+03BC Greek mu) are accepted. */
const UNITS: ReadonlyMap<string, bigint> = new Map([
  ["ns", NANOSECOND],
  ["us", MICROSECOND],
  ["\u00b5s", MICROSECOND],
  ["\u03bcs", MICROSECOND],
  ["ms", MILLISECOND],
  ["s", SECOND],
  ["m", MINUTE],
  ["h", HOUR],
]);

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= "0" && c <= "9";

/**
 * Go's `time.quote`: ASCII printable characters stay, `"` and `\` are
 * backslash-escaped, and every byte of a non-ASCII or control character is
 * written as `\xNN`. Reproduced so error texts match Go byte for byte.
 */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (cp >= 0x80 || cp < 0x20) {
      // A lone surrogate has no UTF-8 form; Go would see U+FFFD there.
      const bytes = Buffer.from(cp >= 0xd800 && cp <= 0xdfff ? "\ufffd" : ch, "utf8");
      for (const b of bytes) out += `\\x${b.toString(16).padStart(2, "0")}`;
    } else {
      if (ch === '"' || ch === "\\") out += "\\";
      out += ch;
    }
  }
  return out + '"';
}

const invalid = (orig: string): DurationError =>
  new DurationError(`time: invalid duration ${goQuote(orig)}`);

/** Go's leadingInt: consume [0-9]*, failing (not wrapping) past 1<<63. */
function leadingInt(s: string): { x: bigint; rest: string } | undefined {
  let i = 0;
  let x = 0n;
  for (; i < s.length; i++) {
    const c = s[i];
    if (!isDigit(c)) break;
    if (x > TWO_POW_63 / 10n) return undefined;
    x = x * 10n + BigInt((c as string).charCodeAt(0) - 48);
    if (x > TWO_POW_63) return undefined;
  }
  return { x, rest: s.slice(i) };
}

/** Go's leadingFraction: consume [0-9]*, silently dropping precision on overflow. */
function leadingFraction(s: string): { x: bigint; scale: number; rest: string } {
  let i = 0;
  let x = 0n;
  let scale = 1;
  let overflow = false;
  for (; i < s.length; i++) {
    const c = s[i];
    if (!isDigit(c)) break;
    if (overflow) continue;
    if (x > MAX_INT64 / 10n) {
      overflow = true;
      continue;
    }
    const y = x * 10n + BigInt((c as string).charCodeAt(0) - 48);
    if (y > TWO_POW_63) {
      overflow = true;
      continue;
    }
    x = y;
    scale *= 10;
  }
  return { x, scale, rest: s.slice(i) };
}

/**
 * Parse a duration exactly as Go's `time.ParseDuration` does: a signed
 * sequence of decimal numbers, each with optional fraction and a required
 * unit ("300ms", "-1.5h", "2h45m"). The bare string "0" (optionally signed)
 * is zero; "" and unit-less numbers are errors; results outside int64
 * nanoseconds are errors.
 *
 * @returns nanoseconds, within [-(2^63), 2^63-1]
 * @throws DurationError with Go's message text
 */
export function parseGoDuration(input: string): bigint {
  const orig = input;
  let s = input;
  let d = 0n;
  let neg = false;

  if (s !== "") {
    const c = s[0];
    if (c === "-" || c === "+") {
      neg = c === "-";
      s = s.slice(1);
    }
  }
  if (s === "0") return 0n;
  if (s === "") throw invalid(orig);

  while (s !== "") {
    let v: bigint;
    let f = 0n;
    let scale = 1;

    const first = s[0];
    if (!(first === "." || isDigit(first))) throw invalid(orig);

    const before = s.length;
    const int = leadingInt(s);
    if (int === undefined) throw invalid(orig);
    v = int.x;
    s = int.rest;
    const pre = before !== s.length;

    let post = false;
    if (s !== "" && s[0] === ".") {
      s = s.slice(1);
      const len = s.length;
      const frac = leadingFraction(s);
      f = frac.x;
      scale = frac.scale;
      s = frac.rest;
      post = len !== s.length;
    }
    if (!pre && !post) throw invalid(orig);

    let i = 0;
    for (; i < s.length; i++) {
      const c = s[i];
      if (c === "." || isDigit(c)) break;
    }
    if (i === 0) throw new DurationError(`time: missing unit in duration ${goQuote(orig)}`);
    const u = s.slice(0, i);
    s = s.slice(i);
    const unit = UNITS.get(u);
    if (unit === undefined) {
      throw new DurationError(`time: unknown unit ${goQuote(u)} in duration ${goQuote(orig)}`);
    }
    if (v > TWO_POW_63 / unit) throw invalid(orig);
    v *= unit;
    if (f > 0n) {
      // Same float64 steps as Go: float64(f) * (float64(unit) / scale),
      // truncated toward zero. The product is at most 3.6e12, so exact
      // conversion back to an integer is safe.
      v += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
      if (v > TWO_POW_63) throw invalid(orig);
    }
    d += v;
    if (d > TWO_POW_63) throw invalid(orig);
  }
  if (neg) return -d;
  if (d > MAX_INT64) throw invalid(orig);
  return d;
}

/** Go's fmtFrac: the fraction digits of v / 10^prec without trailing zeros (and no dot when zero). */
function fmtFrac(v: bigint, prec: number): { text: string; rest: bigint } {
  let text = "";
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10n;
    print = print || digit !== 0n;
    if (print) text = digit.toString() + text;
    v /= 10n;
  }
  if (print) text = "." + text;
  return { text, rest: v };
}

/**
 * Format nanoseconds exactly as Go's `Duration.String()` does: "1h0m0s",
 * "1.5s", "500ms", "1µs" (with U+00B5), "0s", "-5s". Used in error messages
 * so a bound reads the same as in the Go implementation.
 */
export function formatGoDuration(ns: bigint): string {
  if (ns < -TWO_POW_63 || ns > MAX_INT64) {
    throw new RangeError("duration is outside the int64 nanosecond range");
  }
  const neg = ns < 0n;
  let u = neg ? -ns : ns;
  let out: string;
  if (u < SECOND) {
    if (u === 0n) return "0s";
    let prec: number;
    let unit: string;
    if (u < MICROSECOND) {
      prec = 0;
      unit = "ns";
    } else if (u < MILLISECOND) {
      prec = 3;
      unit = "\u00b5s";
    } else {
      prec = 6;
      unit = "ms";
    }
    const frac = fmtFrac(u, prec);
    out = frac.rest.toString() + frac.text + unit;
  } else {
    const frac = fmtFrac(u, 9);
    u = frac.rest;
    out = (u % 60n).toString() + frac.text + "s";
    u /= 60n;
    if (u > 0n) {
      out = (u % 60n).toString() + "m" + out;
      u /= 60n;
      if (u > 0n) out = u.toString() + "h" + out;
    }
  }
  return neg ? "-" + out : out;
}

/**
 * Whole milliseconds in `ns`, truncated toward zero, as a Number.
 *
 * Done in BigInt first because configured bounds (up to 8760h = 3.15e16 ns)
 * exceed 2^53; the millisecond count itself stays far below 2^53. Every
 * whole-millisecond value converts back to nanoseconds exactly as a double
 * (`ms * 1e6`), which is what JetStream's nanosecond fields need.
 */
export function nanosToMillis(ns: bigint): number {
  return Number(ns / MILLISECOND);
}

/** Nanoseconds of a whole number of milliseconds. */
export function millisToNanos(ms: number): bigint {
  if (!Number.isSafeInteger(ms)) throw new RangeError("milliseconds must be a safe integer");
  return BigInt(ms) * MILLISECOND;
}
