import { LaneError, type LaneReason } from "./errors.js";
import type { LaneRecord } from "./types.js";

/**
 * Combining a shared group's operations across Laneway processes
 * (docs/lanes-groups.md, "Concurrency"): while several processes work one
 * group, one of them — the holder of the group's **writer lease** — applies
 * every operation, and the others forward their claims, acks, nacks and
 * renewals to it over core NATS on Laneway's own connection. The writer
 * folds them into its combined compare-and-set exactly as its own callers'
 * operations. Safety stays in that compare-and-set: a stale lease or two
 * processes that both think they write cost conflicts and retries, never a
 * double lease or an accepted stale receipt.
 *
 * This file holds the wire forms: the lease's key and value, the subjects,
 * and the forwarded batch and its answer (JSON; Laneway's own processes
 * alone speak it, so it changes with Laneway's version — processes of
 * different versions fall back to direct writes when they cannot read each
 * other). Nothing here is a subject or log line with a receipt in it: the
 * receipts travel only in message bodies on Laneway's own connection.
 */

/** How long a writer lease lasts; the writer renews it every third of that while the group is busy. */
export const WRITER_LEASE_MS = 3_000;

/** The group's writer lease, a key of the namespace's meta bucket (no per-key TTL on 2.9.10: the value carries its end). */
export function writerLeaseKey(lane: string, group: string): string {
  return `writer.${lane}.${group}`;
}

export interface WriterLease {
  /** The writing process's id (random per process, 16 hex). */
  readonly process: string;
  /** Epoch ms (the writer's clock) until which it holds the lease. */
  readonly until: number;
}

export function encodeWriterLease(lease: WriterLease): Uint8Array {
  return Buffer.from(JSON.stringify({ process: lease.process, until: lease.until }), "utf8");
}

/** The lease a value holds; undefined for anything else (treated as no lease). */
export function decodeWriterLease(value: Uint8Array): WriterLease | undefined {
  try {
    const parsed = JSON.parse(Buffer.from(value).toString("utf8")) as { process?: unknown; until?: unknown };
    if (typeof parsed.process !== "string" || !/^[0-9a-f]{16}$/.test(parsed.process) || typeof parsed.until !== "number") return undefined;
    return { process: parsed.process, until: parsed.until };
  } catch {
    return undefined;
  }
}

/**
 * Where a process answers the operations forwarded to it for one group:
 * `laneway.<namespace>.<lane>.fwd.<group>.<process>`. Under the namespace's
 * own prefix, which only Laneway's credential may use; the fixed `fwd`
 * keeps it out of the lanes' streams and the group signal subjects.
 */
export function forwardSubject(namespace: string, lane: string, group: string, process: string): string {
  return `laneway.${namespace}.${lane}.fwd.${group}.${process}`;
}

/** Every forward subject of one process in a namespace (one subscription per process). */
export function forwardSubjects(namespace: string, process: string): string {
  return `laneway.${namespace}.*.fwd.*.${process}`;
}

/** One forwarded operation (the caller's membership was checked by the forwarding process). */
export type ForwardedOperation =
  | { readonly k: "claim"; readonly p: string; readonly max: number }
  | { readonly k: "renew" | "ack" | "nack"; readonly p: string; readonly items: readonly (readonly [number, string])[] };

export interface ForwardedBatch {
  readonly ops: readonly ForwardedOperation[];
}

/** A failure as it crosses between processes: a lane reason and its message, or an internal failure (no message). */
export type WireError = readonly [LaneReason, string] | readonly ["internal"];

/** A leased delivery; `r` is absent when the answer had no room for the record (the forwarder reads it by sequence). */
export interface WireDelivery {
  readonly s: number;
  readonly receipt: string;
  readonly a: number;
  readonly e: number;
  readonly r?: WireRecord;
}

export interface WireRecord {
  readonly lane: string;
  readonly project: string;
  readonly id: string;
  readonly kind: "event" | "work";
  readonly schema: string;
  /** base64 */
  readonly payload: string;
  readonly provenance: string;
  readonly createdAt: number;
}

export type WireResult =
  | { readonly claim: readonly WireDelivery[] }
  | { readonly items: readonly ({ readonly ok: unknown } | { readonly err: WireError })[] }
  | { readonly err: WireError };

export interface ForwardAnswer {
  readonly results: readonly WireResult[];
  /** When the next lease ends or retry falls due, as the writer last saw the group (for waiting claims). */
  readonly next?: number;
  /** The process the answering one takes for the group's writer now (itself, another, or none). */
  readonly writer?: string;
  /** The end of that writer's lease, by its clock. */
  readonly until?: number;
}

/** The most bytes of records one answer carries; records beyond it are read by the forwarder. */
export const ANSWER_RECORD_BYTES = 512 * 1024;

export function wireError(error: unknown): WireError {
  return error instanceof LaneError ? [error.reason, error.message] : ["internal"];
}

export function errorOf(wire: WireError): Error {
  if (wire[0] === "internal") return new Error("the group's writing process failed the operation");
  return new LaneError(wire[0], wire[1]);
}

export function wireRecord(record: LaneRecord): WireRecord {
  return {
    lane: record.lane,
    project: record.project,
    id: record.id,
    kind: record.kind,
    schema: record.schema,
    payload: Buffer.from(record.payload).toString("base64"),
    provenance: record.provenance,
    createdAt: record.createdAt,
  };
}

export function recordOfWire(wire: WireRecord, sequence: number): LaneRecord {
  return {
    sequence,
    lane: wire.lane,
    project: wire.project,
    id: wire.id,
    kind: wire.kind,
    schema: wire.schema,
    payload: new Uint8Array(Buffer.from(wire.payload, "base64")),
    provenance: wire.provenance,
    createdAt: wire.createdAt,
  };
}

export function encodeJson(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value), "utf8");
}

export function decodeJson<T>(bytes: Uint8Array): T {
  return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8")) as T;
}
