import { chmod, readFile } from "node:fs/promises";
import { createUser, fromSeed } from "@nats-io/nkeys";
import { writePrivateFile } from "../files/index.js";

/**
 * The credential that lets Laneway — and only Laneway — reach its embedded
 * nats-server: a NATS user nkey. The seed (the secret half) is generated on
 * first start into the data directory with mode 0600 and reused afterwards;
 * the server's configuration holds only the public key, so nothing secret
 * is in the config file. Participants never get broker credentials.
 */
export interface ServiceCredential {
  /** The file holding the seed; Laneway's broker connection reads it. */
  readonly seedPath: string;
  /** The user's public key (`U…`), for the server's authorization block. */
  readonly publicKey: string;
}

export async function loadOrCreateServiceCredential(seedPath: string): Promise<ServiceCredential> {
  let seed: Uint8Array;
  try {
    seed = new TextEncoder().encode((await readFile(seedPath, "utf8")).trim());
    await chmod(seedPath, 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    seed = createUser().getSeed();
    await writePrivateFile(seedPath, `${new TextDecoder().decode(seed)}\n`);
  }
  return { seedPath, publicKey: fromSeed(seed).getPublicKey() };
}

/** The nats-server authorization block that admits only this credential. */
export function serviceAuthorization(credential: ServiceCredential): Record<string, unknown> {
  return { users: [{ nkey: credential.publicKey }] };
}
