import { once } from "node:events";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection, ServerReflectionRequestSchema, type ServerReflectionRequest } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { EXAMPLE_LANES_CONFIG } from "../../src/lanes/index.js";
import { generateTokens, spawnLaneway, startLanewayInProcess, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * `laneway serve` as users run it: a child process with its embedded
 * nats-server, stopped by signals; and the NATS connection's health as the
 * broker goes away and comes back.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

// The specification's example lanes configuration, as a file for `--lanes-config`.
const fixtureDir = await mkdtemp(join(tmpdir(), "laneway-lifecycle-"));
const exampleLanesFile = join(fixtureDir, "lanes.json");
await writeFile(exampleLanesFile, JSON.stringify(EXAMPLE_LANES_CONFIG));
cleanups.push(() => rm(fixtureDir, { recursive: true, force: true }));

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function embeddedNatsPid(laneway: ChildLaneway): Promise<number> {
  return Number.parseInt((await readFile(`${laneway.dataDir}/nats/nats-server.pid`, "utf8")).trim(), 10);
}

async function runToExit(args: string[], env: Record<string, string>) {
  const child = spawnLaneway(args, env);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  const [code] = (await once(child, "exit")) as [number | null];
  return { code, stdout, stderr };
}

describe("laneway serve as a child process", () => {
  test("SIGTERM ends open health watches, stops the embedded nats-server and exits 0", async () => {
    const laneway = await startLanewayProcess();
    cleanups.push(() => laneway.remove());
    const natsPid = await embeddedNatsPid(laneway);
    expect(processAlive(natsPid)).toBe(true);

    const health = laneway.clients.client(Health, { protocol: "grpc" });
    const statuses: HealthCheckResponse_ServingStatus[] = [];
    const watching = (async () => {
      for await (const res of health.watch({ service: "" })) statuses.push(res.status);
    })();
    await waitFor(() => statuses.includes(HealthCheckResponse_ServingStatus.SERVING), { what: "the first health status" });

    const exit = await laneway.kill("SIGTERM");
    await watching; // the stream ended normally, not with an error
    expect(statuses.at(-1)).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    expect(exit.code).toBe(0);
    expect(processAlive(natsPid)).toBe(false);
    expect(laneway.stderr.join("\n")).toContain('"clean":true');
  });

  test("a call still open at the shutdown deadline is canceled and the exit code says so", async () => {
    const laneway = await startLanewayProcess({ args: ["--shutdown-timeout", "500ms"] });
    cleanups.push(() => laneway.remove());
    const reflection = laneway.clients.client(ServerReflection, { protocol: "grpc" });
    // A bidirectional reflection stream stays open as long as the client
    // keeps its request side open.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    async function* requests(): AsyncGenerator<ServerReflectionRequest> {
      yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
      await held;
    }
    const responses: unknown[] = [];
    const streaming = (async () => {
      for await (const res of reflection.serverReflectionInfo(requests())) responses.push(res);
    })().then(
      () => "ended normally",
      (error: unknown) => error,
    );
    await waitFor(() => responses.length === 1, { what: "the reflection answer" });

    const exit = await laneway.kill("SIGTERM");
    expect(exit.code).toBe(1);
    expect(laneway.stderr.join("\n")).toContain("in-flight calls were canceled at the shutdown deadline");
    expect(await streaming).toBeInstanceOf(ConnectError);
    release();
  });

  test("SIGKILL of Laneway does not orphan its nats-server, and a restart reuses the data directory", async () => {
    const first = await startLanewayProcess();
    cleanups.push(() => first.remove());
    const natsPid = await embeddedNatsPid(first);
    await first.kill("SIGKILL");
    await waitFor(() => !processAlive(natsPid), { what: "the orphaned nats-server to stop" });

    const second = await startLanewayProcess({ dataDir: first.dataDir, tokens: first.tokens });
    cleanups.push(() => second.remove());
    const atlas = second.clients.client(LaneService, { token: second.tokens.atlas });
    expect((await atlas.getRegistry({})).project).toBe("atlas");
    const exit = await second.kill("SIGTERM");
    expect(exit.code, second.stderr.join("\n")).toBe(0);
  });

  test("equal tokens stop startup with exit code 2 and a message that holds no token", async () => {
    const tokens = generateTokens();
    const laneway = await runToExit(["serve", "--listen", "127.0.0.1:0", "--data-dir", "/tmp/laneway-never-created", "--lanes-config", exampleLanesFile], {
      ATLAS_LANE_TOKEN: tokens.atlas,
      BEACON_LANE_TOKEN: tokens.atlas,
    });
    expect(laneway.code).toBe(2);
    expect(laneway.stderr).toBe("laneway: lanes: projects atlas and beacon have the same token; every project needs its own\n");
  });

  test("a project token equal to the operator token stops startup", async () => {
    const tokens = generateTokens();
    const laneway = await runToExit(["serve", "--listen", "127.0.0.1:0", "--lanes-config", exampleLanesFile], {
      ATLAS_LANE_TOKEN: tokens.atlas,
      BEACON_LANE_TOKEN: tokens.beacon,
      LANEWAY_ADMIN_TOKEN: tokens.beacon,
    });
    expect(laneway.code).toBe(2);
    expect(laneway.stderr).toContain("LANEWAY_ADMIN_TOKEN");
    expect(laneway.stderr).not.toContain(tokens.beacon);
  });

  test("a short project token stops startup", async () => {
    const laneway = await runToExit(["serve", "--listen", "127.0.0.1:0", "--lanes-config", exampleLanesFile], {
      ATLAS_LANE_TOKEN: "too-short",
      BEACON_LANE_TOKEN: generateTokens().beacon,
    });
    expect(laneway.code).toBe(2);
    expect(laneway.stderr).toBe("laneway: lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be 32 to 4096 bytes, got 9\n");
  });

  test("without nats-server installed, startup says in one line how to install it", async () => {
    const laneway = await runToExit(["serve", "--listen", "127.0.0.1:0", "--data-dir", "/tmp/laneway-no-nats", "--nats-server-bin", "/nonexistent/nats-server"], {});
    expect(laneway.code).not.toBe(0);
    const lines = laneway.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("apt-get install -y nats-server");
  });
});

describe("NATS connectivity in health", () => {
  let nats: NatsServerHandle;

  test("health follows an external broker going away and coming back, and Laneway reconnects by itself", async () => {
    nats = await startNatsServer();
    cleanups.push(() => nats.remove());
    const laneway = await startLanewayInProcess({ natsUrl: nats.url });
    cleanups.push(() => laneway.stop());
    const health = laneway.clients.client(Health, { protocol: "connect-binary" });
    const status = async () => (await health.check({ service: "laneway.nats" })).status;
    await waitFor(async () => (await status()) === HealthCheckResponse_ServingStatus.SERVING, { what: "the first connection" });

    await nats.kill("SIGKILL");
    await waitFor(async () => (await status()) === HealthCheckResponse_ServingStatus.NOT_SERVING, { what: "NOT_SERVING" });
    expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);

    await nats.restart();
    await waitFor(async () => (await status()) === HealthCheckResponse_ServingStatus.SERVING, { what: "SERVING again" });
    // The registry never needed the broker and kept answering throughout.
    const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
    expect((await atlas.getRegistry({})).project).toBe("atlas");
    const logText = laneway.logs.join("\n");
    expect(logText).not.toContain(String(nats.port));
  });
});
