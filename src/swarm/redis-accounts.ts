/**
 * Members' Redis passwords, when the hive has a Redis URL
 * (`LANEWAY_HIVE_REDIS_URL`, an account allowed to run `ACL SETUSER`).
 *
 * Each member is a real Redis ACL user, `member-<id>`, so its password can
 * be rotated and revoked on its own: an invite creates the user, every
 * join and refresh replaces its password (`ACL SETUSER … reset`, so the
 * previous password stops authenticating at once), and retiring the
 * member deletes the user (Redis closes its connections). The user may
 * run every command outside the `@admin` and `@dangerous` categories on
 * every key and channel: the hive shares its Redis, and the ACL user is
 * there to make each member's password its own.
 *
 * Failures are `swarm_unavailable` with a fixed message: ioredis errors
 * carry the host and port.
 */
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import type { Secret } from "../config/index.js";
import { SwarmError } from "../swarm-bus/index.js";

/** The variable holding the hub's Redis URL (a secret: it carries the admin password). */
export const REDIS_URL_ENV = "LANEWAY_HIVE_REDIS_URL";

/** The ACL rules every member user gets after its password. */
export const MEMBER_REDIS_RULES = Object.freeze(["~*", "&*", "+@all", "-@admin", "-@dangerous"]);

export class RedisAccounts {
  readonly #client: Redis;
  readonly #base: URL;

  private constructor(url: URL) {
    this.#base = url;
    this.#client = new Redis(url.toString(), {
      lazyConnect: true,
      enableReadyCheck: false,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: 3_000,
      commandTimeout: 5_000,
      retryStrategy: (times) => Math.min(100 * times, 2_000),
    });
    // Without a listener ioredis prints its errors (with the address) to the console.
    this.#client.on("error", () => {});
  }

  /** Checks the URL (redis:// or rediss://) and prepares a client; it connects on first use. */
  static open(url: Secret): RedisAccounts {
    let parsed: URL;
    try {
      parsed = new URL(url.reveal());
    } catch {
      throw new SwarmError("swarm_invalid", `${REDIS_URL_ENV} must be a redis:// or rediss:// URL`);
    }
    if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
      throw new SwarmError("swarm_invalid", `${REDIS_URL_ENV} must be a redis:// or rediss:// URL`);
    }
    return new RedisAccounts(parsed);
  }

  /** The ACL user name of a member. */
  static userOf(memberId: string): string {
    return `member-${memberId}`;
  }

  /** A new random password. */
  static newPassword(): string {
    return randomBytes(32).toString("base64url");
  }

  /** The URL a member connects with: the hub's address, the member's user and password. */
  memberUrl(memberId: string, password: string): string {
    const url = new URL(this.#base.toString());
    url.username = RedisAccounts.userOf(memberId);
    url.password = password;
    url.search = "";
    return url.toString();
  }

  /** Creates the member's user or replaces its password and rules; the old password stops working. */
  async setPassword(memberId: string, password: string): Promise<void> {
    await this.#run(() => this.#client.call("ACL", "SETUSER", RedisAccounts.userOf(memberId), "reset", "on", `>${password}`, ...MEMBER_REDIS_RULES));
  }

  /** Deletes the member's user (and closes its connections); false when it did not exist. */
  async deleteUser(memberId: string): Promise<boolean> {
    const deleted = await this.#run(() => this.#client.call("ACL", "DELUSER", RedisAccounts.userOf(memberId)));
    return Number(deleted) > 0;
  }

  async close(): Promise<void> {
    this.#client.disconnect();
  }

  async #run<T>(command: () => Promise<T>): Promise<T> {
    try {
      await this.#ready();
      return await command();
    } catch (error) {
      throw new SwarmError("swarm_unavailable", "the hive's Redis cannot be reached or refused the ACL change", { cause: error });
    }
  }

  async #ready(): Promise<void> {
    const client = this.#client;
    if (client.status === "ready") return;
    if (client.status === "wait" || client.status === "end") {
      await client.connect();
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.off("ready", onReady);
        reject(new Error("not ready"));
      }, 3_000);
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      client.once("ready", onReady);
    });
  }
}
