/**
 * The operator's side of `laneway hive nats-trust`: the folder where each
 * service user's credential is written (`<folder>/<name>.creds`, mode
 * 0600, the folder 0700). The folder is the credential's record: what it
 * holds tells the hub which credential the operator has (its user public
 * key, never the seed), a credential missing from it is signed again, and
 * a retired user's file is deleted. antoncore's users file names OpenBao
 * records (`record: agentihooks/hub/nats-<name>`); this build reaches no
 * OpenBao, so the folder takes their place.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { SwarmError } from "../swarm-bus/index.js";
import { errnoCode, readOptionalFile, writePrivateFile } from "../files/index.js";
import { isUserPublicKey } from "./service-users.js";

/** The file of a service user's credential in the folder. */
export function serviceCredsPath(folder: string, name: string): string {
  return join(folder, `${name}.creds`);
}

/**
 * The user public key of the credential the folder holds for `name`, or
 * undefined when it holds none (or a file that is not a credential). Reads
 * the JWT's subject without verifying it: the hub compares it with what it
 * recorded, and the NATS server is the one that trusts or refuses it.
 */
export async function heldServiceKey(folder: string, name: string): Promise<string | undefined> {
  let text: string | undefined;
  try {
    text = await readOptionalFile(serviceCredsPath(folder, name));
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `a service user credential cannot be read (${errnoCode(error)})`, { cause: error });
  }
  if (text === undefined) return undefined;
  const jwt = /-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.-]+)\s*------END NATS USER JWT------/.exec(text)?.[1];
  if (jwt === undefined) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString("utf8")) as { sub?: unknown };
    return typeof claims.sub === "string" && isUserPublicKey(claims.sub) ? claims.sub : undefined;
  } catch {
    return undefined;
  }
}

/** Writes a service user's credential (mode 0600, atomically); returns its path. */
export async function saveServiceCreds(folder: string, name: string, creds: string): Promise<string> {
  const path = serviceCredsPath(folder, name);
  try {
    await writePrivateFile(path, creds);
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `a service user credential cannot be written (${errnoCode(error)})`, { cause: error });
  }
  return path;
}

/** Deletes a retired service user's credential; whether there was one. */
export async function deleteServiceCreds(folder: string, name: string): Promise<boolean> {
  const path = serviceCredsPath(folder, name);
  try {
    const existed = (await readOptionalFile(path)) !== undefined;
    await rm(path, { force: true });
    return existed;
  } catch (error) {
    throw new SwarmError("swarm_unavailable", `a service user credential cannot be deleted (${errnoCode(error)})`, { cause: error });
  }
}
