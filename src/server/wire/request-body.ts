import { promisify } from "node:util";
import * as zlib from "node:zlib";
import { fromBinary, fromJson, type DescMessage, type JsonValue, type Message } from "@bufbuild/protobuf";
import { createContextKey } from "@connectrpc/connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import { jsonBoundsProblem, quoteIntegers } from "./json-bounds.js";
import { unknownEnumName } from "./json-enums.js";

/**
 * Reads and parses a request message before Connect does, so that every
 * way a body can be malformed gets the same typed answer on every protocol,
 * and so that each message is parsed once.
 *
 * Connect itself would answer a binary body it cannot parse with `internal`
 * and the parser's own text, and a malformed JSON body without a detail
 * (or with a duplicate key quoted from it).
 * Here the body is read with a hard limit on each message's size (before
 * and after gzip decompression, as it streams), unframed, decompressed, and
 * parsed against the method's input type — JSON within the bounds of
 * json-bounds.ts, with unknown fields ignored but unknown enum names
 * refused. A message that parses is kept in the call's `ParsedMessages`,
 * and Connect is handed an empty message in its place (`{}` or no bytes,
 * framed as the protocol expects), which costs it nothing to parse; the
 * adapter's interceptor puts the parsed message back before any other
 * interceptor or the service sees the request. The first message that fails
 * ends the body with a RequestProblemError, which the adapter turns into the
 * domain's typed error. Connect reads the body only after the request gate,
 * so authentication always comes first. No parser text and no part of the
 * body ever reaches the answer.
 *
 * A Connect GET request carries its message in the query; the adapter
 * parses it with `parseMessage` and hands Connect an empty message in the
 * query instead; a problem is recorded in the call's context and raised by
 * the adapter's interceptor, after authentication.
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

/**
 * The request messages the wire layer parsed, in the order Connect will
 * read their stand-ins: one for a unary or server-streaming call, one per
 * message of a client or bidirectional stream.
 */
export class ParsedMessages {
  readonly #queue: Message[] = [];
  /** Bytes of request body read so far, as sent (before decompression): the per-call log's request size. */
  receivedBytes = 0;

  push(message: Message): void {
    this.#queue.push(message);
  }

  /** The next parsed message, or undefined when there is none (which the adapter treats as an internal failure). */
  take(): Message | undefined {
    return this.#queue.shift();
  }
}

/** The current call's parsed request messages (set by the adapter on every call it hands to Connect). */
export const parsedMessagesKey = createContextKey<ParsedMessages | undefined>(undefined, { description: "parsed request messages" });

async function* counted(source: AsyncIterable<Uint8Array>, parsed: ParsedMessages): AsyncGenerator<Uint8Array> {
  for await (const chunk of source) {
    parsed.receivedBytes += chunk.byteLength;
    yield chunk;
  }
}

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
 * The request body as Connect will read it: each message decompressed and
 * parsed as it streams, kept in `parsed`, and replaced by an empty stand-in
 * framed as the protocol expects. Throws RequestProblemError at the first
 * problem. `single` refuses a second message (every method but
 * bidirectional and client streams).
 */
export async function* checkedRequestBody(
  source: AsyncIterable<Uint8Array>,
  input: DescMessage,
  framing: Framing,
  maxBytes: number,
  single: boolean,
  parsed: ParsedMessages,
): AsyncGenerator<Uint8Array> {
  source = counted(source, parsed);
  if (framing.encoding !== undefined && framing.encoding !== "gzip") {
    throw new RequestProblemError({ kind: "unsupported_encoding", message: "the request's content encoding is not supported: send it uncompressed or with gzip" });
  }
  if (!framing.enveloped) {
    const raw = await readBounded(source, maxBytes);
    if (raw === undefined) throw new RequestProblemError(tooLarge(maxBytes));
    yield await checkedMessage(input, raw, framing.encoding === "gzip", framing, maxBytes, parsed);
    return;
  }
  // Chunks are kept as they arrive and copied once, into the message they
  // belong to (appending each chunk to one growing buffer copied the whole
  // buffer per chunk: 22 s of copying for an 11 MB message in 16 KB frames).
  const pending = new ChunkQueue();
  let messages = 0;
  for await (const chunk of source) {
    pending.push(chunk);
    for (;;) {
      if (pending.length < 5) break;
      const header = pending.peek(5);
      const flags = header[0]!;
      const length = new DataView(header.buffer, header.byteOffset, header.byteLength).getUint32(1);
      if ((flags & ~0b1) !== 0) throw new RequestProblemError({ kind: "malformed", message: "a request message frame has unknown flags" });
      if (length > maxBytes) throw new RequestProblemError(tooLarge(maxBytes));
      if (pending.length < 5 + length) break;
      if (single && messages === 1) {
        throw new RequestProblemError({ kind: "malformed", message: "the request body holds more than the one message this method takes" });
      }
      const compressed = (flags & 0b1) !== 0;
      if (compressed && framing.encoding === undefined) {
        throw new RequestProblemError({ kind: "malformed", message: "a request message is marked compressed but the request names no encoding" });
      }
      pending.take(5);
      const message = pending.take(length);
      messages += 1;
      yield await checkedMessage(input, message, compressed, framing, maxBytes, parsed);
    }
    // A frame is never held for more than its announced length, which is bounded above.
  }
  if (pending.length > 0) throw new RequestProblemError({ kind: "malformed", message: "the request body ends inside a message frame" });
  if (messages === 0 && single) throw new RequestProblemError({ kind: "malformed", message: "the request body holds no message" });
}

/** Bytes received and not yet framed, as the chunks they arrived in. */
class ChunkQueue {
  #chunks: Uint8Array[] = [];
  /** Bytes of the first chunk already taken. */
  #offset = 0;
  length = 0;

  push(chunk: Uint8Array): void {
    if (chunk.byteLength === 0) return;
    this.#chunks.push(chunk);
    this.length += chunk.byteLength;
  }

  /** The first `n` bytes (n <= length), left in the queue. */
  peek(n: number): Uint8Array {
    const first = this.#chunks[0]!;
    if (first.byteLength - this.#offset >= n) return first.subarray(this.#offset, this.#offset + n);
    const out = new Uint8Array(n);
    let filled = 0;
    let offset = this.#offset;
    for (const chunk of this.#chunks) {
      const piece = chunk.subarray(offset, offset + n - filled);
      out.set(piece, filled);
      filled += piece.byteLength;
      offset = 0;
      if (filled === n) break;
    }
    return out;
  }

  /** Removes and returns the first `n` bytes (n <= length): a view when they lie in one chunk, else one copy. */
  take(n: number): Uint8Array {
    this.length -= n;
    const first = this.#chunks[0];
    if (first !== undefined && first.byteLength - this.#offset >= n) {
      const out = first.subarray(this.#offset, this.#offset + n);
      this.#offset += n;
      if (this.#offset === first.byteLength) this.#drop(1);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.#chunks[0]!;
      const piece = chunk.subarray(this.#offset, this.#offset + n - filled);
      out.set(piece, filled);
      filled += piece.byteLength;
      this.#offset += piece.byteLength;
      if (this.#offset === chunk.byteLength) this.#drop(1);
    }
    return out;
  }

  #drop(count: number): void {
    this.#chunks.splice(0, count);
    this.#offset = 0;
  }
}

async function checkedMessage(
  input: DescMessage,
  bytes: Uint8Array,
  compressed: boolean,
  framing: Framing,
  maxBytes: number,
  parsed: ParsedMessages,
): Promise<Uint8Array> {
  let message = bytes;
  if (compressed) {
    const inflated = await inflate(message, maxBytes);
    if ("problem" in inflated) throw new RequestProblemError(inflated.problem);
    message = inflated.bytes;
  }
  const result = parseMessage(input, message, framing.binary);
  if ("problem" in result) throw new RequestProblemError({ kind: "malformed", message: result.problem });
  parsed.push(result.message);
  return emptyBody(framing);
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

/** The message, or its problem in Laneway's words. */
export function parseMessage(input: DescMessage, bytes: Uint8Array, binary: boolean): { message: Message } | { problem: string } {
  if (binary) {
    try {
      return { message: fromBinary(input, bytes) };
    } catch {
      return { problem: `the request body is not a valid ${input.typeName} in the protobuf binary format` };
    }
  }
  // Bounded before anything is built: nesting, members, duplicate keys.
  // Integer literals beyond 2^53 are noted too, to be quoted before parsing.
  const unsafeIntegers: number[] = [];
  const bounded = jsonBoundsProblem(bytes, undefined, unsafeIntegers);
  if (bounded !== undefined) return { problem: bounded };
  let json: JsonValue;
  try {
    json = JSON.parse(utf8.decode(unsafeIntegers.length === 0 ? bytes : quoteIntegers(bytes, unsafeIntegers))) as JsonValue;
  } catch (error) {
    return { problem: error instanceof SyntaxError ? "the request body is not valid JSON" : "the request body is not valid UTF-8" };
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return { problem: `the request body must be a JSON object (a ${input.typeName})` };
  const badEnum = unknownEnumName(input, json);
  if (badEnum !== undefined) return { problem: `the request field ${badEnum} names an enum value the contract does not define` };
  try {
    return { message: fromJson(input, json, { ignoreUnknownFields: true }) };
  } catch {
    return { problem: `the request body does not match ${input.typeName}: a field has the wrong type or an invalid value` };
  }
}

const emptyJson = new TextEncoder().encode("{}");
const emptyBodies = {
  json: emptyJson,
  binary: new Uint8Array(0),
  envelopedJson: encodeEnvelope(0, emptyJson),
  envelopedBinary: encodeEnvelope(0, new Uint8Array(0)),
};

/** The empty request message, framed as the protocol expects, that Connect reads in place of the parsed one (or of a refused body). */
export function emptyBody(framing: Pick<Framing, "enveloped" | "binary">): Uint8Array {
  const body = framing.enveloped ? (framing.binary ? emptyBodies.envelopedBinary : emptyBodies.envelopedJson) : framing.binary ? emptyBodies.binary : emptyBodies.json;
  // A copy: whoever reads it may keep or change it.
  return body.slice();
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
