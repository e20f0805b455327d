import { chmod, copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { afterAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log/logger.js";
import {
  DEFAULT_RESTART_POLICY,
  EmbeddedServerRestartError,
  restartDelay,
  SupervisedNatsServer,
  type EmbeddedNatsServerOptions,
  type SupervisedNatsServerOptions,
} from "../../src/nats/index.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The supervisor of the embedded nats-server on its own, with real
 * nats-server processes killed by the test: how attempts are paced and
 * counted, a crash loop, a stop in the middle of a restart.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
});

interface Line {
  readonly level: string;
  readonly msg: string;
  readonly [field: string]: unknown;
}

async function supervised(options: Partial<Omit<SupervisedNatsServerOptions, "server">> & { server?: Partial<EmbeddedNatsServerOptions> } = {}) {
  const storeDir = await mkdtemp(join(tmpdir(), "laneway-supervised-"));
  cleanups.push(() => rm(storeDir, { recursive: true, force: true }));
  const lines: Line[] = [];
  const log = createLogger({ level: "debug", write: (line) => lines.push(JSON.parse(line) as Line) });
  const server = await SupervisedNatsServer.start({ server: { ...options.server, storeDir }, log, ...(options.restart ? { restart: options.restart } : {}), ...(options.refresh ? { refresh: options.refresh } : {}) });
  cleanups.push(() => server.stop());
  return { server, lines, storeDir };
}

async function killCurrent(server: SupervisedNatsServer): Promise<number> {
  const pid = server.pid;
  process.kill(pid, "SIGKILL");
  await waitFor(() => server.pid !== pid || server.state !== "running", { what: "the supervisor to notice the exit" });
  return pid;
}

describe("SupervisedNatsServer", () => {
  it("paces a series of attempts at 0, 1, 2, 4 and 8 seconds", () => {
    expect([1, 2, 3, 4, 5].map((attempt) => restartDelay(attempt))).toEqual([0, 1_000, 2_000, 4_000, 8_000]);
    expect(restartDelay(9)).toBe(DEFAULT_RESTART_POLICY.maxDelayMs);
    expect(DEFAULT_RESTART_POLICY).toMatchObject({ maxAttempts: 5, stableAfterMs: 30_000 });
  });

  it("restarts a killed server on the same port, reading fresh configuration, and keeps its URL", async () => {
    let refreshed = 0;
    const { server, lines } = await supervised({
      refresh: async () => {
        refreshed += 1;
        return { extraConfig: { server_name: `refreshed-${refreshed}` } };
      },
    });
    const { url, port } = server;
    const killed = await killCurrent(server);
    await waitFor(() => server.state === "running" && server.pid !== killed, { what: "the restart" });
    expect(server.restarts).toBe(1);
    expect(refreshed).toBe(1);
    expect(server.url).toBe(url);
    const nc = await connect({ servers: url, reconnect: false });
    try {
      expect(nc.info?.port).toBe(port);
      expect(nc.info?.server_name).toBe("refreshed-1");
    } finally {
      await nc.close();
    }
    expect(lines.find((l) => l.msg.startsWith("the embedded nats-server exited unexpectedly"))).toMatchObject({ level: "error", pid: killed, signal: "SIGKILL" });
    expect(lines.find((l) => l.msg === "the embedded nats-server is running again")).toMatchObject({ level: "info", attempt: 1 });
  });

  it("counts a server that keeps dying soon after each start as one series, and gives up when it is used up", async () => {
    const { server, lines } = await supervised({ restart: { maxAttempts: 3, initialDelayMs: 10, maxDelayMs: 40, stableAfterMs: 3_600_000 } });
    let fatal: Error | undefined;
    void server.fatal.then((error) => (fatal = error));
    // Every start succeeds, but none runs long enough to count as stable.
    for (let kill = 1; kill <= 3; kill++) {
      const killed = await killCurrent(server);
      await waitFor(() => (server.state === "running" && server.pid !== killed) || server.state === "failed", { what: `restart ${kill}` });
      expect(server.state).toBe("running");
    }
    await killCurrent(server);
    await waitFor(() => fatal, { what: "the supervisor to give up" });
    expect(fatal).toBeInstanceOf(EmbeddedServerRestartError);
    expect(server.state).toBe("failed");
    expect(lines.filter((l) => l.msg === "the embedded nats-server is running again").map((l) => l.attempt)).toEqual([1, 2, 3]);
    expect(lines.at(-1)).toMatchObject({ level: "error", attempts: 3 });
    expect(lines.at(-1)?.msg).toMatch(/^the embedded nats-server cannot be restarted/);
  });

  it("starts a new series after a server that ran stably", async () => {
    // Every run counts as stable: the series never runs out.
    const { server } = await supervised({ restart: { maxAttempts: 1, stableAfterMs: 0 } });
    for (let kill = 1; kill <= 3; kill++) {
      const killed = await killCurrent(server);
      await waitFor(() => (server.state === "running" && server.pid !== killed) || server.state === "failed", { what: `restart ${kill}` });
      expect(server.state).toBe("running");
    }
    expect(server.restarts).toBe(3);
  });

  it("stop during a restart abandons it: nothing starts again and fatal never settles", async () => {
    const binDir = await mkdtemp(join(tmpdir(), "laneway-supervised-bin-"));
    cleanups.push(() => rm(binDir, { recursive: true, force: true }));
    const binary = join(binDir, "nats-server");
    await copyFile("/usr/sbin/nats-server", binary);
    await chmod(binary, 0o755);
    const { server, lines } = await supervised({ server: { binary }, restart: { initialDelayMs: 3_600_000, maxDelayMs: 3_600_000 } });
    let fatal = false;
    void server.fatal.then(() => (fatal = true));
    await rm(binary);
    await killCurrent(server);
    // The first attempt fails at once; the second waits an hour.
    await waitFor(() => lines.some((l) => l.msg === "the embedded nats-server could not be restarted"), { what: "the first failed attempt" });
    const exit = await server.stop();
    expect(exit.forced).toBe(false);
    expect(server.state).toBe("stopped");
    expect(lines.filter((l) => l.msg === "the embedded nats-server could not be restarted")).toHaveLength(1);
    expect(fatal).toBe(false);
  });

  it("a graceful stop restarts nothing", async () => {
    const { server, lines } = await supervised();
    const pid = server.pid;
    const exit = await server.stop();
    expect(exit.forced).toBe(false);
    expect(server.pid).toBe(pid);
    expect(server.state).toBe("stopped");
    expect(lines.filter((l) => l.level === "error")).toEqual([]);
  });
});
