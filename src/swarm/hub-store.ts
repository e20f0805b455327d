/**
 * The hub's storage: one store ({@link HubStore}) in front of what the hub
 * keeps and reads, so the hub's rules (hive-hub.ts) never reach a backend
 * themselves:
 *
 * - its state (hub-state.ts) in one JSON file of the hive folder,
 *   `hub-state.json` ({@link HubStateFile}), mode 0600, replaced
 *   atomically and fsync'd on every change, so a crash keeps either the
 *   state before a change or the one after it. The file holds digests of
 *   invite secrets and public keys, never a secret;
 * - the signer record (signer-store.ts), reread on every call that decides
 *   a grant, and written (member_swarms) only where Laneway may;
 * - the members' Redis ACL users (redis-accounts.ts), when the hive has
 *   Redis.
 *
 * One hub process owns the file: the hub serializes its changes.
 */
import type { Secret } from "../config/index.js";
import { errnoCode, readOptionalFile, writePrivateFile } from "../files/index.js";
import { SwarmError } from "../swarm-bus/index.js";
import { initialHubState, type HubState } from "./hub-state.js";
import { RedisAccounts } from "./redis-accounts.js";
import type { MemberSwarms, SignerRecord } from "./signer-record.js";
import type { SignerRecordStore } from "./signer-store.js";

/** The hub's state, its signer record and its members' Redis users, behind one store. */
export class HubStore {
  #state: HubState;

  private constructor(
    private readonly file: HubStateFile,
    state: HubState,
    private readonly signer: SignerRecordStore,
    private readonly redis: RedisAccounts | undefined,
  ) {
    this.#state = state;
  }

  /**
   * Loads the stored state (the initial state when the file does not
   * exist), then prepares the Redis client when the hive has a Redis URL
   * (`swarm_invalid` for one that is not redis:// or rediss://).
   */
  static async open(options: { readonly statePath: string; readonly signer: SignerRecordStore; readonly redisUrl: Secret | undefined }): Promise<HubStore> {
    const file = new HubStateFile(options.statePath);
    const state = await file.load();
    const redis = options.redisUrl === undefined ? undefined : RedisAccounts.open(options.redisUrl);
    return new HubStore(file, state, options.signer, redis);
  }

  /** The committed state. */
  get state(): HubState {
    return this.#state;
  }

  /** Stores `state` (fsync'd) and makes it the committed state; on failure the committed state is unchanged. */
  async commit(state: HubState): Promise<void> {
    await this.file.save(state);
    this.#state = state;
  }

  /** `file:` or `hub:` (never a path). */
  get signerKind(): "file" | "hub" {
    return this.signer.kind;
  }

  /** Whether Laneway may write the record's member_swarms field. */
  get signerWritable(): boolean {
    return this.signer.writable;
  }

  /** Rereads and checks the signer record (`swarm_invalid`, `swarm_unavailable`). */
  readRecord(): Promise<SignerRecord> {
    return this.signer.read();
  }

  /** Replaces member_swarms with what `change` returns from the current field (read fresh); `swarm_conflict` for a `file:` record. */
  updateMemberSwarms(change: (current: MemberSwarms | undefined) => MemberSwarms | undefined): Promise<SignerRecord> {
    return this.signer.updateMemberSwarms(change);
  }

  /** Whether the hive keeps Redis users for its members. */
  get hasRedis(): boolean {
    return this.redis !== undefined;
  }

  /** Gives the member's Redis user a new password (creating the user); its Redis URL with that password, a secret; undefined without Redis. */
  async rotateRedisPassword(memberId: string): Promise<string | undefined> {
    if (this.redis === undefined) return undefined;
    const password = RedisAccounts.newPassword();
    await this.redis.setPassword(memberId, password);
    return this.redis.memberUrl(memberId, password);
  }

  /** Deletes the member's Redis user; false without Redis or when it did not exist. */
  async deleteRedisUser(memberId: string): Promise<boolean> {
    return this.redis === undefined ? false : this.redis.deleteUser(memberId);
  }

  /** Closes the Redis connection. */
  async close(): Promise<void> {
    await this.redis?.close();
  }
}

/** The `hub-state.json` file (also read by `hive init` and the embedded broker's setup, without a hub). */
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
