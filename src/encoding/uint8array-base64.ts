import { types } from "node:util";

/**
 * `Uint8Array.prototype.toBase64` (ECMAScript 2026) for runtimes without
 * it, such as Node.js 20 (V8 11.3), backed by Node's native Buffer encoder.
 *
 * protobuf-es encodes every `bytes` field of a JSON answer with this method
 * when the runtime has it, and otherwise with a loop that appends one
 * character at a time: for a PublishBatch answer of 128 × 64 KiB payloads
 * that loop allocated ~360 MB of intermediate strings and took 3 s of the
 * event loop (with the native encoder: 23 MB, 0.1 s). protobuf-es looks the
 * method up once, when it is first imported, so this module must be
 * imported before anything that imports `@bufbuild/protobuf` (the first
 * import of the `laneway` entry point). Where the runtime has the method,
 * this module changes nothing.
 *
 * It follows the specification: `this` must be a Uint8Array; `options` is
 * undefined or an object with `alphabet` ("base64", the default, or
 * "base64url") and `omitPadding`.
 */

interface ToBase64Options {
  readonly alphabet?: unknown;
  readonly omitPadding?: unknown;
}

function toBase64(this: unknown, options?: ToBase64Options): string {
  if (!types.isUint8Array(this)) throw new TypeError("Uint8Array.prototype.toBase64 called on a value that is not a Uint8Array");
  if (options !== undefined && (options === null || (typeof options !== "object" && typeof options !== "function"))) {
    throw new TypeError("the options of Uint8Array.prototype.toBase64 must be an object");
  }
  const alphabet = options?.alphabet ?? "base64";
  if (alphabet !== "base64" && alphabet !== "base64url") throw new TypeError('the alphabet must be "base64" or "base64url"');
  const omitPadding = Boolean(options?.omitPadding);
  const bytes = Buffer.from(this.buffer, this.byteOffset, this.byteLength);
  if (alphabet === "base64") {
    const text = bytes.toString("base64");
    return omitPadding ? text.replace(/=+$/, "") : text;
  }
  // Node's base64url never pads.
  const text = bytes.toString("base64url");
  return omitPadding ? text : text + "=".repeat((4 - (text.length % 4)) % 4);
}

const prototype = Uint8Array.prototype as unknown as Record<string, unknown>;
if (typeof prototype.toBase64 !== "function") {
  Object.defineProperty(Uint8Array.prototype, "toBase64", { value: toBase64, writable: true, configurable: true, enumerable: false });
}

export {};
