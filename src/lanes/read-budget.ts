/**
 * A byte budget for reads from the broker: a reader takes the bytes a pull
 * may deliver before it asks, and gives them back once the pull is over,
 * so that all reads on one connection together never have more than the
 * budget in flight from the broker to Laneway (nats-server cuts a
 * connection off as a slow consumer once it owes it more than its
 * `max_pending`, 64 MB by default).
 *
 * Readers are served in the order they asked, so a stream of large reads
 * cannot starve a small one, and one reader cannot hold more than its
 * pull's share. A wait ends at once when the reader's signal aborts (with
 * the signal's reason, as any broker operation does).
 */
export class ReadBudget {
  #available: number;
  readonly #queue: Waiter[] = [];

  constructor(readonly capacity: number) {
    if (!(capacity > 0)) throw new RangeError("a read budget needs a positive capacity");
    this.#available = capacity;
  }

  /** Bytes not taken now. */
  get available(): number {
    return this.#available;
  }

  /** Readers waiting for their bytes. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * Takes `bytes` (at most the whole budget) once they are free and every
   * earlier reader has been served; the grant gives them back (once).
   */
  acquire(bytes: number, signal?: AbortSignal): Promise<ReadGrant> {
    const wanted = Math.min(Math.max(1, Math.ceil(bytes)), this.capacity);
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#queue.length === 0 && this.#available >= wanted) return Promise.resolve(this.#grant(wanted));
    return new Promise<ReadGrant>((resolve, reject) => {
      const waiter: Waiter = {
        bytes: wanted,
        grant: (grant) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(grant);
        },
      };
      const onAbort = () => {
        const at = this.#queue.indexOf(waiter);
        if (at >= 0) this.#queue.splice(at, 1);
        // The next reader may fit now that this one left the line.
        this.#serve();
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#queue.push(waiter);
    });
  }

  #grant(bytes: number): ReadGrant {
    this.#available -= bytes;
    let returned = false;
    return {
      bytes,
      release: () => {
        if (returned) return;
        returned = true;
        this.#available += bytes;
        this.#serve();
      },
    };
  }

  #serve(): void {
    while (this.#queue.length > 0 && this.#available >= this.#queue[0]!.bytes) {
      const waiter = this.#queue.shift()!;
      waiter.grant(this.#grant(waiter.bytes));
    }
  }
}

/** Bytes taken from a ReadBudget. */
export interface ReadGrant {
  readonly bytes: number;
  /** Gives the bytes back; later calls do nothing. */
  release(): void;
}

interface Waiter {
  readonly bytes: number;
  readonly grant: (grant: ReadGrant) => void;
}
