import { Worker } from "node:worker_threads";
import { canonicalCommand } from "../canonical-command.js";
import { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type KwebManager } from "../kweb-manager.js";
import { KwebFailureError } from "./kweb-failure-error.js";
import type { FromWorker, KwebWorkerData, ToWorker, WireError } from "./kweb-worker-protocol.js";
import { isLaneMessage, type LaneFromWorker, type LaneToWorker } from "../worker-lane-protocol.js";
import { DEFAULT_BUSY_TIMEOUT_MS } from "./kweb-writer.js";
import type { PublicSigningKey } from "./signing-key.js";

/**
 * Laneway's default KwebManager: the embedded Kweb, written from a worker
 * thread.
 *
 * better-sqlite3 is synchronous and the Kweb commits with
 * synchronous=FULL, so an apply can spend milliseconds in fsync, or up to
 * the busy timeout waiting for a lock. On the server's event loop that
 * would stall every RPC; in a worker it stalls nothing but the Kweb. Reads
 * do not go through the worker: KwebReader opens its own read-only
 * connection on the main thread, which WAL lets read while the worker
 * writes.
 *
 * Applies are sent to the worker one at a time, in arrival order; the next
 * goes only when the previous one answered. That keeps "the apply in
 * progress" well defined for close() and for a worker that dies: the one in
 * flight and those queued behind it reject with KwebFailureError
 * (`worker_stopped`), as does every later apply; the lane's runtime ends
 * on it, and the next start recovers exactly through provenance.
 */

export interface EmbeddedKwebManagerOptions {
  /** The Kweb SQLite file, for example `<data>/kmap/kweb.sqlite`. */
  readonly databasePath: string;
  /** The signing key file, for example `<data>/kmap/signing-key.pem`; generated when missing. */
  readonly signingKeyPath: string;
  /** How long an apply waits for a write lock held elsewhere before reporting WriterUnavailableError; default 250 ms. */
  readonly busyTimeoutMs?: number;
}

interface PendingApply {
  readonly message: Extract<ToWorker, { type: "apply" }>;
  readonly resolve: (outcome: ApplyOutcome) => void;
  readonly reject: (error: Error) => void;
}

type Phase = "idle" | "starting" | "ready" | "failed" | "closed";

function fromWire(error: WireError): Error {
  if (error.kind === "writer_unavailable") return new WriterUnavailableError(error.message);
  const cause = error.cause === undefined ? undefined : Object.assign(new Error(error.cause.message), { name: error.cause.name, code: error.cause.code });
  return new KwebFailureError(error.reason, error.message, cause === undefined ? undefined : { cause });
}

const closedError = () => new KwebFailureError("closed", "the Kweb manager is closed");

export class EmbeddedKwebManager implements KwebManager {
  readonly #workerData: KwebWorkerData;
  #phase: Phase = "idle";
  #closeRequested = false;
  #worker: Worker | undefined;
  #ready: Promise<void> | undefined;
  #settleReady: { resolve: () => void; reject: (error: Error) => void } | undefined;
  #failure: Error | undefined;
  #signingKey: PublicSigningKey | undefined;
  readonly #queue: PendingApply[] = [];
  #inFlight: PendingApply | undefined;
  #nextId = 1;
  #idleWaiters: Array<() => void> = [];
  #closedAck: (() => void) | undefined;
  #closing: Promise<void> | undefined;
  #reportFailure!: (error: Error) => void;
  #laneListener: ((message: LaneFromWorker) => void) | undefined;
  /** Settles when the manager fails after it was ready (see KwebManager.failure). */
  readonly failure: Promise<Error> = new Promise((resolve) => (this.#reportFailure = resolve));

  constructor(options: EmbeddedKwebManagerOptions) {
    this.#workerData = {
      databasePath: options.databasePath,
      signingKeyPath: options.signingKeyPath,
      busyTimeoutMs: options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS,
    };
  }

  /** Creates a manager and waits until it is ready. */
  static async open(options: EmbeddedKwebManagerOptions): Promise<EmbeddedKwebManager> {
    const manager = new EmbeddedKwebManager(options);
    try {
      await manager.ready();
    } catch (error) {
      await manager.close();
      throw error;
    }
    return manager;
  }

  /**
   * Starts the worker (on the first call) and resolves once it has opened
   * the Kweb file and loaded the signing key. Rejects with KwebFailureError
   * when it cannot (unreadable key, newer schema, unusable file), or with
   * WriterUnavailableError when another writer held the lock throughout
   * first-time setup. A manager whose start failed stays failed.
   */
  ready(): Promise<void> {
    if (this.#ready === undefined) {
      if (this.#closeRequested) return Promise.reject(closedError());
      this.#ready = new Promise<void>((resolve, reject) => {
        this.#settleReady = { resolve, reject };
      });
      this.#start();
    }
    return this.#ready;
  }

  /** The public signing key the worker loaded. Throws KwebFailureError (`not_ready`) before ready() resolved. */
  signingKey(): PublicSigningKey {
    if (this.#signingKey === undefined) throw new KwebFailureError("not_ready", "the Kweb manager is not ready");
    return this.#signingKey;
  }

  apply(request: ApplyRequest): Promise<ApplyOutcome> {
    if (this.#closeRequested) return Promise.reject(closedError());
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    let text: string;
    try {
      text = canonicalCommand(request.command);
    } catch {
      // Not a well-formed Command message: nothing the writer could apply.
      return Promise.resolve({ kind: "rejected", code: "invalid_input", message: "the command cannot be serialised" });
    }
    return new Promise<ApplyOutcome>((resolve, reject) => {
      this.#queue.push({
        message: {
          type: "apply",
          id: this.#nextId++,
          idempotencyId: request.idempotencyId,
          canonicalCommand: text,
          expectedTransactionIds: { ...request.expectedTransactionIds },
        },
        resolve,
        reject,
      });
      // Applying before ready() starts the worker; a failed start rejects the queue.
      this.ready().catch(() => undefined);
      this.#pump();
    });
  }

  /**
   * Stops the manager: an apply in progress finishes (and its caller gets
   * its outcome); applies still queued behind it, and any made from now on,
   * reject with KwebFailureError (`closed`). Then the worker closes the
   * Kweb file and exits.
   */
  close(): Promise<void> {
    this.#closeRequested = true;
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    for (const pending of this.#queue.splice(0)) pending.reject(closedError());
    if (this.#phase === "idle") {
      this.#phase = "closed";
      return;
    }
    if (this.#phase === "starting") await this.#ready?.catch(() => undefined);
    // Any applies queued while starting were rejected when ready settled or are rejected here.
    for (const pending of this.#queue.splice(0)) pending.reject(closedError());
    if (this.#inFlight !== undefined) {
      await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    }
    const worker = this.#worker;
    if (this.#phase === "ready" && worker !== undefined) {
      await new Promise<void>((resolve) => {
        this.#closedAck = resolve;
        this.#post({ type: "close" });
      });
    }
    this.#phase = "closed";
    if (worker !== undefined) await worker.terminate();
  }

  /**
   * The channel of the command lane hosted in this manager's worker thread
   * (WorkerLane on this side, LaneHost in the worker): every message whose
   * type starts with `lane_` goes to `listener`. Call it once the manager is
   * ready; there is one listener.
   */
  laneChannel(listener: (message: LaneFromWorker) => void): { post(message: LaneToWorker): void } {
    this.#laneListener = listener;
    return { post: (message) => this.#worker?.postMessage(message) };
  }

  /**
   * Starts the worker thread. The one seam of this class: tests override it
   * to start the real worker behind a bootstrap that makes the thread die on
   * cue, which is how a dying writer is exercised without mocks.
   */
  protected spawnWorker(workerData: KwebWorkerData): Worker {
    return new Worker(new URL("./kweb-worker-boot.mjs", import.meta.url), { workerData });
  }

  #start(): void {
    this.#phase = "starting";
    let worker: Worker;
    try {
      worker = this.spawnWorker(this.#workerData);
    } catch (error) {
      this.#fail(new KwebFailureError("worker_stopped", "the Kweb writer thread could not be started", { cause: error }));
      return;
    }
    this.#worker = worker;
    worker.on("message", (message: FromWorker | LaneFromWorker) => this.#onMessage(message));
    worker.on("error", (error) => this.#onWorkerGone(error));
    // The exit code is what an operator can act on: it travels as the cause's code.
    worker.on("exit", (code) => this.#onWorkerGone(Object.assign(new Error(`the Kweb worker exited with code ${code}`), { name: "WorkerExit", code: `WORKER_EXIT_${code}` })));
  }

  #onMessage(message: FromWorker | LaneFromWorker): void {
    if (isLaneMessage(message)) {
      this.#laneListener?.(message as LaneFromWorker);
      return;
    }
    message = message as FromWorker;
    switch (message.type) {
      case "ready":
        if (this.#phase !== "starting") return;
        this.#phase = "ready";
        this.#signingKey = { ...message.signingKey, publicKey: new Uint8Array(message.signingKey.publicKey) };
        this.#settleReady?.resolve();
        this.#pump();
        return;
      case "start_failed":
        this.#fail(fromWire(message.error));
        void this.#worker?.terminate();
        return;
      case "applied":
      case "apply_failed": {
        const pending = this.#inFlight;
        if (pending === undefined || pending.message.id !== message.id) return;
        this.#inFlight = undefined;
        if (message.type === "applied") pending.resolve(message.outcome);
        else pending.reject(fromWire(message.error));
        this.#afterApply();
        return;
      }
      case "closed":
        this.#closedAck?.();
        this.#closedAck = undefined;
        return;
    }
  }

  /** The worker died (uncaught error or exit) without being asked to. */
  #onWorkerGone(cause: unknown): void {
    if (this.#phase === "closed" || this.#phase === "failed") return;
    this.#fail(new KwebFailureError("worker_stopped", "the Kweb writer thread stopped unexpectedly", { cause }));
    this.#closedAck?.();
    this.#closedAck = undefined;
  }

  /** Enters the failed phase: everything waiting, and everything later, rejects with `failure`. */
  #fail(failure: Error): void {
    if (this.#phase === "ready") this.#reportFailure(failure);
    this.#phase = "failed";
    this.#failure = failure;
    this.#settleReady?.reject(failure);
    const inFlight = this.#inFlight;
    this.#inFlight = undefined;
    inFlight?.reject(failure);
    for (const pending of this.#queue.splice(0)) pending.reject(failure);
    this.#afterApply();
  }

  #afterApply(): void {
    if (this.#closeRequested) {
      for (const waiter of this.#idleWaiters.splice(0)) waiter();
      return;
    }
    this.#pump();
  }

  #pump(): void {
    if (this.#phase !== "ready" || this.#inFlight !== undefined || this.#closeRequested) return;
    const next = this.#queue.shift();
    if (next === undefined) return;
    this.#inFlight = next;
    this.#post(next.message);
  }

  #post(message: ToWorker): void {
    this.#worker?.postMessage(message);
  }
}
