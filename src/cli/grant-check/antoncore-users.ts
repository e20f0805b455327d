/**
 * Reading the NATS users of an antoncore checkout.
 *
 * Two layouts exist:
 * - operator mode: `values.yaml` has no `accounts` block; the NATS users
 *   are listed in `users.yaml` (`users:` with each user's `name` and
 *   `permissions`, `retired:` with the users to revoke and their records);
 * - accounts mode (before operator mode): `values.yaml` defines the
 *   accounts, and the `SWARM` account lists its users (`user` and
 *   `permissions`).
 *
 * Permissions are nats-server's: `publish`/`subscribe` each a list of
 * subjects or `{allow: [...], deny: [...]}`. The files are read as
 * strict-yaml.ts reads YAML.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseStrictYaml, YamlRefusedError } from "./strict-yaml.js";

/** The files, relative to the checkout. */
export const ANTONCORE_FILES = Object.freeze({
  users: "k8s/values-overlays/agentihooks-swarm-nats/users.yaml",
  values: "k8s/values-overlays/agentihooks-swarm-nats/values.yaml",
});

/** A NATS user as antoncore defines it. */
export interface AntoncoreUser {
  readonly name: string;
  readonly publishAllow: readonly string[];
  readonly subscribeAllow: readonly string[];
  /** The `deny` lists of a `{allow, deny}` side (empty when the side is a plain list). */
  readonly publishDeny: readonly string[];
  readonly subscribeDeny: readonly string[];
  /** The file (relative to the checkout) that defines it. */
  readonly file: string;
}

export interface AntoncoreNats {
  readonly mode: "operator" | "accounts";
  readonly users: ReadonlyMap<string, AntoncoreUser>;
  /** Names listed under `retired` (operator mode). */
  readonly retired: readonly string[];
}

/** A checkout whose grants cannot be read; the message is printed as `(ValueError: …)`. */
export class GrantsUnreadableError extends Error {
  override readonly name = "ValueError";
}

/** Reads the users of a checkout. Throws {@link GrantsUnreadableError}. */
export async function readAntoncoreNats(checkout: string): Promise<AntoncoreNats> {
  const values = await readYaml(checkout, ANTONCORE_FILES.values, true);
  const accounts = findKey(values, "accounts");
  if (accounts !== undefined) {
    if (!isRecord(accounts)) throw new GrantsUnreadableError(`the accounts block of ${ANTONCORE_FILES.values} is not a mapping`);
    const swarm = accounts["SWARM"];
    if (!isRecord(swarm)) throw new GrantsUnreadableError("the values file defines no SWARM account");
    const users = new Map<string, AntoncoreUser>();
    for (const entry of asList(swarm["users"], "the SWARM account's users")) {
      const user = userOf(entry, ANTONCORE_FILES.values);
      users.set(user.name, user);
    }
    return { mode: "accounts", users, retired: [] };
  }
  const file = await readYaml(checkout, ANTONCORE_FILES.users, true);
  if (!isRecord(file)) throw new GrantsUnreadableError(`${ANTONCORE_FILES.users} is not a mapping`);
  const users = new Map<string, AntoncoreUser>();
  for (const entry of asList(file["users"] ?? [], "users")) {
    const user = userOf(entry, ANTONCORE_FILES.users);
    users.set(user.name, user);
  }
  const retired = asList(file["retired"] ?? [], "retired").map((entry) => {
    const name = isRecord(entry) ? (entry["name"] ?? entry["user"]) : entry;
    if (typeof name !== "string") throw new GrantsUnreadableError(`a retired entry of ${ANTONCORE_FILES.users} has no name`);
    return name;
  });
  return { mode: "operator", users, retired };
}

async function readYaml(checkout: string, relative: string, required: boolean): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(join(checkout, relative), "utf8");
  } catch (error) {
    if (!required) return undefined;
    throw new GrantsUnreadableError(`${relative} cannot be read (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
  try {
    return parseStrictYaml(text);
  } catch (error) {
    if (error instanceof YamlRefusedError) throw new GrantsUnreadableError(`${relative}: ${error.message}`);
    throw error;
  }
}

function userOf(entry: unknown, file: string): AntoncoreUser {
  if (!isRecord(entry)) throw new GrantsUnreadableError(`a user of ${file} is not a mapping`);
  const name = entry["name"] ?? entry["user"];
  if (typeof name !== "string") throw new GrantsUnreadableError(`a user of ${file} has no name`);
  const permissions = entry["permissions"];
  const side = (key: "publish" | "subscribe") => subjectsOf(isRecord(permissions) ? permissions[key] : undefined, `${name}'s ${key} permissions`);
  const deny = (key: "publish" | "subscribe") => {
    const value = isRecord(permissions) ? permissions[key] : undefined;
    return isRecord(value) ? subjectsOf(value["deny"], `${name}'s ${key} deny permissions`) : [];
  };
  return { name, publishAllow: side("publish"), subscribeAllow: side("subscribe"), publishDeny: deny("publish"), subscribeDeny: deny("subscribe"), file };
}

function subjectsOf(value: unknown, what: string): string[] {
  if (value === undefined || value === null) return [];
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.map((s) => subjectString(s, what));
  if (isRecord(value)) return subjectsOf(value["allow"], what);
  throw new GrantsUnreadableError(`${what} are not a list of subjects`);
}

function subjectString(value: unknown, what: string): string {
  if (typeof value !== "string") throw new GrantsUnreadableError(`${what} hold a value that is not a subject`);
  return value;
}

function asList(value: unknown, what: string): unknown[] {
  if (value === null) return [];
  if (!Array.isArray(value)) throw new GrantsUnreadableError(`${what} are not a list`);
  return value;
}

/** The value of the first `key` found depth-first in a document. */
function findKey(value: unknown, key: string): unknown {
  if (Array.isArray(value)) {
    for (const item of value) {
      const found = findKey(item, key);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (!isRecord(value)) return undefined;
  if (Object.hasOwn(value, key)) return value[key];
  for (const child of Object.values(value)) {
    const found = findKey(child, key);
    if (found !== undefined) return found;
  }
  return undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
