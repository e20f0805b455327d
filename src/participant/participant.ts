import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { LaneService, type AckResult, type NackResult, type RenewResult, type Work } from "../../gen/laneway/lane/v1/lane_service_pb.js";

/**
 * A participant claims work of one group and runs it with handlers that
 * were registered explicitly, each for one schema from one publisher:
 *
 * - a claimed record whose (schema, publisher) has no handler is nacked,
 *   never executed — unregistered work is unhandled or unauthorized, and
 *   lane membership is not a write authority;
 * - a handler is bounded by its lease: it gets an AbortSignal that aborts
 *   when the lease ends, and the participant renews the lease before it
 *   does (a failed renewal aborts at once, since the lease is lost);
 * - a handler that returns is acked; one that throws (or outlives its
 *   lease) is nacked, which schedules a retry with the group's backoff;
 * - claims are batched (ClaimBatch, long-polling when idle) up to the
 *   concurrency, and acks, nacks and renewals of many handlers are combined
 *   into batch calls; a handler's slot is free again once it returns, and
 *   the claim for the slots freed in one turn carries the acks of the
 *   handlers that freed them (ClaimBatch's `acks`: one call, one write of
 *   the group's state, no waiting); acks that find no claim to ride with
 *   (two claims already in flight) go out with AckBatch, and so do the
 *   acks of a claim that failed (a repeated ack answers `duplicate`);
 * - `stop()` stops claiming, lets running handlers finish until their lease
 *   ends (or the given grace), aborts and nacks what is still running, and
 *   returns once every delivery is settled.
 *
 * Delivery is at least once: a handler must make its side effects
 * idempotent (or fenced), and must honor its signal.
 */

/** What a handler receives. */
export interface ClaimedWork {
  readonly sequence: bigint;
  /** The publisher (the record's authenticated project). */
  readonly project: string;
  readonly id: string;
  readonly schema: string;
  readonly payload: Uint8Array;
  readonly provenance: string;
  readonly attempt: number;
}

export type WorkHandler = (work: ClaimedWork, signal: AbortSignal) => Promise<void>;

export interface ParticipantOptions {
  /** A generated LaneService client with the participant's project token. */
  readonly client: Client<typeof LaneService>;
  readonly lane: string;
  readonly group: string;
  /** Handlers running at once (default 16). */
  readonly concurrency?: number;
  /** Most records per claim (default: the concurrency, at most 64). */
  readonly batchSize?: number;
  /** How long an idle claim waits for work (default 10 s, at most 60 s). */
  readonly waitMs?: number;
  /** Called for failures the participant handled itself (a failed ack, a lost lease); never with a receipt. */
  readonly onError?: (error: unknown) => void;
}

/** Counters for progress displays. */
export interface ParticipantStats {
  claimed: number;
  acked: number;
  nacked: number;
  inFlight: number;
}

interface Running {
  readonly work: Work;
  readonly controller: AbortController;
  leaseExpiresAt: number;
  renewTimer: NodeJS.Timeout | undefined;
  endTimer: NodeJS.Timeout | undefined;
}

type Settlement = "ack" | "nack" | "renew";

export class Participant {
  readonly #options: Required<Omit<ParticipantOptions, "onError">> & Pick<ParticipantOptions, "onError">;
  readonly #handlers = new Map<string, WorkHandler>();
  readonly #running = new Set<Running>();
  readonly #stopping = new AbortController();
  readonly #pending: Record<Settlement, { work: Work; done: (ok: boolean) => void }[]> = { ack: [], nack: [], renew: [] };
  /** Settlements queued or in flight of handlers that returned. */
  readonly #settling = new Set<Promise<void>>();
  #flushScheduled = false;
  #pumpScheduled = false;
  /** The claims in flight, and the slots promised to them. */
  readonly #claims = new Set<Promise<void>>();
  #reserved = 0;
  /** Wakes `run()` once stopping and nothing is claimed or running any more. */
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;
  readonly stats: ParticipantStats = { claimed: 0, acked: 0, nacked: 0, inFlight: 0 };

  constructor(options: ParticipantOptions) {
    const concurrency = Math.max(1, options.concurrency ?? 16);
    this.#options = {
      client: options.client,
      lane: options.lane,
      group: options.group,
      concurrency,
      batchSize: Math.min(64, Math.max(1, options.batchSize ?? concurrency)),
      waitMs: Math.min(60_000, Math.max(0, options.waitMs ?? 10_000)),
      onError: options.onError,
    };
  }

  /** Registers the handler of one schema from one publisher; nothing else is executed. */
  handle(schema: string, publisher: string, handler: WorkHandler): this {
    this.#handlers.set(`${schema}\n${publisher}`, handler);
    return this;
  }

  /** Claims and runs work until `stop()`; resolves once everything claimed is settled. */
  run(): Promise<void> {
    this.#loop ??= this.#runUntilStopped();
    return this.#loop;
  }

  /**
   * Stops claiming; running handlers may finish until their lease ends or
   * `graceMs` passes (whichever is first), then they are aborted and nacked.
   */
  async stop(graceMs = Number.POSITIVE_INFINITY): Promise<void> {
    this.#stopping.abort();
    this.#schedulePump();
    if (Number.isFinite(graceMs)) {
      setTimeout(() => {
        for (const running of this.#running) running.controller.abort(new Error("the participant is stopping"));
      }, graceMs).unref();
    }
    await this.#loop;
  }

  async #runUntilStopped(): Promise<void> {
    this.#pump();
    while (!this.#stopping.signal.aborted || this.#claims.size > 0 || this.#running.size > 0) {
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
    await this.#flush();
    await Promise.all([...this.#settling]);
  }

  /**
   * Claims for the free slots (at most CLAIMS_IN_FLIGHT claims of at most
   * batchSize each), the queued acks riding with the first; acks that find
   * no claim to ride with go out with AckBatch. Runs in the turn after
   * handlers returned or a claim ended, so that every slot freed in that
   * turn is claimed at once.
   */
  #pump(): void {
    this.#pumpScheduled = false;
    const { concurrency, batchSize } = this.#options;
    while (!this.#stopping.signal.aborted && this.#claims.size < CLAIMS_IN_FLIGHT) {
      const free = concurrency - this.#running.size - this.#reserved;
      if (free <= 0) break;
      const max = Math.min(free, batchSize);
      this.#reserved += max;
      const claim = this.#claim(max, this.#pending.ack.splice(0, MAX_BATCH)).finally(() => {
        this.#reserved -= max;
        this.#claims.delete(claim);
        this.#schedulePump();
      });
      this.#claims.add(claim);
    }
    if (this.#pending.ack.length > 0) this.#scheduleFlush();
    this.#wake?.();
  }

  #schedulePump(): void {
    if (this.#pumpScheduled) return;
    this.#pumpScheduled = true;
    setImmediate(() => this.#pump());
  }

  /** One ClaimBatch for `max` free slots, carrying `acks`; starts what it leased. */
  async #claim(max: number, acks: { work: Work; done: (ok: boolean) => void }[]): Promise<void> {
    const { client, lane, group, waitMs } = this.#options;
    const signal = this.#stopping.signal;
    try {
      const response = await client.claimBatch(
        {
          lane,
          group,
          maxRecords: max,
          wait: { seconds: BigInt(Math.floor(waitMs / 1000)), nanos: (waitMs % 1000) * 1_000_000 },
          acks: acks.map(({ work }) => ({ sequence: work.record!.sequence, receipt: work.receipt })),
        },
        { signal },
      );
      this.#settled("ack", acks, response.ackResults);
      for (const item of response.work) this.#start(item);
    } catch (error) {
      // Whether the acks were applied is unknown: they go again with AckBatch.
      this.#pending.ack.push(...acks);
      if (acks.length > 0) this.#scheduleFlush();
      if (signal.aborted) return;
      // A claim that reaches the group before the acks sent with it is held
      // there for them (a moment at most), so a refusal for capacity is news.
      this.#options.onError?.(error);
      // A capacity limit or an unavailable broker: back off briefly before this claim's slots are claimed again.
      await sleep(ConnectError.from(error).code === Code.ResourceExhausted ? 200 : 1_000, signal);
    }
  }

  #start(work: Work): void {
    const record = work.record!;
    this.stats.claimed += 1;
    const handler = this.#handlers.get(`${record.schema}\n${record.project}`);
    if (handler === undefined) {
      // Unhandled or unauthorized: never executed.
      void this.#settle("nack", work);
      return;
    }
    const running: Running = {
      work,
      controller: new AbortController(),
      leaseExpiresAt: timestampMs(work.leaseExpiresAt!),
      renewTimer: undefined,
      endTimer: undefined,
    };
    this.#running.add(running);
    this.stats.inFlight = this.#running.size;
    this.#scheduleLease(running);
    const claimed: ClaimedWork = {
      sequence: record.sequence,
      project: record.project,
      id: record.id,
      schema: record.schema,
      payload: record.payload,
      provenance: record.provenance,
      attempt: work.attempt,
    };
    void (async () => {
      let outcome: Settlement = "ack";
      try {
        await handler(claimed, running.controller.signal);
        if (running.controller.signal.aborted) outcome = "nack";
      } catch {
        outcome = "nack";
      } finally {
        clearTimeout(running.renewTimer);
        clearTimeout(running.endTimer);
      }
      // The handler's slot is free once it returned: the claim for it
      // carries its ack, so that the server applies both in one write of
      // the group's state.
      this.#running.delete(running);
      this.stats.inFlight = this.#running.size;
      const settled = this.#settle(outcome, work).then(() => {
        this.#settling.delete(settled);
      });
      this.#settling.add(settled);
      this.#schedulePump();
    })();
  }

  /** Renews at half the remaining lease; aborts the handler when the lease ends. */
  #scheduleLease(running: Running): void {
    clearTimeout(running.renewTimer);
    clearTimeout(running.endTimer);
    const remaining = running.leaseExpiresAt - Date.now();
    running.endTimer = setTimeout(() => running.controller.abort(new Error("the lease ended")), Math.max(0, remaining));
    running.renewTimer = setTimeout(
      () => {
        void this.#settle("renew", running.work).then((ok) => {
          if (!ok) running.controller.abort(new Error("the lease was lost"));
        });
      },
      Math.max(0, remaining / 2),
    );
  }

  /** Queues an ack, nack or renewal; the queues are flushed together as batch calls. */
  #settle(kind: Settlement, work: Work): Promise<boolean> {
    return new Promise((resolve) => {
      this.#pending[kind].push({ work, done: resolve });
      // An ack goes with the claim for the slot it freed, if one can go out in the next turn (see #pump); the rest with their batch calls.
      if (kind === "ack" && !this.#stopping.signal.aborted) this.#schedulePump();
      else this.#scheduleFlush();
    });
  }

  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => void this.#flush());
  }

  async #flush(): Promise<void> {
    this.#flushScheduled = false;
    const { client, lane, group } = this.#options;
    await Promise.all(
      (["ack", "nack", "renew"] as const).map(async (kind) => {
        const items = this.#pending[kind].splice(0);
        for (let i = 0; i < items.length; i += MAX_BATCH) {
          const chunk = items.slice(i, i + MAX_BATCH);
          const receipts = chunk.map(({ work }) => ({ sequence: work.record!.sequence, receipt: work.receipt }));
          try {
            const results =
              kind === "ack"
                ? (await client.ackBatch({ lane, group, receipts })).results
                : kind === "nack"
                  ? (await client.nackBatch({ lane, group, receipts })).results
                  : (await client.renewBatch({ lane, group, receipts })).results;
            this.#settled(kind, chunk, results);
          } catch (error) {
            // The lease runs out and the work is redelivered: at least once.
            this.#options.onError?.(error);
            for (const entry of chunk) entry.done(false);
          }
        }
      }),
    );
  }

  /** Applies a batch's results (one per entry, in order) to the stats, the leases and the waiting settlements. */
  #settled(kind: Settlement, chunk: readonly { work: Work; done: (ok: boolean) => void }[], results: readonly (AckResult | NackResult | RenewResult)[]): void {
    chunk.forEach((entry, j) => {
      const outcome = results[j]?.outcome;
      const ok = outcome !== undefined && outcome.case !== undefined && outcome.case !== "error";
      if (kind === "ack" && ok) this.stats.acked += 1;
      if (kind === "nack" && ok) this.stats.nacked += 1;
      if (kind === "renew" && outcome?.case === "renewed") {
        const running = [...this.#running].find((r) => r.work === entry.work);
        if (running) {
          running.leaseExpiresAt = timestampMs(outcome.value.leaseExpiresAt!);
          this.#scheduleLease(running);
        }
      }
      if (!ok) this.#options.onError?.(new Error(`${kind} of sequence ${entry.work.record!.sequence} failed: ${outcome?.case === "error" ? outcome.value.reason : "no result"}`));
      entry.done(ok);
    });
  }
}

/** The most receipts of one batch call (AckBatch, NackBatch, RenewBatch, ClaimBatch's acks). */
const MAX_BATCH = 64;
/**
 * Claims in flight at once. With two, the group's next claim is being
 * served while the handlers run what the last one leased (each claims at
 * most batchSize of the slots that are free, so no lease waits for a slot).
 */
const CLAIMS_IN_FLIGHT = 2;

/** Waits `ms`, or until `signal` aborts; the abort listener never outlives the wait. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
