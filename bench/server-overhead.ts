/**
 * Server overhead: a trivial authenticated unary RPC (LaneService.GetRegistry)
 * over Connect JSON, Connect binary and gRPC, against a raw `node:http`
 * JSON handler doing the same work (constant-time token check, the same
 * registry view as JSON), all measured in this run. Server and load
 * generator are separate processes sharing the machine's cores.
 *
 * A second baseline, bare connect-node with the same handler and none of
 * Laneway's layers (bench/bare-connect-server.ts), separates Connect's own
 * cost from Laneway's.
 *
 * Reported: requests per second (median of interleaved rounds) and the
 * ratio to the raw handler at the same concurrency.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchSeconds, median, printTable, runJson, startListening } from "./harness.js";
import { exampleLanesConfig } from "../src/lanes/index.js";

interface LoadResult {
  completed: number;
  failed: number;
  seconds: number;
}

export async function serverOverhead(): Promise<void> {
  const seconds = benchSeconds(3);
  const rounds = 3;
  const dir = await mkdtemp(join(tmpdir(), "laneway-bench-"));
  const tokens = { ATLAS_LANE_TOKEN: randomBytes(32).toString("hex"), BEACON_LANE_TOKEN: randomBytes(32).toString("hex") };
  const lanesPath = join(dir, "lanes.json");
  await writeFile(
    lanesPath,
    JSON.stringify(exampleLanesConfig({ namespace: "bench" })),
  );
  const baseline = await startListening("bench/baseline-registry-server.ts", [lanesPath], tokens);
  const bare = await startListening("bench/bare-connect-server.ts", [lanesPath], tokens);
  const bareH2 = bare.secondUrl!;
  const laneway = await startListening(
    "src/cli/main.ts",
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--lanes-config", lanesPath],
    tokens,
  );
  const path = "/laneway.lane.v1.LaneService/GetRegistry";
  const targets = [
    { name: "raw node:http JSON (baseline)", url: baseline.url, path: "/registry", protocol: "json" },
    { name: "bare connect-node Connect JSON", url: bare.url, path, protocol: "json" },
    { name: "bare connect-node gRPC (h2c)", url: bareH2, path, protocol: "grpc" },
    { name: "Laneway Connect JSON", url: laneway.url, path, protocol: "json" },
    { name: "Laneway Connect binary", url: laneway.url, path, protocol: "binary" },
    { name: "Laneway gRPC (h2c)", url: laneway.url, path, protocol: "grpc" },
  ] as const;
  const concurrencies = [1, 64];
  try {
    const results = new Map<string, number[]>();
    // Warm up every target (JIT, connection setup) before measuring.
    for (const target of targets) {
      await runJson<LoadResult>("bench/load-generator.ts", [JSON.stringify({ ...target, token: tokens.BEACON_LANE_TOKEN, concurrency: 16, seconds: 1 })]);
    }
    for (let round = 0; round < rounds; round++) {
      for (const concurrency of concurrencies) {
        for (const target of targets) {
          const result = await runJson<LoadResult>("bench/load-generator.ts", [
            JSON.stringify({ ...target, token: tokens.BEACON_LANE_TOKEN, concurrency, seconds }),
          ]);
          if (result.failed > 0) throw new Error(`${target.name}: ${result.failed} failed calls`);
          const key = `${target.name}@${concurrency}`;
          results.set(key, [...(results.get(key) ?? []), result.completed / result.seconds]);
        }
      }
    }
    console.log(`\nServer overhead: GetRegistry, ${rounds} rounds of ${seconds}s, medians (requests/s)\n`);
    const rows: string[][] = [];
    for (const concurrency of concurrencies) {
      const base = median(results.get(`${targets[0].name}@${concurrency}`)!);
      for (const target of targets) {
        const rate = median(results.get(`${target.name}@${concurrency}`)!);
        rows.push([target.name, String(concurrency), rate.toFixed(0), (rate / base).toFixed(2)]);
      }
    }
    printTable(["target", "in flight", "req/s", "ratio to baseline"], rows);
  } finally {
    await laneway.stop();
    await baseline.stop();
    await bare.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
