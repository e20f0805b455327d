import { createAccount, createOperator, createUser, fromPublic, fromSeed } from "@nats-io/nkeys";
import { decode, encodeUser } from "@nats-io/jwt";
import { expect, test } from "vitest";
import { NativeKeyPair } from "../../src/nats/index.js";

/**
 * Laneway signs with Node's Ed25519 instead of @nats-io/nkeys' JavaScript
 * one: the seeds, public keys, private keys and signatures must be the
 * very same strings and bytes.
 */

test.each([
  ["operator", createOperator],
  ["account", createAccount],
  ["user", createUser],
] as const)("a %s key reads and writes exactly as @nats-io/nkeys does", (_role, create) => {
  const reference = create();
  const native = NativeKeyPair.fromSeed(reference.getSeed());
  expect(native.getPublicKey()).toBe(reference.getPublicKey());
  expect(new TextDecoder().decode(native.getSeed())).toBe(new TextDecoder().decode(reference.getSeed()));
  expect(new TextDecoder().decode(native.getPrivateKey())).toBe(new TextDecoder().decode(reference.getPrivateKey()));
  const data = new TextEncoder().encode("sign me");
  expect(Buffer.from(native.sign(data))).toEqual(Buffer.from(reference.sign(data)));
  expect(reference.verify(data, native.sign(data))).toBe(true);
  expect(native.verify(data, reference.sign(data))).toBe(true);
});

test("a new key is a valid nkey of its role, and a JWT it signs verifies with @nats-io/nkeys", async () => {
  for (const [role, prefix] of [["operator", "O"], ["account", "A"], ["user", "U"]] as const) {
    const key = NativeKeyPair.create(role);
    expect(key.getPublicKey()[0]).toBe(prefix);
    expect(fromSeed(key.getSeed()).getPublicKey()).toBe(key.getPublicKey());
  }
  const signer = NativeKeyPair.create("account");
  const jwt = await encodeUser("hive-a", NativeKeyPair.create("user"), fromPublic(NativeKeyPair.create("account").getPublicKey()), {}, { signer });
  const [header, body, signature] = jwt.split(".") as [string, string, string];
  expect(fromPublic(signer.getPublicKey()).verify(new TextEncoder().encode(`${header}.${body}`), Buffer.from(signature, "base64url"))).toBe(true);
  expect(decode(jwt).iss).toBe(signer.getPublicKey());
});

test("a malformed seed is refused", () => {
  expect(() => NativeKeyPair.fromSeed("SUnotaseed")).toThrow();
  const seed = new TextDecoder().decode(createUser().getSeed());
  // One character changed in the middle breaks the checksum.
  expect(() => NativeKeyPair.fromSeed(`${seed.slice(0, 20)}${seed[20] === "A" ? "B" : "A"}${seed.slice(21)}`)).toThrow();
  expect(() => NativeKeyPair.fromSeed(createUser().getPublicKey())).toThrow();
});
