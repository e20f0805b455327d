/**
 * The version gate for replicated namespaces (src/nats/version-gate.ts),
 * and `laneway serve --replicas 3` against a real 3-node nats-server 2.9.10
 * cluster: refused with exit code 2 and one line naming the version and the
 * flag; with `--allow-unsafe-broker` it starts and logs the warning.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { checkBrokerVersion, isUnsafeForReplicas, parseServerVersion, UnsafeBrokerError } from "../../src/nats/version-gate.js";
import { exampleLanesConfig, spawnLaneway, startLanewayProcess, collectLines, generateTokens } from "../helpers/laneway.js";
import { removeAllNatsClusters, startNatsCluster, type NatsClusterHandle } from "../helpers/nats-cluster.js";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

describe("which versions the gate refuses", () => {
  it("refuses replicas above 1 before 2.9.21 and on an unreadable version; accepts later ones and a single replica", () => {
    expect(parseServerVersion("2.9.10")).toEqual({ major: 2, minor: 9, patch: 10 });
    expect(parseServerVersion("v2.10.4-RC.1")).toEqual({ major: 2, minor: 10, patch: 4 });
    expect(parseServerVersion("nonsense")).toBeUndefined();
    for (const unsafe of ["2.9.10", "2.9.20", "2.8.4", "1.9.99", undefined, "garbage"]) expect(isUnsafeForReplicas(unsafe)).toBe(true);
    for (const safe of ["2.9.21", "2.9.25", "2.10.0", "2.10.22", "2.11.0-beta.1", "3.0.0"]) expect(isUnsafeForReplicas(safe)).toBe(false);

    const warnings: string[] = [];
    const log = { warn: (message: string) => warnings.push(message) };
    expect(() => checkBrokerVersion("2.9.10", { replicas: 3, allowUnsafe: false, log })).toThrow(UnsafeBrokerError);
    checkBrokerVersion("2.9.10", { replicas: 1, allowUnsafe: false, log });
    checkBrokerVersion("2.10.4", { replicas: 3, allowUnsafe: false, log });
    expect(warnings).toEqual([]);
    checkBrokerVersion("2.9.10", { replicas: 3, allowUnsafe: true, log });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("--allow-unsafe-broker");
  });

  it("says in one line which version it found and which flag overrides it", () => {
    const message = new UnsafeBrokerError("2.9.10", 3).message;
    expect(message).not.toContain("\n");
    expect(message).toContain("nats-server 2.9.10");
    expect(message).toContain("--allow-unsafe-broker");
    expect(message).toContain("2.9.21");
  });
});

describe("laneway serve --replicas 3 on a nats-server 2.9.10 cluster", () => {
  let cluster: NatsClusterHandle;
  beforeAll(async () => {
    cluster = await startNatsCluster();
  }, 120_000);
  afterAll(async () => {
    await removeAllNatsClusters();
  }, 60_000);

  it("exits 2 with one line naming the version and --allow-unsafe-broker", async () => {
    const version = cluster.nodes[0]!.server.serverVersion ?? "";
    const dataDir = await mkdtemp(join(tmpdir(), "laneway-gate-"));
    try {
      const tokens = generateTokens();
      const config = join(dataDir, "lanes.json");
      await writeFile(config, JSON.stringify(exampleLanesConfig()));
      const child = spawnLaneway(
        ["serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--nats-url", cluster.urls.join(","), "--replicas", "3", "--lanes-config", config],
        { ATLAS_LANE_TOKEN: tokens.atlas, BEACON_LANE_TOKEN: tokens.beacon },
      );
      const stderr: string[] = [];
      collectLines(child.stderr!, stderr);
      const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
      expect(code).toBe(2);
      const lines = stderr.filter((l) => l.startsWith("laneway: "));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`nats-server ${version}`);
      expect(lines[0]).toContain("--allow-unsafe-broker");
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it("starts with --allow-unsafe-broker and logs the warning", async () => {
    const laneway = await startLanewayProcess({ natsUrl: cluster.urls.join(","), args: ["--replicas", "3", "--allow-unsafe-broker"] });
    try {
      const all = [...laneway.stdout, ...laneway.stderr];
      const warning = all.find((l) => l.includes("--allow-unsafe-broker: replicated lanes run on a nats-server with known defects"));
      expect(warning).toBeDefined();
      expect(warning).toContain("warn");
    } finally {
      await laneway.remove();
    }
  }, 90_000);
});
