/**
 * The hub's slot storage: the two KV buckets it owns in the hive account,
 * `account-slots` and `hive-slot-accounts` (HUB_SLOT_BUCKETS), reached
 * through the hub's own connection. No member credential grants either
 * bucket. Every write is a compare-and-set (create-if-absent, or update at
 * the revision read), so hubs answering from the same queue group, and
 * concurrent requests in one hub, are decided by JetStream and never by
 * process memory.
 */
import { StorageType } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { BrokerConnection, classifyNatsError, JetStreamErrorCode, JetStreamRejectedError } from "../../nats/index.js";
import { SlotError } from "../../swarm-bus/index.js";
import { HUB_SLOT_BUCKETS } from "../../swarm-bus/internal.js";

export type SlotBucket = (typeof HUB_SLOT_BUCKETS)[number];

/** A stored value and the revision a compare-and-set quotes. */
export interface Stored<T> {
  readonly value: T;
  readonly revision: number;
}

/** The largest value either bucket stores (a hive's slot account with many entries stays far below). */
const MAX_VALUE_BYTES = 256 * 1024;

export interface SlotStoreOptions {
  readonly broker: BrokerConnection;
  /** Replicas of both buckets (the server's `--replicas`). */
  readonly replicas?: number;
  /** Deadline of each bucket operation. */
  readonly timeoutMs?: number;
}

export class SlotStore {
  readonly #o: SlotStoreOptions;
  #handles: { generation: number; buckets: Promise<Record<SlotBucket, KV>> } | undefined;

  constructor(options: SlotStoreOptions) {
    this.#o = options;
  }

  /** Creates both buckets when they do not exist (an existing bucket is opened as it is). */
  async ensureBuckets(): Promise<void> {
    await this.#buckets();
  }

  /** The value of `key`, or undefined when it has none (never written, deleted). */
  async get<T>(bucket: SlotBucket, key: string): Promise<Stored<T> | undefined> {
    return this.#run(async (kv) => {
      const entry = await kv.get(key);
      if (entry === null || entry.operation !== "PUT") return undefined;
      return { value: entry.json<T>(), revision: entry.revision };
    }, bucket);
  }

  /**
   * Writes `value` if `key` is still at `revision` (undefined: has no value
   * yet). Returns the new revision, or `conflict` when another writer came
   * first.
   */
  async put<T>(bucket: SlotBucket, key: string, value: T, revision: number | undefined): Promise<number | "conflict"> {
    const data = new TextEncoder().encode(JSON.stringify(value));
    return this.#run(async (kv) => {
      try {
        return revision === undefined ? await kv.create(key, data) : await kv.update(key, data, revision);
      } catch (error) {
        const failure = classifyNatsError(error);
        if (failure instanceof JetStreamRejectedError && failure.code === JetStreamErrorCode.WrongLastSequence) return "conflict" as const;
        throw error;
      }
    }, bucket);
  }

  async #run<T>(work: (kv: KV) => Promise<T>, bucket: SlotBucket): Promise<T> {
    try {
      const buckets = await this.#buckets();
      return await work(buckets[bucket]);
    } catch (error) {
      if (error instanceof SlotError) throw error;
      throw new SlotError("slot_unavailable", "the hub's slot buckets cannot be reached; retry", { cause: error });
    }
  }

  /** The bucket handles of the live connection (created once per connection). */
  #buckets(): Promise<Record<SlotBucket, KV>> {
    const broker = this.#o.broker;
    const kvm = broker.kvm(); // throws while disconnected
    if (this.#handles?.generation !== broker.generation) {
      const replicas = this.#o.replicas ?? 1;
      const options = {
        history: 1,
        replicas,
        storage: StorageType.File,
        maxValueSize: MAX_VALUE_BYTES,
        // Direct gets may be answered by a follower: a replicated bucket is read from its leader.
        allow_direct: replicas === 1,
        timeout: this.#o.timeoutMs ?? 10_000,
      };
      const buckets = (async () => {
        const [slots, accounts] = await Promise.all(HUB_SLOT_BUCKETS.map((name) => kvm.create(name, options)));
        return { "account-slots": slots!, "hive-slot-accounts": accounts! } as Record<SlotBucket, KV>;
      })();
      const handles = { generation: broker.generation, buckets };
      this.#handles = handles;
      // A failed creation is retried by the next operation.
      buckets.catch(() => {
        if (this.#handles === handles) this.#handles = undefined;
      });
    }
    return this.#handles!.buckets;
  }
}
