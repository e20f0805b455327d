import { promisify } from "node:util";
import * as zlib from "node:zlib";
import { fromBinary, fromJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { createContextKey } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import { jsonBoundsProblem } from "./json-bounds.js";
import { unknownEnumName } from "./json-enums.js";

/**
 * Reads and checks a request message before Connect does, so that every
 * way a body can be malformed gets the same typed answer on every protocol.
 *
 * Connect itself would answer a binary body it cannot parse with `internal`
 * and the parser's own text, and a malformed JSON body without a detail.
 * Here the body is read with a hard limit on each message's size (before
 * and after gzip decompression, as it streams), unframed, decompressed, and
 * parsed against the method's input type — JSON with unknown fields ignored
 * but unknown enum names refused. A message that passes is handed to Connect
 * unchanged in meaning (uncompressed); the first one that fails ends the
 * body with a RequestProblemError, which the adapter turns into the
 * domain's typed error. Connect reads the body only after the request gate,
 * so authentication always comes first. No parser text and no part of the
 * body ever reaches the answer.
 *
 * A Connect GET request carries its message in the query; the adapter
 * checks it with `checkMessage` and, when it fails, hands Connect an empty
 * message and records the problem in the call's context, where the
 * error-mapping interceptor raises it after authentication.
 */

/** Why a request body was refused. */
export interface RequestProblem {
  /** `malformed`: invalid_argument; `too_large`: resource_exhausted; `unsupported_encoding`: unimplemented. */
  readonly kind: "malformed" | "too_large" | "unsupported_encoding";
  /** Written by Laneway; names the type or field, never quotes the body. */
  readonly message: string;
}

/** The problem found in the current call's request body, if any. */
export const requestProblemKey = createContextKey<RequestProblem | undefined>(undefined, { description: "request body problem" });

/** How the protocol frames the request message. */
export interface Framing {
  /** Connect unary bodies are the bare message; the other protocols use 5-byte envelopes. */
  readonly enveloped: boolean;
  readonly binary: boolean;
  /** The request's content encoding: undefined for none, `gzip`, or anything else (refused). */
  readonly encoding: string | undefined;
}

const gunzip = promisify(zlib.gunzip);
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A request body the wire layer refuses; the adapter turns it into the domain's typed error. */
export class RequestProblemError extends Error {
  constructor(readonly problem: RequestProblem) {
    super(problem.message);
  }
}

/**
 * The request body as Connect will read it: each message checked,
 * decompressed and re-framed uncompressed, as it streams. Throws
 * RequestProblemError at the first problem. `single` refuses a second
 * message (every method but bidirectional and client streams).
 */
export async function* checkedRequestBody(
  source: AsyncIterable<Uint8Array>,
  input: DescMessage,
  framing: Framing,
  maxBytes: number,
  single: boolean,
): AsyncGenerator<Uint8Array> {
  if (framing.encoding !== undefined && framing.encoding !== "gzip") {
    throw new RequestProblemError({ kind: "unsupported_encoding", message: "the request's content encoding is not supported: send it uncompressed or with gzip" });
  }
  if (!framing.enveloped) {
    const raw = await readBounded(source, maxBytes);
    if (raw === undefined) throw new RequestProblemError(tooLarge(maxBytes));
    yield await checkedMessage(input, raw, framing.encoding === "gzip", framing, maxBytes);
    return;
  }
  let buffer: Uint8Array = new Uint8Array(0);
  let messages = 0;
  for await (const chunk of source) {
    buffer = buffer.byteLength === 0 ? chunk : Buffer.concat([buffer, chunk]);
    for (;;) {
      if (buffer.byteLength < 5) break;
      const flags = buffer[0]!;
      const length = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength).getUint32(1);
      if ((flags & ~0b1) !== 0) throw new RequestProblemError({ kind: "malformed", message: "a request message frame has unknown flags" });
      if (length > maxBytes) throw new RequestProblemError(tooLarge(maxBytes));
      if (buffer.byteLength < 5 + length) break;
      if (single && messages === 1) {
        throw new RequestProblemError({ kind: "malformed", message: "the request body holds more than the one message this method takes" });
      }
      const compressed = (flags & 0b1) !== 0;
      if (compressed && framing.encoding === undefined) {
        throw new RequestProblemError({ kind: "malformed", message: "a request message is marked compressed but the request names no encoding" });
      }
      const message = buffer.subarray(5, 5 + length);
      buffer = buffer.subarray(5 + length);
      messages += 1;
      yield await checkedMessage(input, message, compressed, framing, maxBytes);
    }
    // A frame is never held for more than its announced length, which is bounded above.
  }
  if (buffer.byteLength > 0) throw new RequestProblemError({ kind: "malformed", message: "the request body ends inside a message frame" });
  if (messages === 0 && single) throw new RequestProblemError({ kind: "malformed", message: "the request body holds no message" });
}

async function checkedMessage(input: DescMessage, bytes: Uint8Array, compressed: boolean, framing: Framing, maxBytes: number): Promise<Uint8Array> {
  let message = bytes;
  if (compressed) {
    const inflated = await inflate(message, maxBytes);
    if ("problem" in inflated) throw new RequestProblemError(inflated.problem);
    message = inflated.bytes;
  }
  const problem = checkMessage(input, message, framing.binary);
  if (problem !== undefined) throw new RequestProblemError({ kind: "malformed", message: problem });
  return framing.enveloped ? encodeEnvelope(0, message) : message;
}

/** Reads at most `limit` bytes of `body`; undefined when there is more. */
async function readBounded(body: AsyncIterable<Uint8Array>, limit: number): Promise<Uint8Array | undefined> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of body) {
    total += chunk.byteLength;
    if (total > limit) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The message's problem in Laneway's words, or undefined when it parses. */
export function checkMessage(input: DescMessage, bytes: Uint8Array, binary: boolean): string | undefined {
  if (binary) {
    try {
      fromBinary(input, bytes);
      return undefined;
    } catch {
      return `the request body is not a valid ${input.typeName} in the protobuf binary format`;
    }
  }
  // Bounded before anything is built: nesting, members, duplicate keys.
  const bounded = jsonBoundsProblem(bytes);
  if (bounded !== undefined) return bounded;
  let json: JsonValue;
  try {
    json = JSON.parse(utf8.decode(bytes)) as JsonValue;
  } catch (error) {
    return error instanceof SyntaxError ? "the request body is not valid JSON" : "the request body is not valid UTF-8";
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return `the request body must be a JSON object (a ${input.typeName})`;
  const badEnum = unknownEnumName(input, json);
  if (badEnum !== undefined) return `the request field ${badEnum} names an enum value the contract does not define`;
  try {
    fromJson(input, json, { ignoreUnknownFields: true });
    return undefined;
  } catch {
    return `the request body does not match ${input.typeName}: a field has the wrong type or an invalid value`;
  }
}

/** The empty request message, framed as the protocol expects, that stands in for a refused body. */
export function emptyBody(framing: Pick<Framing, "enveloped" | "binary">): Uint8Array {
  const message = framing.binary ? new Uint8Array(0) : new TextEncoder().encode("{}");
  return framing.enveloped ? encodeEnvelope(0, message) : message;
}

function tooLarge(maxBytes: number): RequestProblem {
  return { kind: "too_large", message: `the request message is larger than the server's limit of ${maxBytes} bytes` };
}

async function inflate(compressed: Uint8Array, maxBytes: number): Promise<{ bytes: Uint8Array } | { problem: RequestProblem }> {
  try {
    // maxOutputLength stops inflating at the limit: a compressed bomb never grows past it.
    return { bytes: await gunzip(compressed, { maxOutputLength: maxBytes }) };
  } catch (error) {
    if ((error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") return { problem: tooLarge(maxBytes) };
    return { problem: { kind: "malformed", message: "the request message is not valid gzip" } };
  }
}
