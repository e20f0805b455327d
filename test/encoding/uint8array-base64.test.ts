import { expect, test } from "vitest";
import "../../src/encoding/uint8array-base64.js";
import { SeededRandom } from "../helpers/seeded-random.js";

/**
 * Uint8Array.prototype.toBase64 as src/encoding/uint8array-base64.ts
 * provides it on Node.js 20: the RFC 4648 test vectors, both alphabets,
 * with and without padding, views into larger buffers, and the
 * specification's TypeErrors.
 */

type ToBase64 = (this: Uint8Array, options?: { alphabet?: string; omitPadding?: boolean }) => string;
const toBase64 = (Uint8Array.prototype as unknown as { toBase64: ToBase64 }).toBase64;
const encode = (bytes: Uint8Array, options?: { alphabet?: string; omitPadding?: boolean }) => toBase64.call(bytes, options);

test("the RFC 4648 test vectors", () => {
  const vectors: [string, string][] = [
    ["", ""],
    ["f", "Zg=="],
    ["fo", "Zm8="],
    ["foo", "Zm9v"],
    ["foob", "Zm9vYg=="],
    ["fooba", "Zm9vYmE="],
    ["foobar", "Zm9vYmFy"],
  ];
  for (const [plain, base64] of vectors) {
    const bytes = new TextEncoder().encode(plain);
    expect(encode(bytes)).toBe(base64);
    expect(encode(bytes, { omitPadding: true })).toBe(base64.replace(/=+$/, ""));
    expect(encode(bytes, { alphabet: "base64url" })).toBe(base64);
    expect(encode(bytes, { alphabet: "base64url", omitPadding: true })).toBe(base64.replace(/=+$/, ""));
  }
});

test("both alphabets on random bytes, and views into a larger buffer encode only their own bytes", () => {
  const random = new SeededRandom(7);
  for (let i = 0; i < 200; i++) {
    const whole = Uint8Array.from({ length: random.int(0, 300) }, () => random.int(0, 255));
    const start = random.int(0, whole.length);
    const view = whole.subarray(start, random.int(start, whole.length));
    const expected = Buffer.from(Array.from(view)).toString("base64");
    expect(encode(view)).toBe(expected);
    expect(encode(view, { alphabet: "base64url" })).toBe(expected.replace(/\+/g, "-").replace(/\//g, "_"));
    expect(encode(view, { alphabet: "base64url", omitPadding: true })).toBe(expected.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""));
  }
});

test("the specification's TypeErrors", () => {
  expect(() => toBase64.call(new Uint16Array(2) as unknown as Uint8Array)).toThrow(TypeError);
  expect(() => toBase64.call([1, 2] as unknown as Uint8Array)).toThrow(TypeError);
  expect(() => encode(new Uint8Array(1), { alphabet: "hex" })).toThrow(TypeError);
  expect(() => encode(new Uint8Array(1), 5 as unknown as { alphabet: string })).toThrow(TypeError);
});

test("it is not enumerable", () => {
  expect(Object.keys(Uint8Array.prototype)).not.toContain("toBase64");
  expect(Object.getOwnPropertyDescriptor(Uint8Array.prototype, "toBase64")).toMatchObject({ writable: true, configurable: true, enumerable: false });
});
