/**
 * The hub's storage: its state (hub-state.ts) in one JSON file of the hive
 * folder, `hub-state.json`, mode 0600, replaced atomically and fsync'd on
 * every change, so a crash keeps either the state before a change or the
 * one after it. The file holds digests of invite secrets and public keys,
 * never a secret.
 *
 * One hub process owns the file: the hub serializes its changes.
 */
import { SwarmError } from "./errors.js";
import { initialHubState, type HubState } from "./hub-state.js";
import { errnoCode, readOptionalFile, writePrivateFile } from "../files/index.js";

export class HubStateFile {
  constructor(private readonly path: string) {}

  /** The stored state; the initial state when the file does not exist. */
  async load(): Promise<HubState> {
    let text: string | undefined;
    try {
      text = await readOptionalFile(this.path);
    } catch (error) {
      throw new SwarmError("swarm_unavailable", `the hub state cannot be read (${errnoCode(error)})`, { cause: error });
    }
    if (text === undefined) return initialHubState();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new SwarmError("swarm_invalid", "the hub state (hive/hub-state.json) is not valid JSON");
    }
    if (!isHubState(parsed)) throw new SwarmError("swarm_invalid", "the hub state (hive/hub-state.json) has an unknown shape");
    return parsed;
  }

  /** Replaces the stored state. */
  async save(state: HubState): Promise<void> {
    try {
      await writePrivateFile(this.path, `${JSON.stringify(state)}\n`);
    } catch (error) {
      throw new SwarmError("swarm_unavailable", `the hub state cannot be written (${errnoCode(error)})`, { cause: error });
    }
  }
}

function isHubState(value: unknown): value is HubState {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  const isObject = (x: unknown) => typeof x === "object" && x !== null && !Array.isArray(x);
  return v["version"] === 1 && isObject(v["members"]) && isObject(v["retired"]) && isObject(v["revocations"]) && Array.isArray(v["signingKeys"]);
}
