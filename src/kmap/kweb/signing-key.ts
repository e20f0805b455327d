import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { createPrivateFileSync } from "../../files/index.js";
import { KwebFailureError } from "./kweb-failure-error.js";

/**
 * The Kmap's Ed25519 signing key. Every transaction is signed with it so a
 * client holding the public key can check that history came from this Kweb
 * and was not altered.
 *
 * The private key lives in a file the caller names (PKCS#8 PEM, mode 0600),
 * generated on first start. Generation writes a temporary file and then
 * hard-links it into place: link fails if the name exists, so two starts
 * racing on an empty data directory end up with one key (the loser loads
 * the winner's), and no reader ever sees a half-written file.
 */

/** What a verifier needs: the public half of the signing key. */
export interface PublicSigningKey {
  /** Always `ed25519`. */
  readonly algorithm: "ed25519";
  /** The raw 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array;
  /** The same key as a PEM SubjectPublicKeyInfo. */
  readonly publicKeyPem: string;
  /** The first 32 hex characters of SHA-256 of the raw public key. */
  readonly keyId: string;
}

/** The signing key as the writer holds it. */
export interface KwebSigningKey extends PublicSigningKey {
  /** The Ed25519 signature (64 bytes) of `payload`. */
  sign(payload: Uint8Array): Uint8Array;
}

/** The key id of a raw Ed25519 public key. */
export function signingKeyId(rawPublicKey: Uint8Array): string {
  return createHash("sha256").update(rawPublicKey).digest("hex").slice(0, 32);
}

function rawPublicKeyOf(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: "jwk" });
  if (typeof jwk.x !== "string") throw new TypeError("not an Ed25519 key");
  return new Uint8Array(Buffer.from(jwk.x, "base64url"));
}

/**
 * A public key object from the raw 32 bytes or a PEM SubjectPublicKeyInfo.
 * Throws TypeError when it is neither or not Ed25519.
 */
export function ed25519PublicKey(key: Uint8Array | string): KeyObject {
  const object =
    typeof key === "string"
      ? createPublicKey({ key, format: "pem" })
      : createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(key).toString("base64url") }, format: "jwk" });
  if (object.asymmetricKeyType !== "ed25519") throw new TypeError("not an Ed25519 public key");
  return object;
}

/** The published form of a raw Ed25519 public key. */
export function publicSigningKey(rawPublicKey: Uint8Array): PublicSigningKey {
  const object = ed25519PublicKey(rawPublicKey);
  return {
    algorithm: "ed25519",
    publicKey: new Uint8Array(rawPublicKey),
    publicKeyPem: object.export({ type: "spki", format: "pem" }).toString(),
    keyId: signingKeyId(rawPublicKey),
  };
}

function signingKeyFrom(privateKey: KeyObject): KwebSigningKey {
  const raw = rawPublicKeyOf(createPublicKey(privateKey));
  return {
    ...publicSigningKey(raw),
    sign: (payload) => new Uint8Array(sign(null, payload, privateKey)),
  };
}

function errnoCode(error: unknown): string | undefined {
  const code = error instanceof Error ? (error as NodeJS.ErrnoException).code : undefined;
  return typeof code === "string" ? code : undefined;
}

function readKeyFile(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return undefined;
    throw new KwebFailureError("signing_key_invalid", "the Kmap signing key file cannot be read", { cause: error });
  }
}

function parseKey(pem: string): KwebSigningKey {
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: "pem" });
  } catch (error) {
    throw new KwebFailureError("signing_key_invalid", "the Kmap signing key file is not a PEM private key", { cause: error });
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new KwebFailureError("signing_key_invalid", `the Kmap signing key file holds a ${key.asymmetricKeyType ?? "non-asymmetric"} key, not an Ed25519 key`);
  }
  return signingKeyFrom(key);
}

/** Writes a new key under `path` unless one appears there first (src/files: written whole or not at all). */
function createKeyFile(path: string): void {
  try {
    const { privateKey } = generateKeyPairSync("ed25519");
    // false: another start created the key first; the caller reads that one.
    createPrivateFileSync(path, privateKey.export({ type: "pkcs8", format: "pem" }).toString());
  } catch (error) {
    throw new KwebFailureError("signing_key_invalid", "the Kmap signing key file cannot be created", { cause: error });
  }
}

/**
 * Loads the signing key from `path`, generating it first when the file does
 * not exist. Throws KwebFailureError (`signing_key_invalid`) when the file
 * cannot be read, created or parsed, or holds another kind of key.
 */
export function loadOrCreateSigningKey(path: string): KwebSigningKey {
  let pem = readKeyFile(path);
  if (pem === undefined) {
    createKeyFile(path);
    pem = readKeyFile(path);
    if (pem === undefined) throw new KwebFailureError("signing_key_invalid", "the Kmap signing key file disappeared after it was created");
  }
  return parseKey(pem);
}
