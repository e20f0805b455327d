/**
 * NATS nkeys backed by Node's own Ed25519 (OpenSSL) instead of the pure
 * JavaScript `tweetnacl` inside `@nats-io/nkeys`.
 *
 * Why: `@nats-io/nkeys` derives the key pair from the seed again on every
 * `getPublicKey()`, `getPrivateKey()` and `sign()`, each a scalar
 * multiplication in JavaScript (about 10–20 ms on this project's shared
 * machines), and `@nats-io/jwt` calls them several times per JWT: minting
 * one member credential and re-signing the hive account took ~150 ms of
 * CPU. The same key pair here derives its public key once and signs in
 * microseconds. Seeds and public keys use the nkeys encoding (a prefix
 * byte, base32 without padding, a CRC-16/XMODEM checksum), so the strings
 * are interchangeable with `@nats-io/nkeys`' (a test cross-checks them).
 */
import { createPrivateKey, createPublicKey, randomBytes, sign, verify, type KeyObject } from "node:crypto";
import type { KeyPair } from "@nats-io/nkeys";

/** The nkeys prefix bytes of the roles Laneway uses. */
export const NKEY_PREFIX = Object.freeze({ seed: 144, private: 120, operator: 112, account: 0, user: 160 });
export type NkeyRole = "operator" | "account" | "user";

const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** A key pair with the nkeys interface, signing with Node's Ed25519. */
export class NativeKeyPair implements KeyPair {
  #seed: Uint8Array | undefined;
  readonly #rawSeed: Buffer;
  readonly #private: KeyObject;
  readonly #public: KeyObject;
  readonly #publicKey: string;
  readonly #rawPublic: Buffer;

  private constructor(role: number, rawSeed: Buffer) {
    this.#rawSeed = rawSeed;
    this.#private = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, rawSeed]), format: "der", type: "pkcs8" });
    this.#public = createPublicKey(this.#private);
    this.#rawPublic = this.#public.export({ format: "der", type: "spki" }).subarray(-32);
    this.#publicKey = encodeKey([role], this.#rawPublic);
    this.#seed = new TextEncoder().encode(encodeKey([NKEY_PREFIX.seed | (role >> 5), (role & 31) << 3], rawSeed));
  }

  /** A new random key pair of `role`. */
  static create(role: NkeyRole): NativeKeyPair {
    return new NativeKeyPair(NKEY_PREFIX[role], randomBytes(32));
  }

  /** The key pair of an nkeys seed (`SO…`, `SA…`, `SU…`); throws on a malformed seed. */
  static fromSeed(seed: string | Uint8Array): NativeKeyPair {
    const text = typeof seed === "string" ? seed.trim() : new TextDecoder().decode(seed).trim();
    const raw = decodeKey(text);
    if (raw.length !== 34 || (raw[0]! & 0xf8) !== NKEY_PREFIX.seed) throw new Error("not an nkeys seed");
    const role = ((raw[0]! & 7) << 5) | ((raw[1]! & 0xf8) >> 3);
    if (role !== NKEY_PREFIX.operator && role !== NKEY_PREFIX.account && role !== NKEY_PREFIX.user) throw new Error("not an operator, account or user seed");
    return new NativeKeyPair(role, raw.subarray(2));
  }

  getPublicKey(): string {
    this.#live();
    return this.#publicKey;
  }

  getPrivateKey(): Uint8Array {
    this.#live();
    return new TextEncoder().encode(encodeKey([NKEY_PREFIX.private], Buffer.concat([this.#rawSeed, this.#rawPublic])));
  }

  getSeed(): Uint8Array {
    return this.#live();
  }

  sign(input: Uint8Array): Uint8Array {
    this.#live();
    return new Uint8Array(sign(null, input, this.#private));
  }

  verify(input: Uint8Array, sig: Uint8Array): boolean {
    return verify(null, input, this.#public, sig);
  }

  clear(): void {
    this.#seed?.fill(0);
    this.#seed = undefined;
  }

  seal(): Uint8Array {
    throw new Error("only curve keys can seal");
  }

  open(): Uint8Array | null {
    throw new Error("only curve keys can open");
  }

  #live(): Uint8Array {
    if (this.#seed === undefined) throw new Error("the key pair was cleared");
    return this.#seed;
  }
}

/** base32(prefix ‖ payload ‖ CRC-16/XMODEM little-endian), without padding. */
function encodeKey(prefix: readonly number[], payload: Uint8Array): string {
  const body = Buffer.concat([Buffer.from(prefix), payload]);
  const crc = Buffer.alloc(2);
  crc.writeUInt16LE(crc16(body));
  return base32(Buffer.concat([body, crc]));
}

/** The prefix and payload of an encoded key, checksum verified. */
function decodeKey(text: string): Buffer {
  const raw = unbase32(text);
  if (raw.length < 4) throw new Error("too short");
  const body = raw.subarray(0, -2);
  if (raw.readUInt16LE(raw.length - 2) !== crc16(body)) throw new Error("bad checksum");
  return body;
}

function crc16(data: Uint8Array): number {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

function base32(data: Uint8Array): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const byte of data) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

function unbase32(text: string): Buffer {
  const out: number[] = [];
  let bits = 0;
  let value = 0;
  for (const char of text) {
    const index = BASE32.indexOf(char);
    if (index < 0) throw new Error("not base32");
    value = ((value << 5) | index) & 0xffff;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return Buffer.from(out);
}
