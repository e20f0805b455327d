/**
 * WatchCommands as a fast, careless client: a raw Connect streaming request
 * over HTTP/1.1 (JSON envelopes) that reads as fast as the server writes and
 * decodes nothing but each frame's position, or walks away mid-stream. The
 * generated client costs more CPU per message than the server does, so it
 * would measure itself; this one lets the server's replay run flat out, as a
 * hostile client's would.
 */
import * as http from "node:http";
import { envelope } from "./raw-rpc.js";

export interface RawWatch {
  /** Messages received so far. */
  readonly received: number;
  /** The position of the last message received (0 before the first). */
  readonly lastPosition: number;
  /** Settles when the stream ends (the end-stream frame or the connection). */
  readonly ended: Promise<void>;
  /** The end-stream frame's error JSON, if the stream ended with one. */
  readonly endError: unknown;
  /** Drops the connection at once, as a client that went away. */
  destroy(): void;
}

export function rawWatch(baseUrl: string, token: string, request: { afterPosition: number; idempotencyId?: string }): RawWatch {
  const body = envelope(Buffer.from(JSON.stringify({ afterPosition: String(request.afterPosition), idempotencyId: request.idempotencyId ?? "" })));
  const url = new URL("/laneway.kmap.v1.KmapCommandService/WatchCommands", baseUrl);
  let received = 0;
  let lastPosition = 0;
  let endError: unknown;
  let buffer: Buffer = Buffer.alloc(0);
  const req = http.request(url, {
    method: "POST",
    agent: false,
    headers: { "content-type": "application/connect+json", authorization: `Bearer ${token}`, "content-length": String(body.byteLength) },
  });
  const ended = new Promise<void>((resolve) => {
    req.on("response", (res) => {
      res.on("data", (chunk: Buffer) => {
        buffer = buffer.byteLength === 0 ? chunk : Buffer.concat([buffer, chunk]);
        let offset = 0;
        while (offset + 5 <= buffer.byteLength) {
          const length = buffer.readUInt32BE(offset + 1);
          if (offset + 5 + length > buffer.byteLength) break;
          const flags = buffer[offset]!;
          const frame = buffer.subarray(offset + 5, offset + 5 + length);
          if ((flags & 0x02) !== 0) {
            endError = (JSON.parse(frame.toString("utf8")) as { error?: unknown }).error;
          } else {
            received++;
            const match = /"position":"(\d+)"/.exec(frame.toString("latin1", 0, Math.min(frame.byteLength, 64)));
            if (match) lastPosition = Number(match[1]);
          }
          offset += 5 + length;
        }
        buffer = buffer.subarray(offset);
      });
      res.on("end", resolve);
      res.on("error", () => resolve());
      res.on("close", resolve);
    });
    req.on("error", () => resolve());
  });
  req.end(body);
  return {
    get received() {
      return received;
    },
    get lastPosition() {
      return lastPosition;
    },
    ended,
    get endError() {
      return endError;
    },
    destroy() {
      req.destroy();
    },
  };
}
