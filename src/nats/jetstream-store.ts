import { access, rename } from "node:fs/promises";
import { join } from "node:path";

/**
 * Moves the JetStream store of the global account (`$G`, used while the
 * embedded server admits one nkey user) to the folder of `account`, once,
 * before the server is started in operator mode with that account as
 * Laneway's own: nats-server keeps each account's streams under
 * `<store>/jetstream/<account>/`, so without the move the lanes' streams
 * and buckets would stay behind in an account nobody uses. Does nothing
 * when there is no `$G` store or the account already has one. Returns
 * whether it moved the store.
 */
export async function adoptGlobalAccountStore(storeDir: string, account: string): Promise<boolean> {
  const from = join(storeDir, "jetstream", "$G");
  const to = join(storeDir, "jetstream", account);
  if (!(await exists(from)) || (await exists(to))) return false;
  await rename(from, to);
  return true;
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}
