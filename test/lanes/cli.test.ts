import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, test } from "vitest";
import { runCli } from "../../src/cli/main.js";
import { exampleLanesConfig, repoRoot, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * `laneway lanes publish` and `laneway lanes replay` against a real server:
 * the installed command once end to end (a child process, as a user runs
 * it), and the same command code in this process for the rest (each child
 * process spends seconds loading). Answers are protobuf JSON; failures are
 * one line with code and reason, exit 1, and never echo the token.
 */

const execFileAsync = promisify(execFile);
let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let work: string;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig({ namespace: "cli" }) });
  work = await mkdtemp(join(tmpdir(), "laneway-lanes-cli-"));
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
  if (work) await rm(work, { recursive: true, force: true });
});

/** Runs the command code in this process. */
async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    env: { LANEWAY_ADDRESS: laneway.url, ...env },
    stdout: (t) => (stdout += t),
    stderr: (t) => (stderr += t),
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

/** Runs the installed `laneway` command as a child process. */
async function laneCommand(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileAsync(join(repoRoot, "bin/laneway.js"), args, {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANEWAY_ADDRESS: laneway.url, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");

test("the installed command publishes an event (a child process, as a user runs it), and replay reads it", async () => {
  const publish = await laneCommand(
    ["lanes", "publish", "measurements", "--id", "reading-one", "--kind", "event", "--schema", "temperature-v1", "--payload", '{"celsius":21}'],
    { LANEWAY_TOKEN: laneway.tokens.atlas },
  );
  expect(publish).toMatchObject({ code: 0, stderr: "" });
  const answer = JSON.parse(publish.stdout);
  expect(answer.record).toMatchObject({ lane: "measurements", project: "atlas", id: "reading-one", kind: "RECORD_KIND_EVENT", schema: "temperature-v1", payload: b64('{"celsius":21}') });
  expect(answer.record.sequence).toBe("1");
  expect(answer.duplicate).toBeUndefined();

  const replay = await cli(["lanes", "replay", "measurements", "--token-env", "BEACON_LANE_TOKEN", "--protocol", "grpc"], {
    BEACON_LANE_TOKEN: laneway.tokens.beacon,
  });
  expect(replay.code).toBe(0);
  const page = JSON.parse(replay.stdout);
  expect(page.events.map((e: { id: string; project: string }) => [e.id, e.project])).toEqual([["reading-one", "atlas"]]);
  expect(page.cursor).toBe("1");
});

test("publish repeats as a duplicate, reads --payload-file and carries provenance; work records advance the replay cursor", async () => {
  const file = join(work, "summary.json");
  await writeFile(file, '{"values":[21,22]}');
  const args = ["lanes", "publish", "measurements", "--id", "summarize-one", "--kind", "work", "--schema", "summary-v1", "--payload-file", file, "--provenance", "https://sensors.example.net/atlas"];
  const first = await cli(args, { LANEWAY_TOKEN: laneway.tokens.atlas });
  expect(first.code).toBe(0);
  const record = JSON.parse(first.stdout).record;
  expect(record).toMatchObject({ kind: "RECORD_KIND_WORK", payload: b64('{"values":[21,22]}'), provenance: "https://sensors.example.net/atlas" });
  const again = await cli(args, { LANEWAY_TOKEN: laneway.tokens.atlas });
  expect(JSON.parse(again.stdout)).toEqual({ record, duplicate: true });

  const event = await cli(["lanes", "publish", "measurements", "--id", "reading-two", "--kind", "event", "--schema", "temperature-v1", "--payload", '{"celsius":22}'], {
    LANEWAY_TOKEN: laneway.tokens.beacon,
  });
  expect(JSON.parse(event.stdout).record.project).toBe("beacon");

  // From the first event's cursor: the work record is skipped, the cursor counts it.
  const page = JSON.parse((await cli(["lanes", "replay", "measurements", "--cursor", "1"], { LANEWAY_TOKEN: laneway.tokens.atlas })).stdout);
  expect(page.events.map((e: { id: string }) => e.id)).toEqual(["reading-two"]);
  expect(page).toMatchObject({ cursor: "3", lastSequence: "3", firstRetained: "1" });
  const one = JSON.parse((await cli(["lanes", "replay", "measurements", "--max-events", "1"], { LANEWAY_TOKEN: laneway.tokens.atlas })).stdout);
  expect(one.events.map((e: { id: string }) => e.id)).toEqual(["reading-one"]);
  expect(one.cursor).toBe("1");
});

test("refusals print one line with code and reason and exit 1, without the token", async () => {
  const conflict = await cli(["lanes", "publish", "measurements", "--id", "reading-one", "--kind", "event", "--schema", "temperature-v1", "--payload", '{"celsius":99}'], {
    LANEWAY_TOKEN: laneway.tokens.atlas,
  });
  expect(conflict.code).toBe(1);
  expect(conflict.stdout).toBe("");
  expect(conflict.stderr).toMatch(/^laneway: aborted \(lane_conflict\): id reading-one is already published in this lane[^\n]*\n$/);

  const cursor = await cli(["lanes", "replay", "measurements", "--cursor", "99"], { LANEWAY_TOKEN: laneway.tokens.beacon });
  expect(cursor.code).toBe(1);
  expect(cursor.stderr).toMatch(/^laneway: aborted \(lane_cursor\): [^\n]*\n$/);

  const tooBig = await cli(["lanes", "publish", "measurements", "--id", "big", "--kind", "event", "--schema", "s-v1", "--payload", "x".repeat(65_537)], {
    LANEWAY_TOKEN: laneway.tokens.atlas,
  });
  expect(tooBig.code).toBe(1);
  expect(tooBig.stderr).toMatch(/^laneway: invalid_argument \(lane_invalid\): [^\n]*65536[^\n]*\n$/);

  const forbidden = await cli(["lanes", "replay", "measurements"], { LANEWAY_TOKEN: laneway.tokens.admin });
  expect(forbidden.code).toBe(1);
  expect(forbidden.stderr).toMatch(/^laneway: permission_denied \(forbidden\): /);
  for (const result of [conflict, cursor, tooBig, forbidden]) {
    for (const token of Object.values(laneway.tokens)) expect(result.stderr).not.toContain(token);
  }
});

test("usage mistakes in publish exit 2 before any call", async () => {
  const kind = await cli(["lanes", "publish", "measurements", "--id", "x", "--kind", "job", "--schema", "s", "--payload", "{}"], { LANEWAY_TOKEN: laneway.tokens.atlas });
  expect(kind.code).toBe(2);
  expect(kind.stderr).toContain("--kind must be event or work");
  const both = await cli(["lanes", "publish", "measurements", "--id", "x", "--kind", "event", "--schema", "s", "--payload", "{}", "--payload-file", "/dev/null"], {
    LANEWAY_TOKEN: laneway.tokens.atlas,
  });
  expect(both.code).toBe(2);
  expect(both.stderr).toContain("exactly one of --payload and --payload-file");
  // Nothing was published by either.
  const page = JSON.parse((await cli(["lanes", "replay", "measurements"], { LANEWAY_TOKEN: laneway.tokens.atlas })).stdout);
  expect(page.events.map((e: { id: string }) => e.id)).not.toContain("x");
});
