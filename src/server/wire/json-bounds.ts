/**
 * What a JSON request message may cost before anything is built from it.
 *
 * A byte limit alone does not bound the work of `JSON.parse`: 15 MB of `[`
 * (14.6 KB gzipped) made it allocate over a gigabyte and hold the event
 * loop for seconds, and a million keys cost as much in an unknown field
 * as in a known one. So every JSON request message, on every route and
 * protocol, is scanned first, in one linear pass over its bytes that
 * builds nothing but the names of object keys: nesting deeper than
 * `maxDepth`, an object or array with more than `maxMembers` members, or
 * more than `maxTotalMembers` members and elements in the whole message is
 * refused before `JSON.parse` runs, and so is an object that names a key
 * twice (`JSON.parse` would silently keep the last one).
 *
 * The bounds are far above what the contract needs (its deepest request is
 * 4 levels deep, its longest list has 1,024 items; a test checks every
 * request type against them) and far below what costs: a message at the
 * bounds parses in milliseconds.
 *
 * The scan tracks structure only (strings, brackets, commas, colons); a
 * message it lets through may still be malformed, and `JSON.parse` refuses
 * it then, having done at most the work the bounds allow.
 */

export interface JsonBounds {
  /** Objects and arrays nested inside each other, the message's own object counted: `{}` is 1 deep. */
  readonly maxDepth: number;
  /** Members of one object, or elements of one array. */
  readonly maxMembers: number;
  /** Members and elements of all objects and arrays of the message together. */
  readonly maxTotalMembers: number;
}

export const JSON_BOUNDS: JsonBounds = { maxDepth: 64, maxMembers: 10_000, maxTotalMembers: 100_000 };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** What the scan expects next at the current level. */
const NOTHING = 0;
const KEY = 1;
const VALUE = 2;

/**
 * Scans a JSON text (UTF-8 bytes) against the bounds. Returns the problem
 * in Laneway's words (never quoting the text), or undefined when the text
 * is within them.
 */
export function jsonBoundsProblem(bytes: Uint8Array, bounds: JsonBounds = JSON_BOUNDS, unsafeIntegers?: number[]): string | undefined {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = text.byteLength;
  const { maxDepth, maxMembers, maxTotalMembers } = bounds;
  // Per level (1-based): whether it is an object, its members so far, its keys.
  const isObject = new Uint8Array(maxDepth + 1);
  const members = new Uint32Array(maxDepth + 1);
  const keys: (Set<string> | undefined)[] = [];
  let depth = 0;
  let total = 0;
  let expect = VALUE;
  // The next backslash at or after the scan position (length when none):
  // found once per backslash, so strings cost one pass however many there are.
  let nextBackslash = -1;

  const countMember = (): string | undefined => {
    members[depth] = members[depth]! + 1;
    total += 1;
    if (members[depth]! > maxMembers) return `a JSON object or array in the request body has more than ${maxMembers} members`;
    if (total > maxTotalMembers) return `the request body holds more than ${maxTotalMembers} JSON members and elements in all`;
    return undefined;
  };

  for (let i = 0; i < length; i++) {
    const byte = text[i]!;
    switch (byte) {
      case 0x20:
      case 0x09:
      case 0x0a:
      case 0x0d:
        continue;
      case QUOTE: {
        // Find the closing quote: the next quote that no backslash escapes.
        const start = i + 1;
        let escaped = false;
        let at = start;
        let close: number;
        for (;;) {
          close = text.indexOf(QUOTE, at);
          if (close < 0) return notJson;
          if (nextBackslash < at) {
            nextBackslash = text.indexOf(BACKSLASH, at);
            if (nextBackslash < 0) nextBackslash = length;
          }
          if (nextBackslash > close) break;
          // An escape before the quote: skip it and what it escapes.
          escaped = true;
          at = nextBackslash + 2;
          if (at > length) return notJson;
        }
        i = close;
        if (expect === KEY) {
          const problem = countMember() ?? duplicateKey(text, start, close, escaped, (keys[depth] ??= new Set()));
          if (problem !== undefined) return problem;
        } else if (expect === VALUE && depth > 0 && isObject[depth] === 0) {
          const problem = countMember();
          if (problem !== undefined) return problem;
        }
        expect = NOTHING;
        break;
      }
      case OPEN_OBJECT:
      case OPEN_ARRAY: {
        if (expect === VALUE && depth > 0 && isObject[depth] === 0) {
          const problem = countMember();
          if (problem !== undefined) return problem;
        }
        depth += 1;
        if (depth > maxDepth) return `the request body nests JSON objects and arrays more than ${maxDepth} levels deep`;
        const object = byte === OPEN_OBJECT;
        isObject[depth] = object ? 1 : 0;
        members[depth] = 0;
        if (object) keys[depth]?.clear();
        expect = object ? KEY : VALUE;
        break;
      }
      case CLOSE_OBJECT:
      case CLOSE_ARRAY:
        if (depth === 0 || isObject[depth] !== (byte === CLOSE_OBJECT ? 1 : 0)) return notJson;
        depth -= 1;
        expect = NOTHING;
        break;
      case COMMA:
        if (depth === 0) return notJson;
        expect = isObject[depth] === 1 ? KEY : VALUE;
        break;
      case COLON:
        expect = VALUE;
        break;
      default:
        // A number or literal starts (or goes on).
        if (expect === VALUE && depth > 0 && isObject[depth] === 0) {
          const problem = countMember();
          if (problem !== undefined) return problem;
        }
        if (expect === VALUE && unsafeIntegers !== undefined) {
          const end = numberEnd(text, i);
          if (isUnsafeInteger(text, i, end)) unsafeIntegers.push(i, end);
          if (end > i) i = end - 1;
        }
        expect = NOTHING;
        break;
    }
  }
  return depth === 0 ? undefined : notJson;
}

const notJson = "the request body is not valid JSON";

/** Where the number token starting at `start` ends (start itself when none starts there). */
function numberEnd(text: Buffer, start: number): number {
  let end = start;
  for (; end < text.byteLength; end++) {
    const byte = text[end]!;
    // Digits, sign, decimal point and exponent: what a JSON number is made of.
    if (!((byte >= 0x30 && byte <= 0x39) || byte === 0x2d || byte === 0x2b || byte === 0x2e || byte === 0x65 || byte === 0x45)) break;
  }
  return end;
}

const maxSafeDigits = String(Number.MAX_SAFE_INTEGER);

/** Whether text[start, end) is an integer literal that a JavaScript number cannot hold exactly. */
function isUnsafeInteger(text: Buffer, start: number, end: number): boolean {
  const from = text[start] === 0x2d ? start + 1 : start;
  const digits = end - from;
  if (digits < maxSafeDigits.length) return false;
  for (let i = from; i < end; i++) if (text[i]! < 0x30 || text[i]! > 0x39) return false;
  return digits > maxSafeDigits.length || text.toString("latin1", from, end) > maxSafeDigits;
}

/**
 * The bytes with each unsafe integer literal quoted (byte ranges as the
 * scan recorded them). Proto3's JSON form writes 64-bit integers as strings and
 * accepts both; quoted, a uint64 of 2^63 reaches the message exactly
 * instead of being rounded by `JSON.parse` (the contract has no
 * floating-point fields that a string could change).
 */
export function quoteIntegers(bytes: Uint8Array, ranges: readonly number[]): Uint8Array {
  const out = Buffer.allocUnsafe(bytes.byteLength + ranges.length);
  let written = 0;
  let at = 0;
  for (let i = 0; i < ranges.length; i += 2) {
    const start = ranges[i]!;
    const end = ranges[i + 1]!;
    out.set(bytes.subarray(at, start), written);
    written += start - at;
    out[written++] = QUOTE;
    out.set(bytes.subarray(start, end), written);
    written += end - start;
    out[written++] = QUOTE;
    at = end;
  }
  out.set(bytes.subarray(at), written);
  return out;
}

/**
 * Records an object key, or names the problem when the object already has
 * it. A key is compared by its bytes (as latin1, which maps bytes to
 * characters one to one); a key with escapes is decoded first and compared
 * by its UTF-8 bytes, so `"a"` and `"\u0061"` are the same key.
 */
function duplicateKey(text: Buffer, start: number, end: number, escaped: boolean, seen: Set<string>): string | undefined {
  let key: string;
  if (escaped) {
    let decoded: unknown;
    try {
      decoded = JSON.parse(text.toString("utf8", start - 1, end + 1));
    } catch {
      return notJson;
    }
    key = Buffer.from(decoded as string, "utf8").toString("latin1");
  } else {
    key = text.toString("latin1", start, end);
  }
  if (seen.has(key)) return "a JSON object in the request body names the same key twice";
  seen.add(key);
  return undefined;
}
