import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { afterAll, expect, test } from "vitest";
import { collectLines, repoRoot } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * When the broker cuts Laneway's connection off, Laneway's log says why, as
 * a classified reason: the client here is a real process holding the same
 * pieces `laneway serve` holds (test/helpers/broker-client-process.ts),
 * stopped with SIGSTOP while the broker keeps running, and continued once
 * the broker has closed its connection.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});

interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly [field: string]: unknown;
}

async function startClient(serverConfig: Record<string, unknown>) {
  const storeDir = await mkdtemp(join(tmpdir(), "laneway-disconnect-"));
  cleanups.push(() => rm(storeDir, { recursive: true, force: true }));
  const child = spawn(process.execPath, ["--import", "tsx", join(repoRoot, "test/helpers/broker-client-process.ts")], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", BROKER_STORE_DIR: storeDir, BROKER_SERVER_CONFIG: JSON.stringify(serverConfig) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdout: string[] = [];
  collectLines(child.stdout!, stdout);
  const exited = new Promise<number | null>((resolveExit) => child.once("exit", (code) => resolveExit(code)));
  cleanups.push(async () => {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
    await exited;
  });
  const lines = (): (LogLine & { ready?: { url: string; clientId: number; serverPid: number } })[] =>
    stdout.flatMap((line) => {
      try {
        return [JSON.parse(line)];
      } catch {
        return [];
      }
    });
  const ready = (await waitFor(() => lines().find((l) => l.ready)?.ready, { timeoutMs: 60_000, what: "the client process" }))!;
  return { child, storeDir, lines, ready, exited };
}

/** Resolves once the kernel reports process `pid` stopped. */
async function stopped(pid: number): Promise<void> {
  await waitFor(async () => {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "T";
  }, { what: "the client to stop" });
}

/** Whether the server's log has a line about connection `clientId` containing `text`. */
async function serverLogSays(storeDir: string, clientId: number, text: string): Promise<boolean> {
  const log = await readFile(join(storeDir, "nats-server.log"), "utf8");
  return log.split("\n").some((line) => line.includes(` - cid:${clientId} - `) && line.includes(text));
}

test("cut off as a slow consumer: the server sends no -ERR, its log says why, and Laneway's error line names slow_consumer", async () => {
  // max_payload must not exceed max_pending.
  const client = await startClient({ max_payload: 512 * 1024, max_pending: 1_048_576 });
  client.child.kill("SIGSTOP");
  await stopped(client.child.pid!);

  const nc = await connect({ servers: client.ready.url, reconnect: false });
  try {
    const chunk = new Uint8Array(256 * 1024);
    await waitFor(
      async () => {
        for (let i = 0; i < 16; i++) nc.publish("flood.data", chunk);
        await nc.flush();
        return serverLogSays(client.storeDir, client.ready.clientId, "Slow Consumer Detected");
      },
      { timeoutMs: 120_000, what: "the server to cut the stopped client off" },
    );
  } finally {
    await nc.close();
  }
  client.child.kill("SIGCONT");

  const lost = await waitFor(() => client.lines().find((l) => l.msg === "NATS connection lost"), { timeoutMs: 60_000, what: "the lost connection's line" });
  expect(lost).toMatchObject({ level: "error", reason: "slow_consumer" });
  await waitFor(() => client.lines().some((l) => l.msg === "NATS connection is available" && l.generation === 2), { timeoutMs: 60_000, what: "the reconnect" });
  // Neither an address nor the server's own text is in the client's log.
  const text = client
    .lines()
    .filter((l) => l.ready === undefined)
    .map((l) => JSON.stringify(l))
    .join("\n");
  expect(text).not.toContain("Slow Consumer Detected");
  expect(text).not.toContain("127.0.0.1");
  client.child.kill("SIGTERM");
  expect(await client.exited).toBe(0);
}, 180_000);

test("closed as stale because Laneway stopped answering pings: the server's -ERR is classified as stale_connection", async () => {
  // The server pings every 250 ms and gives up after one unanswered ping; debug logs its decision.
  const client = await startClient({ ping_interval: "250ms", ping_max: 1, debug: true });
  client.child.kill("SIGSTOP");
  await stopped(client.child.pid!);
  await waitFor(() => serverLogSays(client.storeDir, client.ready.clientId, "Stale Client Connection"), { timeoutMs: 60_000, what: "the server to close the stale connection" });
  client.child.kill("SIGCONT");

  const lost = await waitFor(() => client.lines().find((l) => l.msg === "NATS connection lost"), { timeoutMs: 60_000, what: "the lost connection's line" });
  expect(lost).toMatchObject({ level: "error", reason: "stale_connection" });
  await waitFor(() => client.lines().some((l) => l.msg === "NATS connection is available" && l.generation === 2), { timeoutMs: 60_000, what: "the reconnect" });
  client.child.kill("SIGTERM");
  expect(await client.exited).toBe(0);
}, 180_000);

test("the embedded server killed outright: the connection's line names broker_exited beside the supervisor's exit line", async () => {
  const client = await startClient({});
  process.kill(client.ready.serverPid, "SIGKILL");
  const lost = await waitFor(() => client.lines().find((l) => l.msg === "NATS connection lost"), { timeoutMs: 60_000, what: "the lost connection's line" });
  expect(lost).toMatchObject({ level: "error", reason: "broker_exited" });
  const exited = await waitFor(() => client.lines().find((l) => l.msg?.startsWith("the embedded nats-server exited unexpectedly")), { what: "the supervisor's line" });
  expect(exited).toMatchObject({ level: "error", signal: "SIGKILL" });
  await waitFor(() => client.lines().some((l) => l.msg === "NATS connection is available" && l.generation === 2), { timeoutMs: 60_000, what: "the reconnect" });
  client.child.kill("SIGTERM");
  expect(await client.exited).toBe(0);
}, 180_000);
