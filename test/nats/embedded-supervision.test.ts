import { chmod, copyFile, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConnectError } from "@connectrpc/connect";
import { afterAll, describe, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { initHive } from "../../src/swarm/index.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { eventOn, reasonOf, replayAll, type LaneClient } from "../helpers/lanes.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The embedded nats-server under `laneway serve`, killed outright: Laneway
 * says so in an error line with the exit status, starts the server again
 * on the same store and port, and serves again — the same Laneway process,
 * nothing acknowledged lost. When the server cannot be started again (its
 * binary is gone, or it fails every time), Laneway exits non-zero so that
 * its own supervisor takes over. The plain embedded mode and the hive's
 * operator mode go through the same supervisor.
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

/** Laneway's JSON log lines (stderr) so far. */
function logLines(laneway: ChildLaneway): LogLine[] {
  return laneway.stderr.flatMap((line) => {
    try {
      return [JSON.parse(line) as LogLine];
    } catch {
      return [];
    }
  });
}

async function natsPid(laneway: ChildLaneway): Promise<number> {
  return Number.parseInt((await readFile(join(laneway.dataDir, "nats", "nats-server.pid"), "utf8")).trim(), 10);
}

/** The client port of embedded server `pid`, from the ports file it wrote once listening. */
async function natsPort(dataDir: string, pid: number): Promise<number> {
  const dir = join(dataDir, "nats", "ports");
  const name = (await readdir(dir)).find((n) => n.endsWith(`_${pid}.ports`));
  if (name === undefined) throw new Error("no ports file");
  const urls = (JSON.parse(await readFile(join(dir, name), "utf8")) as { nats: string[] }).nats;
  return Number(new URL(urls[0]!).port);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function overallHealth(laneway: ChildLaneway): Promise<HealthCheckResponse_ServingStatus> {
  return (await laneway.clients.client(Health).check({ service: "" })).status;
}

/** Publishes `prefix-0`, `prefix-1`, … until stopped; retries each id until it gets an answer (publish is idempotent by id). */
function publisher(atlas: LaneClient, prefix: string, acknowledged: Map<string, bigint>, failures: Set<string>) {
  let stopping = false;
  const done = (async () => {
    for (let n = 0; !stopping; n++) {
      const id = `${prefix}-${n}`;
      for (;;) {
        try {
          const response = await atlas.publish(eventOn(id, { prefix, n }));
          acknowledged.set(id, response.record!.sequence);
          break;
        } catch (error) {
          failures.add(reasonOf(ConnectError.from(error)) ?? "none");
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      await done;
    },
  };
}

describe("the embedded nats-server killed under laneway serve", () => {
  test("is restarted on the same store and port: an error line names the exit, health serves again, the same Laneway keeps every acknowledged record", async () => {
    const laneway = await startLanewayProcess();
    cleanups.push(() => laneway.remove());
    const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
    const acknowledged = new Map<string, bigint>();
    const failures = new Set<string>();
    const publishers = ["p0", "p1", "p2", "p3"].map((prefix) => publisher(atlas, prefix, acknowledged, failures));
    await waitFor(() => acknowledged.size >= 100, { timeoutMs: 60_000, what: "publications before the kill" });

    const killed = await natsPid(laneway);
    const port = await natsPort(laneway.dataDir, killed);
    process.kill(killed, "SIGKILL");
    const exitLine = await waitFor(() => logLines(laneway).find((l) => l.msg.startsWith("the embedded nats-server exited unexpectedly")), {
      what: "the error line about the exit",
    });
    expect(exitLine).toMatchObject({ level: "error", signal: "SIGKILL", pid: killed });
    const lost = await waitFor(() => logLines(laneway).find((l) => l.msg === "NATS connection lost"), { what: "the lost connection's line" });
    expect(lost).toMatchObject({ level: "error", reason: "broker_exited" });

    await waitFor(() => logLines(laneway).some((l) => l.msg === "the embedded nats-server is running again"), { timeoutMs: 60_000, what: "the restart" });
    const restarted = await natsPid(laneway);
    expect(restarted).not.toBe(killed);
    expect(alive(restarted)).toBe(true);
    await waitFor(async () => (await overallHealth(laneway)) === HealthCheckResponse_ServingStatus.SERVING, { timeoutMs: 60_000, what: "SERVING again" });
    // The same port: the address Laneway connects to did not move.
    expect(await natsPort(laneway.dataDir, restarted)).toBe(port);

    const afterRestart = acknowledged.size;
    await waitFor(() => acknowledged.size >= afterRestart + 100, { timeoutMs: 60_000, what: "publications after the restart" });
    await Promise.all(publishers.map((p) => p.stop()));
    // While the broker was away, calls failed as unavailable (or at their deadline), never otherwise.
    expect([...failures].filter((r) => r !== "lane_unavailable" && r !== "lane_timeout")).toEqual([]);

    // Every acknowledged id is in the lane once, at its acknowledged sequence.
    const events = (await replayAll(atlas, "measurements", 0n)).events;
    const stored = new Map(events.map((e) => [e.id, e.sequence]));
    expect(stored.size).toBe(events.length);
    for (const [id, sequence] of acknowledged) expect(stored.get(id), id).toBe(sequence);

    // The same Laneway process throughout.
    expect(alive(laneway.pid)).toBe(true);
    expect(logLines(laneway).filter((l) => l.msg === "laneway serving")).toHaveLength(1);

    // The server's own log is in the data directory and holds both processes' lines.
    const serverLog = await readFile(join(laneway.dataDir, "nats", "nats-server.log"), "utf8");
    expect(serverLog).toMatch(new RegExp(`^\\[${killed}\\] .*Server is ready$`, "m"));
    expect(serverLog).toMatch(new RegExp(`^\\[${restarted}\\] .*Server is ready$`, "m"));

    // No broker address or credential in Laneway's log.
    const text = laneway.stderr.join("\n");
    expect(text).not.toContain(`127.0.0.1:${port}`);
    expect(text).not.toContain("nats://");
    const seed = (await readFile(join(laneway.dataDir, "nats", "laneway-service.nk"), "utf8")).trim();
    expect(text).not.toContain(seed);

    // A graceful stop afterwards restarts nothing and exits 0.
    const exit = await laneway.kill("SIGTERM");
    expect(exit.code, text).toBe(0);
    expect(logLines(laneway).filter((l) => l.msg.startsWith("the embedded nats-server exited unexpectedly"))).toHaveLength(1);
    expect(alive(restarted)).toBe(false);
  }, 180_000);

  /** A copy of nats-server in a folder the test owns, so that it can be taken away. */
  async function ownBinary(): Promise<{ dir: string; path: string }> {
    const dir = await mkdtemp(join(tmpdir(), "laneway-nats-bin-"));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const path = join(dir, "nats-server");
    await copyFile("/usr/sbin/nats-server", path);
    await chmod(path, 0o755);
    return { dir, path };
  }

  /** Kills the server and waits for Laneway to give up: the whole series of attempts (about 15 s of backoff and five starts). */
  async function expectGivesUp(laneway: ChildLaneway, killed: number): Promise<void> {
    process.kill(killed, "SIGKILL");
    const exit = await laneway.exited;
    const lines = logLines(laneway);
    expect(exit.code, laneway.stderr.join("\n")).toBe(1);
    expect(lines.find((l) => l.msg.startsWith("the embedded nats-server exited unexpectedly"))).toMatchObject({ level: "error", signal: "SIGKILL" });
    const attempts = lines.filter((l) => l.msg === "the embedded nats-server could not be restarted");
    expect(attempts.map((l) => l.attempt)).toEqual([1, 2, 3, 4, 5]);
    expect(lines.find((l) => l.msg.startsWith("the embedded nats-server cannot be restarted"))).toMatchObject({ level: "error", attempts: 5 });
    expect(lines.find((l) => l.msg === "shutting down")).toMatchObject({ reason: "fatal" });
  }

  test("whose binary is gone ends Laneway with exit code 1 after bounded attempts", async () => {
    const binary = await ownBinary();
    const laneway = await startLanewayProcess({ env: { LANEWAY_NATS_SERVER_BIN: binary.path } });
    cleanups.push(() => laneway.remove());
    const killed = await natsPid(laneway);
    await rm(binary.path);
    await expectGivesUp(laneway, killed);
    const attempts = logLines(laneway).filter((l) => l.msg === "the embedded nats-server could not be restarted");
    expect(new Set(attempts.map((l) => l.error))).toEqual(new Set(["NatsServerNotInstalledError"]));
  }, 180_000);

  test("that fails at every start ends Laneway with exit code 1 after bounded attempts", async () => {
    const binary = await ownBinary();
    const laneway = await startLanewayProcess({ env: { LANEWAY_NATS_SERVER_BIN: binary.path } });
    cleanups.push(() => laneway.remove());
    const killed = await natsPid(laneway);
    // Replaced by a server that accepts its configuration and dies on start.
    await rm(binary.path);
    await writeFile(binary.path, '#!/bin/sh\ncase "$1" in -t|--version) exit 0;; esac\necho "broken nats-server" >&2\nexit 3\n', { mode: 0o755 });
    await expectGivesUp(laneway, killed);
    const attempts = logLines(laneway).filter((l) => l.msg === "the embedded nats-server could not be restarted");
    expect(new Set(attempts.map((l) => l.error))).toEqual(new Set(["EmbeddedServerExitedError"]));
    // The failed starts' own output is not in Laneway's log.
    expect(laneway.stderr.join("\n")).not.toContain("broken nats-server");
  }, 180_000);

  test("in the hive's operator mode is restarted the same way, and lanes and the hub serve again", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "laneway-supervised-hive-"));
    cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
    await initHive(dataDir, { natsListen: "127.0.0.1:0" });
    const laneway = await startLanewayProcess({ dataDir });
    cleanups.push(() => laneway.remove());
    const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
    await atlas.publish(eventOn("before-the-kill", { n: 1 }));
    expect(await readFile(join(dataDir, "nats", "nats-server.conf"), "utf8")).toContain("operator:");

    const killed = await natsPid(laneway);
    const port = await natsPort(dataDir, killed);
    process.kill(killed, "SIGKILL");
    await waitFor(() => logLines(laneway).some((l) => l.msg === "the embedded nats-server is running again"), { timeoutMs: 60_000, what: "the restart" });
    await waitFor(async () => (await overallHealth(laneway)) === HealthCheckResponse_ServingStatus.SERVING, { timeoutMs: 60_000, what: "SERVING again" });
    const hubHealth = await laneway.clients.client(Health).check({ service: HiveHubService.typeName });
    expect(hubHealth.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    // Still operator mode, on the port the first start got.
    expect(await readFile(join(dataDir, "nats", "nats-server.conf"), "utf8")).toContain("operator:");
    expect(await natsPort(dataDir, await natsPid(laneway))).toBe(port);

    await waitFor(
      async () => {
        try {
          return (await atlas.publish(eventOn("after-the-kill", { n: 2 }))).record;
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 60_000, what: "a publication after the restart" },
    );
    expect((await replayAll(atlas, "measurements")).events.map((e) => e.id)).toEqual(["before-the-kill", "after-the-kill"]);
    expect(alive(laneway.pid)).toBe(true);
    expect((await laneway.kill("SIGTERM")).code).toBe(0);
  }, 180_000);
});
