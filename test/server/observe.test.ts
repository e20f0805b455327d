import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { createLogger } from "../../src/log/logger.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { parsePrometheusText, sampleValue, type Family } from "../helpers/prometheus-text.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * /metrics and the per-call log lines of a real `laneway serve --demo`
 * (embedded nats-server with the hive, SQLite Kmap), as a child process.
 */

let laneway: ChildLaneway;
/** Every secret and payload the run used: none may appear in /metrics or the log. */
const secrets: string[] = [];

beforeAll(async () => {
  laneway = await startLanewayProcess({
    lanesConfig: false,
    args: ["--demo"],
    // Successes are logged at debug; the lanes' last sequences are read on every scrape.
    env: { LANEWAY_LOG_LEVEL: "debug", LANEWAY_METRICS_REFRESH_MS: "0" },
  });
  secrets.push(laneway.tokens.atlas, laneway.tokens.beacon, laneway.tokens.admin);
}, 120_000);

afterAll(async () => {
  await laneway?.remove();
});

async function scrape(): Promise<{ text: string; families: Map<string, Family> }> {
  const response = await fetch(`${laneway.url}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  const text = await response.text();
  return { text, families: parsePrometheusText(text) };
}

const rpc = (method: string, code = "ok", reason = "") => ({ service: method.split("/")[0]!, method: method.split("/")[1]!, code, reason });
const lane = "laneway.lane.v1.LaneService";

test("/metrics moves by exactly what was done, parses strictly, and shows no token, receipt or payload", async () => {
  const { families: before } = await scrape();
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
  const payload = (n: number) => {
    const marker = `payload-${randomBytes(8).toString("hex")}-${n}`;
    secrets.push(marker);
    return new TextEncoder().encode(marker);
  };

  // 2 events, then 3 work records, one publication repeated (a duplicate, not counted).
  await atlas.publishBatch({
    lane: "measurements",
    records: [
      { id: "e0", kind: RecordKind.EVENT, schema: "probe-v1", payload: payload(10) },
      { id: "e1", kind: RecordKind.EVENT, schema: "probe-v1", payload: payload(11) },
    ],
  });
  for (let i = 0; i < 3; i++) await atlas.publish({ lane: "measurements", id: `w${i}`, kind: RecordKind.WORK, schema: "probe-v1", payload: payload(i) });
  const repeated = await atlas.publish({ lane: "measurements", id: "w0", kind: RecordKind.WORK, schema: "probe-v1", payload: new TextEncoder().encode(secrets[secrets.length - 3]!) });
  expect(repeated.duplicate).toBe(true);
  // atlas is no member of the group: a refusal.
  const refused = await atlas.claimBatch({ lane: "measurements", group: "summarizers", maxRecords: 1 }).catch((e: unknown) => ConnectError.from(e));
  expect(refused).toBeInstanceOf(ConnectError);

  // beacon claims all three, acks one, nacks one, renews one; then acks the nacked one again (stale).
  const claimed = await beacon.claimBatch({ lane: "measurements", group: "summarizers", maxRecords: 3 });
  expect(claimed.work).toHaveLength(3);
  for (const w of claimed.work) secrets.push(w.receipt);
  const [first, second, third] = claimed.work;
  await beacon.ack({ lane: "measurements", group: "summarizers", sequence: first!.record!.sequence, receipt: first!.receipt });
  await beacon.nack({ lane: "measurements", group: "summarizers", sequence: second!.record!.sequence, receipt: second!.receipt });
  await beacon.renew({ lane: "measurements", group: "summarizers", sequence: third!.record!.sequence, receipt: third!.receipt });
  const stale = await beacon.ackBatch({ lane: "measurements", group: "summarizers", receipts: [{ sequence: second!.record!.sequence, receipt: second!.receipt }] });
  expect(stale.results[0]!.outcome.case).toBe("error");
  const staleReason = stale.results[0]!.outcome.case === "error" ? stale.results[0]!.outcome.value.reason : "";

  // Two Kmap commands, committed.
  const kmap = laneway.clients.client(KmapCommandService, { token: laneway.tokens.admin });
  const submitted = [];
  for (let i = 0; i < 2; i++) {
    submitted.push(
      await kmap.submitCommand({ idempotencyId: randomBytes(16).toString("hex"), command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: `metrics ${i}`, body: `body ${i}` } } }) }),
    );
  }
  // A hive member joins: one credential minted.
  const hub = laneway.clients.client(HiveHubService, { token: laneway.tokens.admin });
  await hub.scope({ swarms: ["rig"] });
  const invite = await hub.invite({ memberId: "metrics-a", swarms: ["rig"] });
  secrets.push(invite.inviteSecret);
  const joined = await laneway.clients.client(HiveMemberService, { token: invite.inviteSecret }).join({});
  secrets.push(joined.credential!.creds);
  // A wrong token: refused before any handler runs.
  const unknown = await laneway.clients.client(LaneService, { token: "f".repeat(64) }).getRegistry({}).catch((e: unknown) => ConnectError.from(e));
  expect((unknown as ConnectError).code).toBe(Code.Unauthenticated);

  // The Kmap commits happen after the submissions answered: wait for them in the metrics themselves.
  const committedBefore = sampleValue(before, "laneway_kmap_commands_committed_total");
  const { text, families: after } = await waitFor(
    async () => {
      const scraped = await scrape();
      return sampleValue(scraped.families, "laneway_kmap_commands_committed_total") - committedBefore === 2 ? scraped : undefined;
    },
    { timeoutMs: 30_000, what: "the two Kmap commands to commit" },
  );
  const delta = (name: string, labels: Record<string, string> = {}) => sampleValue(after, name, labels) - sampleValue(before, name, labels);

  expect(delta("laneway_lane_records_published_total", { lane: "measurements", kind: "work" })).toBe(3);
  expect(delta("laneway_lane_records_published_total", { lane: "measurements", kind: "event" })).toBe(2);
  expect(sampleValue(after, "laneway_lane_last_sequence", { lane: "measurements" })).toBe(5);
  expect(delta("laneway_group_deliveries_leased_total", { lane: "measurements", group: "summarizers" })).toBe(3);
  expect(delta("laneway_group_receipts_total", { lane: "measurements", group: "summarizers", operation: "ack" })).toBe(1);
  expect(delta("laneway_group_receipts_total", { lane: "measurements", group: "summarizers", operation: "nack" })).toBe(1);
  expect(delta("laneway_group_receipts_total", { lane: "measurements", group: "summarizers", operation: "renew" })).toBe(1);
  expect(delta("laneway_group_receipt_refusals_total", { operation: "ack", reason: staleReason })).toBe(1);
  expect(delta("laneway_group_receipt_refusals_total", { operation: "claim", reason: "lane_forbidden" })).toBe(1);
  // The group now: one lease (the renewed one), one retry waiting (the nacked one), nothing after its cursor (the claim passed the events).
  expect(sampleValue(after, "laneway_group_leases", { lane: "measurements", group: "summarizers" })).toBe(1);
  expect(sampleValue(after, "laneway_group_retries_waiting", { lane: "measurements", group: "summarizers" })).toBe(1);
  expect(sampleValue(after, "laneway_group_backlog", { lane: "measurements", group: "summarizers" })).toBe(2);
  expect(sampleValue(after, "laneway_group_oldest_unfinished_age_seconds", { lane: "measurements", group: "summarizers" })).toBeGreaterThan(0);

  expect(delta("laneway_kmap_commands_submitted_total", { existing: "false" })).toBe(2);
  expect(delta("laneway_kmap_apply_latency_seconds_count", { outcome: "committed" })).toBe(2);
  expect(sampleValue(after, "laneway_kmap_backlog")).toBe(0);
  expect(sampleValue(after, "laneway_kmap_backlog_max")).toBeGreaterThan(0);
  expect(delta("laneway_hive_credentials_minted_total", { kind: "join" })).toBe(1);
  expect(delta("laneway_hive_invites_total")).toBe(1);
  expect(sampleValue(after, "laneway_nats_connected")).toBe(1);
  expect(sampleValue(after, "laneway_nats_state", { state: "connected" })).toBe(1);

  // Per RPC: counts by method and code, and a histogram of each.
  expect(delta("laneway_rpc_calls_total", rpc(`${lane}/Publish`))).toBe(4);
  expect(delta("laneway_rpc_calls_total", rpc(`${lane}/PublishBatch`))).toBe(1);
  expect(delta("laneway_rpc_calls_total", rpc(`${lane}/ClaimBatch`))).toBe(1);
  expect(delta("laneway_rpc_calls_total", rpc(`${lane}/ClaimBatch`, "permission_denied", "lane_forbidden"))).toBe(1);
  expect(delta("laneway_rpc_calls_total", rpc(`${lane}/GetRegistry`, "unauthenticated", "unauthorized"))).toBe(1);
  expect(delta("laneway_rpc_calls_total", rpc("laneway.kmap.v1.KmapCommandService/SubmitCommand"))).toBe(2);
  expect(delta("laneway_rpc_duration_seconds_count", { service: lane, method: "Publish", code: "ok" })).toBe(4);
  expect(delta("laneway_rpc_duration_seconds_count", { service: lane, method: "Ack", code: "ok" })).toBe(1);

  // prom-client's process metrics and the event loop's lag.
  for (const name of ["process_cpu_user_seconds_total", "process_resident_memory_bytes", "nodejs_eventloop_lag_seconds", "nodejs_eventloop_lag_p99_seconds", "nodejs_heap_size_used_bytes"]) {
    expect(after.has(name), name).toBe(true);
  }
  // Bounded labels only.
  const allowed = new Set(["service", "method", "code", "reason", "lane", "group", "kind", "operation", "existing", "outcome", "state", "le", "quantile", "space", "version", "major", "minor", "patch", "type"]);
  for (const family of after.values()) for (const s of family.samples) for (const label of Object.keys(s.labels)) expect(allowed.has(label), `${family.name} ${label}`).toBe(true);
  for (const secret of secrets) expect(text.includes(secret), "a secret or payload in /metrics").toBe(false);
  expect(text).not.toContain(invite.inviteSecret);
  expect(submitted).toHaveLength(2);
}, 120_000);

test("one log line per call: method, code, reason, duration, principal, peer and size; no secret", async () => {
  const logs = laneway.stderr
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.msg === "rpc");
  const publishes = logs.filter((l) => l.method === `${lane}/Publish`);
  expect(publishes.length).toBeGreaterThanOrEqual(4);
  for (const line of publishes) {
    expect(line).toMatchObject({ level: "debug", code: "ok", principal: "project", principalId: "atlas", peer: "127.0.0.1" });
    expect(line.requestBytes).toBeGreaterThan(0);
    expect(typeof line.durationMs).toBe("number");
    expect(line.reason).toBeUndefined();
  }
  const forbidden = logs.find((l) => l.method === `${lane}/ClaimBatch` && l.code === "permission_denied");
  expect(forbidden).toMatchObject({ level: "info", reason: "lane_forbidden", principal: "project", principalId: "atlas" });
  const unknown = logs.find((l) => l.method === `${lane}/GetRegistry` && l.code === "unauthenticated");
  expect(unknown).toMatchObject({ level: "info", reason: "unauthorized", principal: "none" });
  expect(unknown?.principalId).toBeUndefined();
  expect(logs.find((l) => l.method === "laneway.kmap.v1.KmapCommandService/SubmitCommand")).toMatchObject({ principal: "operator", principalId: "operator" });
  expect(logs.find((l) => l.method === "laneway.swarm.v1.HiveMemberService/Join")).toMatchObject({ principal: "member", principalId: "metrics-a", code: "ok" });
  // Only these fields: nothing else of the request reaches the line.
  for (const line of logs) {
    for (const key of Object.keys(line)) expect(["time", "level", "msg", "method", "code", "reason", "durationMs", "principal", "principalId", "peer", "requestBytes"]).toContain(key);
  }
  const all = laneway.stderr.join("\n") + laneway.stdout.join("\n");
  for (const secret of secrets) expect(all.includes(secret), "a secret or payload in the log").toBe(false);

  // LANEWAY_LOG_FORMAT=text: the same fields for a person at a terminal.
  const lines: string[] = [];
  createLogger({ format: "text", write: (l) => lines.push(l) }).info("rpc", { method: `${lane}/Ack`, code: "invalid_argument", reason: "lane_invalid", durationMs: 1.5, peer: "::1" });
  expect(lines[0]).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z INFO  rpc method=laneway\.lane\.v1\.LaneService\/Ack code=invalid_argument reason=lane_invalid durationMs=1\.5 peer=::1\n$/);
}, 60_000);

test("/metrics answers GET only; an unknown console asset is 404", async () => {
  expect((await fetch(`${laneway.url}/metrics`, { method: "POST" })).status).toBe(405);
  expect((await fetch(`${laneway.url}/console/nothing-here.js`)).status).toBe(404);
});
