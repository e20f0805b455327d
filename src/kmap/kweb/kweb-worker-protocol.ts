import type { ApplyOutcome } from "../kweb-manager.js";
import type { KwebFailureReason } from "./kweb-failure-error.js";
import type { PublicSigningKey } from "./signing-key.js";

/**
 * The messages between EmbeddedKwebManager (main thread) and the Kweb
 * worker. Everything is structured-clone friendly: the command travels as
 * its canonical text (what gets signed) rather than as a Protobuf object,
 * and errors travel as plain descriptions that the main thread turns back
 * into its own error classes, since classes do not survive the boundary.
 */

/** What the worker is started with (its `workerData`). */
export interface KwebWorkerData {
  readonly databasePath: string;
  readonly signingKeyPath: string;
  readonly busyTimeoutMs: number;
}

export type ToWorker =
  | {
      readonly type: "apply";
      readonly id: number;
      readonly idempotencyId: string;
      readonly canonicalCommand: string;
      readonly expectedTransactionIds: Readonly<Record<string, string>>;
    }
  | { readonly type: "close" };

/** An error as it crosses the thread boundary. */
export type WireError =
  | { readonly kind: "writer_unavailable"; readonly message: string }
  | { readonly kind: "kweb_failure"; readonly reason: KwebFailureReason; readonly message: string; readonly cause?: WireCause };

/** The original error behind a failure, kept for debugging (never shown to callers). */
export interface WireCause {
  readonly name: string;
  readonly message: string;
  readonly code?: string;
}

export type FromWorker =
  | { readonly type: "ready"; readonly signingKey: PublicSigningKey }
  | { readonly type: "start_failed"; readonly error: WireError }
  | { readonly type: "applied"; readonly id: number; readonly outcome: ApplyOutcome }
  | { readonly type: "apply_failed"; readonly id: number; readonly error: WireError }
  | { readonly type: "closed" };
