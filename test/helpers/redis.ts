/**
 * The one redis-server fixture: a redis-server of the test's (or
 * benchmark's) own on a free loopback port (never the machine's 6379), no
 * persistence, the default user behind a fresh password.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { freePort } from "./free-port.js";
import { waitFor } from "./wait-for.js";

/** A redis-server of the test's own. */
export interface TestRedis {
  readonly port: number;
  /** The admin URL (default user with its password). A secret. */
  readonly adminUrl: string;
  readonly adminPassword: string;
  stop(): Promise<void>;
}

export async function startRedis(): Promise<TestRedis> {
  const port = await freePort();
  const adminPassword = randomBytes(24).toString("hex");
  const child: ChildProcess = spawn(
    "/usr/bin/redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--requirepass", adminPassword, "--daemonize", "no"],
    { stdio: "ignore" },
  );
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const adminUrl = `redis://default:${adminPassword}@127.0.0.1:${port}/0`;
  await waitFor(() => redisAuthWorks(adminUrl), { timeoutMs: 30_000, what: "redis-server to accept connections" });
  return {
    port,
    adminUrl,
    adminPassword,
    async stop() {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/** Whether a Redis URL's user and password authenticate. */
export async function redisAuthWorks(url: string): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, enableReadyCheck: false, retryStrategy: () => null, maxRetriesPerRequest: 0, enableOfflineQueue: false, connectTimeout: 5_000 });
  client.on("error", () => {});
  try {
    await client.connect();
    return (await client.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

