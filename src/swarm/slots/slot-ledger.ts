/**
 * Account-slot accounting, across every swarm of the hive: the records in
 * the hub's two buckets and the rules that change them.
 *
 * The model:
 * - The hub has slot **accounts** (slot-policy.ts), each with a fixed
 *   number of slots. Slot `<account>.<index>` is one key of
 *   `account-slots`; its value says who holds it (hive, swarm, holder),
 *   until when (the lease), and its **generation**, which grows with every
 *   take. A slot is free when its key is absent or marked free, or when its
 *   lease ended: an expired slot is reclaimable by the next take.
 * - Each hive has one key of `hive-slot-accounts`: the slots it holds in
 *   every swarm (and its takes in progress), which is what bounds a hive to
 *   `maxPerHive` slots at once.
 *
 * `account-slots` is the authority: a slot belongs to whoever's
 * compare-and-set on its key succeeded. The hive record is written around
 * it — a take first adds a pending entry (counted against the hive's
 * bound), then claims a slot, then replaces the pending entry with the slot
 * (or removes it when no slot was free). Every entry carries the lease's
 * end, so a hub that dies between two writes leaves nothing that outlives
 * the lease: a pending entry or a stale slot entry simply expires.
 *
 * Operations:
 * - take: the requested account, or the accounts the hive already holds
 *   slots on first and then the others in configured order; within an
 *   account the lowest free index. Answers `slot_exhausted` when no slot is
 *   free or the hive holds its bound.
 * - renew: extends a live lease of the hive's own tenure (same generation);
 *   `slot_lost` once the lease ended, or the slot was returned or retaken.
 * - return: frees the hive's own tenure (also after its lease ended, while
 *   nobody took the slot again); returning a tenure the hive no longer
 *   holds changes nothing and answers `returned: false`.
 * - list: the hive's live slots.
 */
import { randomBytes } from "node:crypto";
import type { SlotPolicy } from "./slot-policy.js";
import { SlotError, type AccountSlot } from "../../swarm-bus/index.js";
import { formatSlotId, type SlotId } from "../../swarm-bus/internal.js";
import type { SlotStore, Stored } from "./slot-store.js";

/** A slot key's value in `account-slots`. */
export type SlotRecord =
  | {
      readonly v: 1;
      readonly state: "held";
      readonly account: string;
      readonly index: number;
      readonly generation: number;
      readonly hive: string;
      readonly swarm: string;
      readonly holder?: string;
      /** Unix milliseconds. */
      readonly takenAt: number;
      readonly expiresAt: number;
    }
  | { readonly v: 1; readonly state: "free"; readonly account: string; readonly index: number; readonly generation: number; readonly freedAt: number };

/** One entry of a hive's record: a slot it holds, or a take in progress. */
export type HiveSlotEntry =
  | { readonly kind: "held"; readonly slot: string; readonly account: string; readonly swarm: string; readonly expiresAt: number }
  | { readonly kind: "pending"; readonly take: string; readonly expiresAt: number };

/** A hive's key in `hive-slot-accounts`. */
export interface HiveSlotAccount {
  readonly v: 1;
  readonly hive: string;
  readonly entries: readonly HiveSlotEntry[];
}

/** How often a compare-and-set loop on one key retries before answering `slot_unavailable`. */
const MAX_CAS_ATTEMPTS = 32;

export interface SlotLedgerOptions {
  readonly store: SlotStore;
  readonly policy: SlotPolicy;
  /** Unix milliseconds. */
  readonly clock?: () => number;
}

export class SlotLedger {
  readonly #store: SlotStore;
  readonly #policy: SlotPolicy;
  readonly #clock: () => number;

  constructor(options: SlotLedgerOptions) {
    this.#store = options.store;
    this.#policy = options.policy;
    this.#clock = options.clock ?? Date.now;
  }

  async take(request: { hive: string; swarm: string; account: string | undefined; leaseSeconds: number; holder: string | undefined }): Promise<AccountSlot> {
    if (request.account !== undefined && !this.#policy.accounts.has(request.account)) {
      throw new SlotError("slot_invalid", `the hub has no slot account ${request.account}`);
    }
    const takeId = randomBytes(8).toString("hex");
    const leaseMs = request.leaseSeconds * 1000;
    // 1. A pending entry, counted against the hive's bound.
    const held = await this.#updateHive(request.hive, (account, now) => {
      const live = liveEntries(account, now);
      if (this.#policy.maxPerHive !== undefined && live.length >= this.#policy.maxPerHive) {
        throw new SlotError("slot_exhausted", `hive ${request.hive} holds ${live.length} slots, the most one hive may hold at once`);
      }
      return [...live, { kind: "pending", take: takeId, expiresAt: now + leaseMs }];
    });
    // 2. A slot, decided by the compare-and-set of its key.
    let record: Extract<SlotRecord, { state: "held" }> | undefined;
    try {
      record = await this.#claimSlot(request, this.#accountOrder(request.account, held), leaseMs);
    } finally {
      // 3. The pending entry becomes the slot, or goes.
      await this.#updateHive(request.hive, (account, now) => {
        const others = liveEntries(account, now).filter((e) => !(e.kind === "pending" && e.take === takeId));
        return record === undefined ? others : [...others, heldEntry(record)];
      }).catch(() => {
        // The slot key is the authority: a pending entry left behind counts
        // against the hive only until the lease it was written with ends.
      });
    }
    if (record === undefined) {
      const where = request.account === undefined ? "any slot account" : `slot account ${request.account}`;
      throw new SlotError("slot_exhausted", `no slot is free on ${where}`);
    }
    return slotView(record);
  }

  async renew(request: { hive: string; slot: SlotId; leaseSeconds: number }): Promise<AccountSlot> {
    const key = slotKey(request.slot.account, request.slot.index);
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      const stored = await this.#store.get<SlotRecord>("account-slots", key);
      const now = this.#clock();
      const current = stored?.value;
      if (current?.state !== "held" || current.hive !== request.hive || current.generation !== request.slot.generation) {
        throw new SlotError("slot_lost", `hive ${request.hive} no longer holds slot ${formatSlotId(request.slot)}`);
      }
      if (current.expiresAt <= now) throw new SlotError("slot_lost", `the lease of slot ${formatSlotId(request.slot)} ended; take a slot again`);
      const next = { ...current, expiresAt: now + request.leaseSeconds * 1000 };
      if ((await this.#store.put("account-slots", key, next, stored!.revision)) === "conflict") continue;
      await this.#updateHive(request.hive, (account, at) => [
        ...liveEntries(account, at).filter((e) => !(e.kind === "held" && e.slot === formatSlotId(request.slot))),
        heldEntry(next),
      ]).catch(() => {
        // The slot is renewed; the hive's entry is repaired by the next renewal or expires.
      });
      return slotView(next);
    }
    throw busy();
  }

  async return(request: { hive: string; slot: SlotId }): Promise<boolean> {
    const key = slotKey(request.slot.account, request.slot.index);
    const id = formatSlotId(request.slot);
    let returned = false;
    for (let attempt = 0; ; attempt++) {
      if (attempt >= MAX_CAS_ATTEMPTS) throw busy();
      const stored = await this.#store.get<SlotRecord>("account-slots", key);
      const current = stored?.value;
      if (current?.state !== "held" || current.hive !== request.hive || current.generation !== request.slot.generation) break;
      const freed: SlotRecord = { v: 1, state: "free", account: current.account, index: current.index, generation: current.generation, freedAt: this.#clock() };
      if ((await this.#store.put("account-slots", key, freed, stored!.revision)) === "conflict") continue;
      returned = true;
      break;
    }
    await this.#updateHive(request.hive, (account, now) => liveEntries(account, now).filter((e) => !(e.kind === "held" && e.slot === id))).catch(() => {
      // The slot is free; the hive's entry for it expires with its lease.
    });
    return returned;
  }

  /** The hive's live slots, each confirmed by its slot key. */
  async list(hive: string): Promise<AccountSlot[]> {
    const stored = await this.#store.get<HiveSlotAccount>("hive-slot-accounts", hive);
    const now = this.#clock();
    const slots: AccountSlot[] = [];
    for (const entry of liveEntries(stored?.value, now)) {
      if (entry.kind !== "held") continue;
      const [account, index] = entry.slot.split(".");
      const record = (await this.#store.get<SlotRecord>("account-slots", slotKey(account!, Number(index))))?.value;
      if (record?.state === "held" && record.hive === hive && formatSlotId(record) === entry.slot && record.expiresAt > now) slots.push(slotView(record));
    }
    return slots.sort((a, b) => a.id.localeCompare(b.id));
  }

  /** Accounts to try: the requested one; else those the hive holds slots on, then the rest in configured order. */
  #accountOrder(requested: string | undefined, hive: HiveSlotAccount): string[] {
    if (requested !== undefined) return [requested];
    const configured = [...this.#policy.accounts.keys()];
    const used = new Set(hive.entries.flatMap((e) => (e.kind === "held" ? [e.account] : [])));
    return [...configured.filter((a) => used.has(a)), ...configured.filter((a) => !used.has(a))];
  }

  /** Claims the lowest free slot of the first account that has one; undefined when none is free. */
  async #claimSlot(
    request: { hive: string; swarm: string; holder: string | undefined },
    accounts: readonly string[],
    leaseMs: number,
  ): Promise<Extract<SlotRecord, { state: "held" }> | undefined> {
    for (const account of accounts) {
      const size = this.#policy.accounts.get(account) ?? 0;
      for (let index = 0; index < size; index++) {
        const key = slotKey(account, index);
        for (let attempt = 0; ; attempt++) {
          if (attempt >= MAX_CAS_ATTEMPTS) throw busy();
          const stored: Stored<SlotRecord> | undefined = await this.#store.get<SlotRecord>("account-slots", key);
          const now = this.#clock();
          const current = stored?.value;
          if (current?.state === "held" && current.expiresAt > now) break; // held: the next index
          const record = {
            v: 1 as const,
            state: "held" as const,
            account,
            index,
            generation: (current?.generation ?? 0) + 1,
            hive: request.hive,
            swarm: request.swarm,
            ...(request.holder === undefined ? {} : { holder: request.holder }),
            takenAt: now,
            expiresAt: now + leaseMs,
          };
          const written = await this.#store.put("account-slots", key, record, stored?.revision);
          if (written !== "conflict") return record;
          // Another take (or a renewal) came first: read the slot again.
        }
      }
    }
    return undefined;
  }

  /** A compare-and-set loop on a hive's record; `change` may throw to refuse. Returns the record written. */
  async #updateHive(hive: string, change: (account: HiveSlotAccount | undefined, now: number) => HiveSlotEntry[]): Promise<HiveSlotAccount> {
    for (let attempt = 0; attempt < MAX_CAS_ATTEMPTS; attempt++) {
      const stored = await this.#store.get<HiveSlotAccount>("hive-slot-accounts", hive);
      const next: HiveSlotAccount = { v: 1, hive, entries: change(stored?.value, this.#clock()) };
      if ((await this.#store.put("hive-slot-accounts", hive, next, stored?.revision)) !== "conflict") return next;
    }
    throw busy();
  }
}

/** The key of a slot in `account-slots`: `<account>.<index>`. */
export function slotKey(account: string, index: number): string {
  return `${account}.${index}`;
}

/** A hive's entries whose lease has not ended. */
export function liveEntries(account: HiveSlotAccount | undefined, now: number): HiveSlotEntry[] {
  return (account?.entries ?? []).filter((e) => e.expiresAt > now);
}

function heldEntry(record: Extract<SlotRecord, { state: "held" }>): HiveSlotEntry {
  return { kind: "held", slot: formatSlotId(record), account: record.account, swarm: record.swarm, expiresAt: record.expiresAt };
}

function slotView(record: Extract<SlotRecord, { state: "held" }>): AccountSlot {
  return {
    id: formatSlotId(record),
    account: record.account,
    index: record.index,
    generation: record.generation,
    hive: record.hive,
    swarm: record.swarm,
    holder: record.holder,
    takenAt: new Date(record.takenAt).toISOString(),
    expiresAt: new Date(record.expiresAt).toISOString(),
  };
}

function busy(): SlotError {
  return new SlotError("slot_unavailable", "the slot buckets are busy with concurrent changes; retry");
}
