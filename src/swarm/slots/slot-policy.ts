/**
 * How many account slots the hub hands out: the slot accounts with their
 * sizes (`LANEWAY_HIVE_SLOT_ACCOUNTS`), and the most slots one hive may
 * hold at once across every swarm and account
 * (`LANEWAY_HIVE_SLOTS_PER_HIVE`).
 *
 * `LANEWAY_HIVE_SLOT_ACCOUNTS` is `name:slots[,name:slots…]`, for example
 * `claude-a:2,claude-b:3`: up to 64 accounts, each an identifier with 1 to
 * 1,024 slots. Without it the hub has one account, `default`, of 8 slots.
 * Without `LANEWAY_HIVE_SLOTS_PER_HIVE` a hive may hold every slot.
 */
import { envValue, type Env } from "../../config/index.js";
import { SwarmError } from "../../swarm-bus/index.js";
import { isSlotAccountName } from "../../swarm-bus/internal.js";

export const SLOT_ACCOUNTS_ENV = "LANEWAY_HIVE_SLOT_ACCOUNTS";
export const SLOTS_PER_HIVE_ENV = "LANEWAY_HIVE_SLOTS_PER_HIVE";

export const SLOT_POLICY_LIMITS = Object.freeze({ maxAccounts: 64, maxSlotsPerAccount: 1024 });

export interface SlotPolicy {
  /** Account → its number of slots, in the order the hub offers them. */
  readonly accounts: ReadonlyMap<string, number>;
  /** The most live slots (and pending takes) one hive holds at once; undefined: no limit beyond the accounts. */
  readonly maxPerHive: number | undefined;
}

export const DEFAULT_SLOT_POLICY: SlotPolicy = Object.freeze({ accounts: new Map([["default", 8]]), maxPerHive: undefined });

/** The slot policy of the environment; throws `swarm_invalid` naming the variable. */
export function slotPolicyFromEnv(env: Env): SlotPolicy {
  const accountsText = envValue(env, SLOT_ACCOUNTS_ENV);
  const perHiveText = envValue(env, SLOTS_PER_HIVE_ENV);
  const accounts = accountsText === undefined ? DEFAULT_SLOT_POLICY.accounts : parseSlotAccounts(accountsText);
  let maxPerHive: number | undefined;
  if (perHiveText !== undefined) {
    if (!/^[1-9][0-9]{0,5}$/.test(perHiveText.trim())) throw new SwarmError("swarm_invalid", `${SLOTS_PER_HIVE_ENV} must be a whole number from 1 to 999999`);
    maxPerHive = Number(perHiveText.trim());
  }
  return { accounts, maxPerHive };
}

function parseSlotAccounts(text: string): ReadonlyMap<string, number> {
  const accounts = new Map<string, number>();
  const rule = `${SLOT_ACCOUNTS_ENV} must be name:slots[,name:slots…] with identifiers for names and 1 to ${SLOT_POLICY_LIMITS.maxSlotsPerAccount} slots each`;
  for (const part of text.split(",")) {
    const match = /^\s*([^:\s]+)\s*:\s*([0-9]{1,5})\s*$/.exec(part);
    const name = match?.[1];
    const slots = Number(match?.[2]);
    if (!name || !isSlotAccountName(name) || !Number.isInteger(slots) || slots < 1 || slots > SLOT_POLICY_LIMITS.maxSlotsPerAccount) throw new SwarmError("swarm_invalid", rule);
    if (accounts.has(name)) throw new SwarmError("swarm_invalid", `${SLOT_ACCOUNTS_ENV} names the account ${name} twice`);
    accounts.set(name, slots);
  }
  if (accounts.size > SLOT_POLICY_LIMITS.maxAccounts) throw new SwarmError("swarm_invalid", `${SLOT_ACCOUNTS_ENV} names at most ${SLOT_POLICY_LIMITS.maxAccounts} accounts`);
  return accounts;
}
