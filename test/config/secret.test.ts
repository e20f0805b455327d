import { inspect } from "node:util";
import { describe, expect, test } from "vitest";
import { constantTimeEquals, Secret } from "../../src/config/index.js";

const VALUE = "s3cr3t-token-value-0123456789abcdef";

describe("Secret", () => {
  const secret = new Secret(VALUE);

  test("never prints its value", () => {
    expect(String(secret)).toBe("[redacted]");
    expect(`${secret}`).toBe("[redacted]");
    expect("x" + secret).toBe("x[redacted]");
    expect(JSON.stringify({ secret })).toBe('{"secret":"[redacted]"}');
    expect(inspect(secret)).toBe("[redacted]");
    expect(inspect({ nested: { secret } }, { depth: 5 })).not.toContain(VALUE);
    expect(Object.keys(secret)).toEqual([]);
  });

  test("reveal() returns the value", () => {
    expect(secret.reveal()).toBe(VALUE);
  });

  test("byteLength counts UTF-8 bytes", () => {
    expect(new Secret("é".repeat(16)).byteLength).toBe(32);
    expect(secret.byteLength).toBe(VALUE.length);
  });

  test("equals compares strings, Buffers and Secrets of any length", () => {
    expect(secret.equals(VALUE)).toBe(true);
    expect(secret.equals(Buffer.from(VALUE))).toBe(true);
    expect(secret.equals(new Secret(VALUE))).toBe(true);
    expect(secret.equals(VALUE.slice(0, -1))).toBe(false);
    expect(secret.equals(VALUE + "x")).toBe(false);
    expect(secret.equals("")).toBe(false);
    expect(secret.equals(VALUE.toUpperCase())).toBe(false);
    expect(new Secret("").equals("")).toBe(true);
    expect(constantTimeEquals("a", "a")).toBe(true);
    expect(constantTimeEquals("a", "ab")).toBe(false);
  });

  test("is immutable", () => {
    expect(Object.isFrozen(secret)).toBe(true);
  });
});
