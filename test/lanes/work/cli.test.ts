import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { DeliveryState, LaneService, RecordKind } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { runCli } from "../../../src/cli/main.js";
import { collectLines, repoRoot, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { jsonPayload, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { completionOf, deliveriesView, inspectGroup, publishWork, stateOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * `laneway lanes claim | claim-batch (with --ack) | renew | ack | nack |
 * inspect | recover | work` against a real server: the command code in this process
 * for the single calls, and the installed command as a child process for
 * `lanes work` (as a user runs it, stopped with SIGINT). Receipts come from
 * LANEWAY_RECEIPT and are never echoed in errors.
 */

const config = buildLanesConfig({
  namespace: "cli-work",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "jobs", owner: "atlas", publishers: ["atlas"], groups: { workers: ["beacon"] }, recoverers: { workers: ["beacon"] } },
    { id: "tasks", owner: "atlas", publishers: ["atlas", "beacon"], groups: { runners: ["beacon"] } },
  ],
  lease: "5s",
  retry_delay: "1h",
  max_retry_delay: "1h",
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;
let scratch: string;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
  scratch = await mkdtemp(join(tmpdir(), "laneway-work-cli-"));
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    env: { LANEWAY_ADDRESS: laneway.url, LANEWAY_TOKEN: laneway.tokens.beacon, ...env },
    stdout: (t) => (stdout += t),
    stderr: (t) => (stderr += t),
    signal: new AbortController().signal,
  });
  return { code, stdout, stderr };
}

test("claim prints the work and its receipt; ack reads the receipt from LANEWAY_RECEIPT, a repeat is a duplicate; inspect shows it acknowledged, never the receipt", async () => {
  const [record] = await publishWork(atlas, "jobs", ["cli-one"]);
  const claimed = await cli(["lanes", "claim", "jobs", "workers", "--wait", "5s"]);
  expect(claimed).toMatchObject({ code: 0, stderr: "" });
  const work = JSON.parse(claimed.stdout).work;
  expect(work.record).toMatchObject({ sequence: String(record!.sequence), id: "cli-one", kind: "RECORD_KIND_WORK", project: "atlas" });
  expect(work.attempt).toBe(1);
  expect(work.receipt).toMatch(/^[0-9a-f]{64}$/);

  const acked = await cli(["lanes", "ack", "jobs", "workers", "--sequence", work.record.sequence], { LANEWAY_RECEIPT: work.receipt });
  expect(acked.code).toBe(0);
  const first = JSON.parse(acked.stdout);
  expect(first.ackedAt).toBeDefined();
  expect(first.duplicate).toBeUndefined();
  const again = JSON.parse((await cli(["lanes", "ack", "jobs", "workers", "--sequence", work.record.sequence, "--receipt", work.receipt])).stdout);
  expect(again).toEqual({ ackedAt: first.ackedAt, duplicate: true });

  const inspected = await cli(["lanes", "inspect", "jobs", "workers"]);
  expect(inspected.code).toBe(0);
  expect(inspected.stdout).not.toContain(work.receipt);
  const group = JSON.parse(inspected.stdout).group;
  // Completed: no longer an unfinished delivery, but in the completion history.
  expect(group.deliveries).toBeUndefined();
  expect(group.completions).toEqual([{ firstAckedAt: first.ackedAt, lastAckedAt: first.ackedAt, completed: "1", ranges: [{ first: "1", last: work.record.sequence }] }]);
  expect(group.slots).toBe(1);
  // Nothing left: an empty answer.
  expect(JSON.parse((await cli(["lanes", "claim", "jobs", "workers"])).stdout)).toEqual({});
});

test("claim-batch, renew and nack from the command line; a stale receipt fails with aborted (lane_stale) without echoing it, and a missing receipt is a usage error", async () => {
  await publishWork(atlas, "jobs", ["cli-two", "cli-three"]);
  const batch = JSON.parse((await cli(["lanes", "claim-batch", "jobs", "workers", "--max", "5"])).stdout).work as { record: { sequence: string; id: string }; receipt: string }[];
  expect(batch.map((w) => w.record.id)).toEqual(["cli-two", "cli-three"]);
  const [two, three] = batch;
  const renewed = await cli(["lanes", "renew", "jobs", "workers", "--sequence", two!.record.sequence], { LANEWAY_RECEIPT: two!.receipt });
  expect(renewed.code).toBe(0);
  expect(JSON.parse(renewed.stdout).leaseExpiresAt).toBeDefined();
  const nacked = await cli(["lanes", "nack", "jobs", "workers", "--sequence", two!.record.sequence], { LANEWAY_RECEIPT: two!.receipt });
  expect(nacked.code).toBe(0);
  expect(JSON.parse(nacked.stdout)).toMatchObject({ attempt: 1 });
  // three's receipt used for two: stale.
  const stale = await cli(["lanes", "ack", "jobs", "workers", "--sequence", two!.record.sequence], { LANEWAY_RECEIPT: three!.receipt });
  expect(stale.code).toBe(1);
  expect(stale.stderr).toMatch(/^laneway: aborted \(lane_stale\): /);
  expect(stale.stderr).not.toContain(three!.receipt);
  const missing = await cli(["lanes", "ack", "jobs", "workers", "--sequence", three!.record.sequence]);
  expect(missing.code).toBe(2);
  expect(missing.stderr).toContain("LANEWAY_RECEIPT");
  expect((await cli(["lanes", "ack", "jobs", "workers", "--sequence", three!.record.sequence], { LANEWAY_RECEIPT: three!.receipt })).code).toBe(0);
  const g = await inspectGroup(beacon, "jobs", "workers");
  expect(deliveriesView(g)).toEqual([[Number(two!.record.sequence), "beacon", 1, "RETRY_SCHEDULED"]]);
  expect(completionOf(g, BigInt(three!.record.sequence))?.attempt).toBe(1);
});

test("claim-batch --ack (or LANEWAY_ACKS) completes those deliveries first, in the same call, and prints each ack's result beside the new work; a malformed entry is a usage error that echoes nothing", async () => {
  const [four, five] = await publishWork(atlas, "jobs", ["cli-four", "cli-five"]);
  const first = JSON.parse((await cli(["lanes", "claim-batch", "jobs", "workers", "--max", "1"])).stdout).work as { record: { sequence: string }; receipt: string }[];
  expect(first.map((w) => w.record.sequence)).toEqual([String(four!.sequence)]);
  const carried = await cli(["lanes", "claim-batch", "jobs", "workers", "--max", "1"], { LANEWAY_ACKS: `${first[0]!.record.sequence}:${first[0]!.receipt}` });
  expect(carried).toMatchObject({ code: 0, stderr: "" });
  const answer = JSON.parse(carried.stdout) as { work: { record: { sequence: string }; receipt: string }[]; ackResults: { acked?: { ackedAt: string } }[] };
  expect(answer.ackResults).toHaveLength(1);
  expect(answer.ackResults[0]!.acked?.ackedAt).toBeDefined();
  expect(answer.work.map((w) => w.record.sequence)).toEqual([String(five!.sequence)]);
  // Carrying an ack, the call answers at once even with nothing to lease (the longest wait, 60 s, would outlast the test).
  const last = await cli(["lanes", "claim-batch", "jobs", "workers", "--max", "1", "--wait", "60s", "--ack", `${answer.work[0]!.record.sequence}:${answer.work[0]!.receipt}`]);
  expect(last.code).toBe(0);
  expect(JSON.parse(last.stdout)).toEqual({ ackResults: [{ acked: { ackedAt: expect.any(String) } }] });
  const g = await inspectGroup(beacon, "jobs", "workers");
  expect([four!, five!].map((r) => completionOf(g, r.sequence)?.attempt)).toEqual([1, 1]);
  const malformed = await cli(["lanes", "claim-batch", "jobs", "workers", "--ack", `${five!.sequence}:${answer.work[0]!.receipt.slice(0, 40)}`]);
  expect(malformed.code).toBe(2);
  expect(malformed.stderr).toContain("SEQUENCE:RECEIPT");
  expect(malformed.stderr).not.toContain(answer.work[0]!.receipt.slice(0, 40));
});

test("recover from the command line records a recovery at the inspected revision and cursor; a wrong cursor is lane_invalid, a malformed --expired a usage error, a non-recoverer forbidden", async () => {
  const group = JSON.parse((await cli(["lanes", "inspect", "jobs", "workers"])).stdout).group;
  const wrong = await cli(["lanes", "recover", "jobs", "workers", "--id", "cli-wrong", "--revision", group.revision, "--cursor-through", String(Number(group.cursor) + 1)]);
  expect(wrong.code).toBe(1);
  expect(wrong.stderr).toMatch(/^laneway: invalid_argument \(lane_invalid\): /);
  const malformed = await cli(["lanes", "recover", "jobs", "workers", "--id", "cli-bad", "--revision", group.revision, "--cursor-through", group.cursor, "--expired", "3:not-a-receipt"]);
  expect(malformed.code).toBe(2);
  const forbidden = await cli(["lanes", "recover", "jobs", "workers", "--id", "cli-atlas", "--revision", group.revision, "--cursor-through", group.cursor], { LANEWAY_TOKEN: laneway.tokens.atlas });
  expect(forbidden.code).toBe(1);
  expect(forbidden.stderr).toMatch(/^laneway: permission_denied \(lane_forbidden\): /);
  const recovered = await cli(["lanes", "recover", "jobs", "workers", "--id", "cli-recovery", "--revision", group.revision, "--cursor-through", group.cursor]);
  expect(recovered.code).toBe(0);
  const result = JSON.parse(recovered.stdout).result;
  expect(result).toMatchObject({ id: "cli-recovery", project: "beacon", cursorThrough: group.cursor, revision: group.revision });
  // The same request again returns the stored result.
  const again = await cli(["lanes", "recover", "jobs", "workers", "--id", "cli-recovery", "--revision", group.revision, "--cursor-through", group.cursor]);
  expect(JSON.parse(again.stdout).result).toEqual(result);
});

test("`lanes work` (the installed command) runs the command per accepted record with the payload on stdin: exit 0 acks, other exits nack, unaccepted work is nacked without running, and it prints its progress", async () => {
  const marks = join(scratch, "marks");
  const records = await Promise.all([
    atlas.publish({ lane: "tasks", id: "ok-one", kind: RecordKind.WORK, schema: "job-v1", payload: jsonPayload({ result: "ok" }) }),
    atlas.publish({ lane: "tasks", id: "ok-two", kind: RecordKind.WORK, schema: "job-v1", payload: jsonPayload({ result: "ok" }) }),
    atlas.publish({ lane: "tasks", id: "fails", kind: RecordKind.WORK, schema: "job-v1", payload: jsonPayload({ result: "fail" }) }),
    beacon.publish({ lane: "tasks", id: "wrong-publisher", kind: RecordKind.WORK, schema: "job-v1", payload: jsonPayload({ result: "ok" }) }),
    atlas.publish({ lane: "tasks", id: "wrong-schema", kind: RecordKind.WORK, schema: "other-v1", payload: jsonPayload({ result: "ok" }) }),
  ]);
  const sequenceOf = new Map(records.map((r) => [r.record!.id, r.record!.sequence]));
  // The command records what it was given, and fails when the payload says so.
  const script = `mkdir -p "${marks}"; payload=$(cat); printf '%s|%s|%s|%s|%s' "$LANEWAY_WORK_SEQUENCE" "$LANEWAY_WORK_PUBLISHER" "$LANEWAY_WORK_SCHEMA" "$LANEWAY_WORK_ATTEMPT" "$payload" > "${marks}/$LANEWAY_WORK_ID"; case "$payload" in *fail*) exit 3;; esac`;
  const child = spawn(join(repoRoot, "bin/laneway.js"), ["lanes", "work", "tasks", "--group", "runners", "--accept", "job-v1:atlas", "--concurrency", "2", "--", "/bin/sh", "-c", script], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANEWAY_ADDRESS: laneway.url, LANEWAY_TOKEN: laneway.tokens.beacon },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stderr: string[] = [];
  collectLines(child.stderr, stderr);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  try {
    await waitFor(
      async () => {
        const g = await inspectGroup(beacon, "tasks", "runners");
        const state = (id: string) => stateOf(g, sequenceOf.get(id)!);
        return (
          state("ok-one") === DeliveryState.ACKED &&
          state("ok-two") === DeliveryState.ACKED &&
          ["fails", "wrong-publisher", "wrong-schema"].every((id) => state(id) === DeliveryState.RETRY_SCHEDULED)
        );
      },
      { timeoutMs: 60_000, intervalMs: 100, what: "lanes work to settle every record" },
    );
    await waitFor(() => stderr.some((l) => l === "lanes work: claimed 5, acked 2, nacked 3, in flight 0"), { timeoutMs: 30_000, what: "the progress line" });
  } finally {
    child.kill("SIGINT");
  }
  expect(await exited).toBe(0);
  expect(stderr[stderr.length - 1]).toBe("lanes work: stopped after claimed 5, acked 2, nacked 3");
  for (const line of stderr) expect(line).toMatch(/^lanes work: (claimed \d+, acked \d+, nacked \d+, in flight \d+|stopped after claimed \d+, acked \d+, nacked \d+)$/);
  // Only accepted work ran, each once, with its payload on stdin and its work in the environment.
  expect((await readdir(marks)).sort()).toEqual(["fails", "ok-one", "ok-two"]);
  expect(await readFile(join(marks, "ok-one"), "utf8")).toBe(`${sequenceOf.get("ok-one")}|atlas|job-v1|1|{"result":"ok"}`);
  expect(await readFile(join(marks, "fails"), "utf8")).toBe(`${sequenceOf.get("fails")}|atlas|job-v1|1|{"result":"fail"}`);
}, 120_000);

test("`lanes work` needs an accepted schema and publisher and a command: usage errors exit 2 before any claim", async () => {
  const before = (await inspectGroup(beacon, "tasks", "runners")).revision;
  const noAccept = await cli(["lanes", "work", "tasks", "--group", "runners", "--", "/bin/true"]);
  expect(noAccept.code).toBe(2);
  expect(noAccept.stderr).toContain("--accept");
  const noCommand = await cli(["lanes", "work", "tasks", "--group", "runners", "--accept", "job-v1:atlas"]);
  expect(noCommand.code).toBe(2);
  const badPair = await cli(["lanes", "work", "tasks", "--group", "runners", "--accept", "job-v1", "--", "/bin/true"]);
  expect(badPair.code).toBe(2);
  expect((await inspectGroup(beacon, "tasks", "runners")).revision).toBe(before);
});
