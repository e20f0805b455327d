import { join } from "node:path";
import Database from "better-sqlite3";
import type { CoreSelection } from "../../config/index.js";
import { CoreStartupError } from "../../errors/core-error.js";
import type { CoreBinding } from "../core-binding.js";

/**
 * Which cores one Laneway process serves (`laneway serve --cores`), and the
 * lock that keeps the single-writer cores to one process.
 *
 * Lanes hold no process state that the broker does not hold: any number of
 * processes may serve the same namespace against one NATS server or
 * cluster (publication is fenced by its reservations, work groups by
 * compare-and-set on their ledgers). The Kmap command lane (one SQLite file
 * applied in order) and the hive hub (its signer and state in the data
 * directory) are single-writer. So a deployment runs one full instance
 * (`--cores all`, the default), which owns those, and any number of
 * lanes-only replicas (`--cores lanes`) beside it.
 *
 * A process that serves a single-writer core takes the owner lock of its
 * data directory before it opens any core, and holds it until it closes: an
 * exclusive transaction on `<data dir>/owner.lock`, a SQLite file of its
 * own (SQLite's file locks, which the operating system releases when the
 * process ends, even by SIGKILL). A second such process on the same data
 * directory stops at startup with a clear error and exit code 2, before
 * anything is opened; a lanes replica takes no lock.
 */

/**
 * The bindings a selection serves, in the order of `all`. A name that is no
 * core, or a core that does not say it may run beside another process
 * (`replicable`), is a startup error.
 */
export function selectCores(all: readonly CoreBinding[], selection: CoreSelection): readonly CoreBinding[] {
  if (selection === "all") return all;
  for (const name of selection) {
    const binding = all.find((b) => b.name === name);
    if (binding === undefined) {
      throw new CoreStartupError("server", "state_conflict", `--cores names ${name}, which is not a core of this server (${all.map((b) => b.name).join(", ")})`);
    }
    if (!binding.replicable) {
      throw new CoreStartupError("server", "state_conflict", `--cores names ${name}, which has one writer: only the full instance (--cores all) serves it`);
    }
  }
  return all.filter((binding) => selection.includes(binding.name));
}

/** The held owner lock of a data directory. */
export interface OwnerLock {
  release(): void;
}

/** The lock file inside a data directory. */
export const OWNER_LOCK_FILE = "owner.lock";

/**
 * Takes the owner lock of `dataDir` when `cores` include a single-writer
 * core; undefined when they do not (nothing to lock). Throws a
 * CoreStartupError (`state_conflict`) when another process holds it.
 */
export function takeOwnerLock(dataDir: string, cores: readonly CoreBinding[]): OwnerLock | undefined {
  const owned = cores.filter((binding) => !binding.replicable).map((binding) => binding.name);
  if (owned.length === 0) return undefined;
  let db: Database.Database;
  try {
    // timeout 0: a held lock is an answer at once, never a wait.
    db = new Database(join(dataDir, OWNER_LOCK_FILE), { timeout: 0 });
  } catch (error) {
    throw new CoreStartupError("server", "unavailable", "the owner lock of the data directory cannot be opened", { cause: error });
  }
  try {
    db.pragma("journal_mode = DELETE");
    db.exec("BEGIN EXCLUSIVE");
  } catch (error) {
    db.close();
    if (isBusy(error)) {
      throw new CoreStartupError(
        "server",
        "state_conflict",
        `another Laneway process already serves the single-writer cores (${owned.join(", ")}) of this data directory: run one full instance per data directory, and add lanes-only replicas with --cores lanes`,
        { cause: error },
      );
    }
    throw new CoreStartupError("server", "unavailable", "the owner lock of the data directory cannot be taken", { cause: error });
  }
  let held = true;
  return {
    release() {
      if (!held) return;
      held = false;
      try {
        db.exec("ROLLBACK");
      } finally {
        db.close();
      }
    },
  };
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === "SQLITE_BUSY" || code === "SQLITE_LOCKED";
}
