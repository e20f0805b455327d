import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { metaBucket, reservationBucket, streamName } from "../../src/lanes/index.js";
import { laneSubjects } from "../../src/lanes/names.js";
import { runCli } from "../../src/cli/main.js";
import { collectLines, exampleLanesConfig, generateTokens, spawnLaneway, startLanewayInProcess } from "../helpers/laneway.js";
import { brokerSnapshot, withJetStream, type BrokerSnapshot } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { freePort } from "../helpers/free-port.js";

/**
 * `laneway serve` against a broker whose namespace is incompatible with
 * its lanes configuration — the same namespace with other bounds or another
 * registry, or streams and buckets that exist with another configuration —
 * exits 2 with one clear state-conflict line and leaves the broker exactly
 * as it found it (no stream or bucket created, changed or written). An
 * unreachable broker exits 1 with one line. Neither prints a raw backend
 * error, the broker's address or a token.
 */

let nats: NatsServerHandle;
let work: string;
let before: BrokerSnapshot;
const tokens = generateTokens();

interface ServeResult {
  readonly code: number | null;
  readonly stdout: string[];
  readonly stderr: string[];
}

const serveEnv = () => ({ ATLAS_LANE_TOKEN: tokens.atlas, BEACON_LANE_TOKEN: tokens.beacon, LANEWAY_ADMIN_TOKEN: tokens.admin });

async function serveArgs(name: string, config: Record<string, unknown>, natsUrl: string): Promise<string[]> {
  const dir = join(work, name);
  const path = `${dir}.lanes.json`;
  await writeFile(path, JSON.stringify(config));
  return ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir, "--nats-url", natsUrl, "--lanes-config", path];
}

/** Runs `laneway serve` as a child process until it exits (it must not start). */
async function serveProcess(name: string, config: Record<string, unknown>, natsUrl: string): Promise<ServeResult> {
  const child = spawnLaneway(await serveArgs(name, config, natsUrl), serveEnv());
  const stdout: string[] = [];
  const stderr: string[] = [];
  collectLines(child.stdout!, stdout);
  collectLines(child.stderr!, stderr);
  const code = await new Promise<number | null>((resolve) => {
    child.once("exit", (exitCode) => resolve(exitCode));
    // A process that started serving is a failure of the test: stop it.
    const timer = setInterval(() => {
      if (stdout.some((l) => l.includes(" listening on "))) child.kill("SIGKILL");
    }, 50);
    child.once("exit", () => clearInterval(timer));
  });
  // Let the pipes drain.
  await new Promise((resolve) => setImmediate(resolve));
  return { code, stdout, stderr };
}

/**
 * Runs the same `serve` command in this process (a child process spends
 * seconds loading). Its log lines go to this process's stderr: they are
 * captured by the caller (see captureStderr).
 */
async function serveInProcess(name: string, config: Record<string, unknown>, natsUrl: string): Promise<ServeResult> {
  const args = await serveArgs(name, config, natsUrl);
  const stdout: string[] = [];
  const stderr: string[] = [];
  const code = await runCli(args, {
    env: serveEnv(),
    stdout: (t) => stdout.push(...t.split("\n").filter(Boolean)),
    stderr: (t) => stderr.push(...t.split("\n").filter(Boolean)),
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

/** Runs `action` while collecting everything written to this process's stderr (the server's log lines). */
async function captureStderr<T>(action: () => Promise<T>): Promise<{ result: T; lines: string[] }> {
  const lines: string[] = [];
  const original = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    lines.push(...String(chunk).split("\n").filter(Boolean));
    return true;
  }) as typeof process.stderr.write;
  try {
    return { result: await action(), lines };
  } finally {
    process.stderr.write = original;
  }
}

/** A loopback port nothing listens on. */
function closedPort(): Promise<number> {
  return freePort();
}

/** The one line a failed start prints for people (`laneway: …`), after asserting it is the only one. */
function diagnosticLine(result: ServeResult, secrets: readonly string[]): string {
  const lines = result.stderr.filter((l) => l.startsWith("laneway: "));
  expect(lines, result.stderr.join("\n")).toHaveLength(1);
  const all = [...result.stdout, ...result.stderr].join("\n");
  for (const secret of secrets) expect(all).not.toContain(secret);
  // No raw backend error text.
  expect(all).not.toMatch(/err_code|JetStreamApiError|stream name already in use|\b100\d\d\b|ECONNREFUSED|nats:\/\//);
  return lines[0]!;
}

const registryChange = () => {
  const config = exampleLanesConfig();
  (config.lanes as { publishers: string[] }[])[0]!.publishers = ["atlas"];
  return config;
};
const addedLane = () => {
  const config = exampleLanesConfig();
  (config.lanes as unknown[]).push({ id: "extra", owner: "beacon", publishers: ["beacon"], subscribers: ["beacon"] });
  return config;
};

/** Each conflicting start: the configuration, and what its line must name. */
const conflicts: { name: string; config: () => Record<string, unknown>; names: RegExp }[] = [
  { name: "other bounds (max_payload)", config: () => exampleLanesConfig({ max_payload: 2048 }), names: /stream of lane measurements exists with a different configuration \(max_msg_size\)/ },
  { name: "other bounds (retention)", config: () => exampleLanesConfig({ retention: "24h" }), names: /stream of lane measurements exists with a different configuration \(max_age/ },
  { name: "other bounds (max_pending, not a stream setting)", config: () => exampleLanesConfig({ max_pending: 8 }), names: /namespace commons already holds a different generation/ },
  { name: "another registry (a publisher removed)", config: registryChange, names: /namespace commons already holds a different generation/ },
  { name: "another registry (a lane added)", config: addedLane, names: /namespace commons already holds a different generation/ },
  { name: "a pre-existing lane stream with another configuration", config: () => exampleLanesConfig({ namespace: "foreign-stream" }), names: /stream of lane measurements exists with a different configuration \([^)]*max_msgs/ },
  { name: "a pre-existing reservation bucket with another configuration", config: () => exampleLanesConfig({ namespace: "foreign-bucket" }), names: /publish reservation bucket exists with a different configuration \(history/ },
];
const results = new Map<string, ServeResult>();
let unreachable: ServeResult;
/** Log lines the in-process attempts wrote. */
let logLines: string[] = [];
let unreachablePort: number;

beforeAll(async () => {
  nats = await startNatsServer();
  work = await mkdtemp(join(tmpdir(), "laneway-lanes-startup-"));
  // The namespace `commons` as a first Laneway created it, with records in it.
  const first = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig(), tokens });
  const { LaneService } = await import("../../gen/laneway/lane/v1/lane_service_pb.js");
  const { eventOn } = await import("../helpers/lanes.js");
  await first.clients.client(LaneService, { token: tokens.atlas }).publish(eventOn("kept", { n: 1 }));
  await first.stop();
  // State another writer left: a lane stream and a reservation bucket under
  // the names Laneway would use, with other settings.
  await withJetStream(nats.url, async (jsm) => {
    await jsm.streams.add({
      name: streamName("foreign-stream", "measurements"),
      subjects: [laneSubjects("foreign-stream", "measurements")],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_msgs: 5,
    });
    await jsm.streams.add({
      name: `KV_${reservationBucket("foreign-bucket")}`,
      subjects: [`$KV.${reservationBucket("foreign-bucket")}.>`],
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_msgs_per_subject: 5,
      allow_rollup_hdrs: true,
      deny_delete: true,
    });
  });
  before = await brokerSnapshot(nats.url);
  unreachablePort = await closedPort();

  // Every start attempt at once: none of them may change anything. The
  // first runs as a real child process; the others run the same command in
  // this process, with the log lines it writes captured.
  const captured = await captureStderr(() =>
    Promise.all([
      ...conflicts.map(async ({ name, config }, i) =>
        results.set(name, await (i === 0 ? serveProcess : serveInProcess)(`conflict-${i}`, config(), nats.url)),
      ),
      (async () => {
        unreachable = await serveInProcess("unreachable", exampleLanesConfig(), `nats://127.0.0.1:${unreachablePort}`);
      })(),
    ]),
  );
  logLines = captured.lines;
}, 180_000);

afterAll(async () => {
  await nats?.remove();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("an incompatible existing namespace", () => {
  test.each(conflicts)("$name: laneway serve exits 2 with one state-conflict line", ({ name, names }) => {
    const result = results.get(name)!;
    expect(result.code, result.stderr.join("\n")).toBe(2);
    const line = diagnosticLine(result, [tokens.atlas, tokens.beacon, tokens.admin, `${nats.port}`, "127.0.0.1"]);
    expect(line).toMatch(/^laneway: lanes: /);
    expect(line).toMatch(names);
    expect(result.stdout.some((l) => l.includes("listening"))).toBe(false);
  });

  test("the log lines of the failed starts name no address, token or raw backend error", () => {
    expect(logLines.length).toBeGreaterThan(0);
    const text = logLines.join("\n");
    for (const secret of [tokens.atlas, tokens.beacon, tokens.admin, `${nats.port}`, `${unreachablePort}`, "127.0.0.1"]) expect(text).not.toContain(secret);
    expect(text).not.toMatch(/err_code|JetStreamApiError|ECONNREFUSED|nats:\/\//);
  });

  test("the broker is left exactly as it was: no stream or bucket created, changed or written", async () => {
    const after = await brokerSnapshot(nats.url);
    expect(Object.keys(after.streams).sort()).toEqual(Object.keys(before.streams).sort());
    expect(after).toEqual(before);
    // The namespaces whose state was foreign got nothing of Laneway's.
    for (const namespace of ["foreign-stream", "foreign-bucket"]) {
      expect(after.streams[`KV_${metaBucket(namespace)}`]).toBeUndefined();
    }
    expect(after.streams[streamName("foreign-bucket", "measurements")]).toBeUndefined();
    expect(after.streams[streamName("commons", "extra")]).toBeUndefined();
    // The original namespace still holds its record.
    expect(after.streams[streamName("commons", "measurements")]?.messages).toBe(1);
  });

  test("the compatible configuration still starts on the same broker afterwards", async () => {
    const again = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig(), tokens });
    try {
      const { LaneService } = await import("../../gen/laneway/lane/v1/lane_service_pb.js");
      const page = await again.clients.client(LaneService, { token: tokens.beacon }).replay({ lane: "measurements" });
      expect(page.events.map((e) => e.id)).toEqual(["kept"]);
    } finally {
      await again.stop();
    }
  });
});

test("an unreachable broker at startup: laneway serve exits 1 with one line naming no address", () => {
  expect(unreachable.code, unreachable.stderr.join("\n")).toBe(1);
  const line = diagnosticLine(unreachable, [tokens.atlas, tokens.beacon, tokens.admin, `${unreachablePort}`, "127.0.0.1"]);
  expect(line).toMatch(/^laneway: lanes: the message broker is unavailable/);
});
