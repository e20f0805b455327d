import type { Subscription } from "@nats-io/transport-node";
import type { LaneStore } from "./lane-store.js";
import { laneSubjects } from "./names.js";

/**
 * One watcher per lane, shared by everyone waiting for that lane's next
 * record (followers, and waiting claimers): a single core NATS subscription
 * to the lane's subjects however many wait, instead of one broker request
 * per waiter per poll. A publication bumps the lane's version and wakes
 * every waiter, which then reads the stream itself (the notification
 * carries nothing it trusts). A waiter takes a hold on the lane before it
 * reads, so nothing published between its read and its wait is missed; it
 * also wakes after its own timeout, so a notification lost to a reconnect
 * costs at most one heartbeat. The subscription ends a few seconds after
 * the last hold is released.
 */
/** How long a lane's subscription outlives its last hold. */
const LINGER_MS = 5_000;

export class LaneWatchers {
  readonly #lanes = new Map<string, LaneWatch>();

  constructor(
    private readonly store: LaneStore,
    private readonly namespace: string,
  ) {}

  /** Starts watching a lane (or joins its watcher) until the hold is released. */
  async hold(lane: string): Promise<LaneHold> {
    let watch = this.#lanes.get(lane);
    if (watch === undefined) {
      watch = { lane, version: 0, holders: 0, wakers: new Set(), subscription: undefined, generation: -1, linger: undefined };
      this.#lanes.set(lane, watch);
    }
    watch.holders += 1;
    const current = watch;
    await this.#subscribe(current);
    let released = false;
    return {
      version: () => current.version,
      wait: (since, timeoutMs, signal) => this.#wait(current, since, timeoutMs, signal),
      release: () => {
        if (released) return;
        released = true;
        current.holders -= 1;
        if (current.holders === 0 && current.linger === undefined) {
          // Kept a little while: a claimer that takes the next hold at once (a Claim after each Ack) pays no subscribe and unsubscribe.
          current.linger = setTimeout(() => {
            current.linger = undefined;
            if (current.holders > 0) return;
            current.subscription?.unsubscribe();
            current.subscription = undefined;
            if (this.#lanes.get(lane) === current) this.#lanes.delete(lane);
          }, LINGER_MS);
          current.linger.unref();
        }
      },
    };
  }

  close(): void {
    for (const watch of this.#lanes.values()) {
      clearTimeout(watch.linger);
      watch.subscription?.unsubscribe();
      for (const wake of watch.wakers) wake();
    }
    this.#lanes.clear();
  }

  async #wait(watch: LaneWatch, since: number, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
    await this.#subscribe(watch);
    if (watch.version > since) return true;
    if (signal.aborted) return false;
    return new Promise<boolean>((resolve) => {
      const done = (woken: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        watch.wakers.delete(wake);
        resolve(woken);
      };
      const wake = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      signal.addEventListener("abort", onAbort, { once: true });
      watch.wakers.add(wake);
    });
  }

  /** Subscribes on first use and again after every reconnect. */
  async #subscribe(watch: LaneWatch): Promise<void> {
    if (watch.holders === 0) return;
    if (watch.subscription !== undefined && watch.generation === this.store.generation && !watch.subscription.isClosed()) return;
    watch.subscription?.unsubscribe();
    watch.subscription = undefined;
    let nc;
    try {
      nc = await this.store.connection();
    } catch {
      return; // not connected: the waiter's own timeout wakes it, and its read reports the broker
    }
    watch.generation = this.store.generation;
    // A reconnect may have hidden publications: wake everyone to read again.
    watch.version += 1;
    watch.subscription = nc.subscribe(laneSubjects(this.namespace, watch.lane), {
      callback: () => {
        watch.version += 1;
        for (const wake of [...watch.wakers]) wake();
      },
    });
  }
}

/** A hold on one lane's watcher. */
export interface LaneHold {
  /** The lane's version now; pass it to `wait` after reading. */
  version(): number;
  /** `true` once the version passed `since`; `false` after `timeoutMs` or when `signal` aborts. */
  wait(since: number, timeoutMs: number, signal: AbortSignal): Promise<boolean>;
  release(): void;
}

interface LaneWatch {
  readonly lane: string;
  version: number;
  holders: number;
  readonly wakers: Set<() => void>;
  subscription: Subscription | undefined;
  generation: number;
  /** Ends the subscription LINGER_MS after the last hold was released, unless another is taken. */
  linger: NodeJS.Timeout | undefined;
}
