import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { exampleLanesConfig, startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { eventOn, expectLaneError, firstFollowMessage, jsonPayload, published, reasonOf, recordFields, replayAll, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Broker outages, with Laneway in this process and its broker a test-owned
 * nats-server: while the broker is down every call fails at once with
 * `lane_unavailable` (reconnect buffering is off: nothing is queued as a
 * success); once it is back, the same key retried succeeds exactly once,
 * and nothing acknowledged before the outage is lost, whether the broker
 * stopped cleanly or was killed. A broker that stops answering (SIGSTOP)
 * makes calls end at operation_timeout with `lane_timeout`.
 */

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
/** Every record acknowledged so far, by id. */
const acknowledged = new Map<string, ReturnType<typeof recordFields>>();

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: exampleLanesConfig({ operation_timeout: "2s" }) });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

async function lanesHealth(): Promise<HealthCheckResponse_ServingStatus> {
  const health = laneway.clients.client(Health);
  return (await health.check({ service: LaneService.typeName })).status;
}

async function publishBatchOf(prefix: string, n: number): Promise<void> {
  const response = await atlas.publishBatch({
    lane: "measurements",
    records: Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}`, kind: i % 4 === 0 ? RecordKind.WORK : RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({ prefix, i }) })),
  });
  for (const result of response.results) {
    if (result.outcome.case !== "published") throw new Error(`not published: ${result.outcome.value?.reason}`);
    const record = result.outcome.value.record!;
    if (record.kind === RecordKind.EVENT) acknowledged.set(record.id, recordFields(record));
  }
}

/** Retries one publication until the broker is back; every failure meanwhile must be an explicit unavailable or timeout. */
async function publishWhenBack(request: ReturnType<typeof eventOn>) {
  const seen = new Set<string>();
  const response = await waitFor(
    async () => {
      try {
        return await atlas.publish(request);
      } catch (error) {
        const reason = reasonOf(ConnectError.from(error)) ?? "none";
        seen.add(reason);
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "the broker to accept publications again" },
  );
  expect([...seen].filter((r) => r !== "lane_unavailable" && r !== "lane_timeout")).toEqual([]);
  return response;
}

async function expectStoredExactlyOnce(): Promise<void> {
  const events = (await replayAll(atlas, "measurements")).events;
  const ids = events.map((e) => e.id);
  expect(new Set(ids).size).toBe(ids.length);
  const stored = new Map(events.map((e) => [e.id, recordFields(e)]));
  for (const [id, record] of acknowledged) expect(stored.get(id), id).toEqual(record);
}

test("with the broker stopped, publish, batch, replay and follow fail at once with lane_unavailable; once restarted, the same key succeeds and nothing acknowledged is lost", async () => {
  await publishBatchOf("before-stop", 100);
  const single = await atlas.publish(eventOn("before-stop-single", { n: 1 }));
  acknowledged.set("before-stop-single", published(single));

  await nats.stop();
  await waitFor(async () => (await lanesHealth()) === HealthCheckResponse_ServingStatus.NOT_SERVING, { what: "Laneway to see the broker gone" });

  const request = eventOn("during-outage", { n: 2 });
  await expectLaneError(() => atlas.publish(request), Code.Unavailable, "lane_unavailable");
  await expectLaneError(() => atlas.replay({ lane: "measurements", cursor: 0n }), Code.Unavailable, "lane_unavailable");
  await expectLaneError(() => firstFollowMessage(atlas, "measurements", 0n, new AbortController()), Code.Unavailable, "lane_unavailable");
  const batch = await atlas.publishBatch({ lane: "measurements", records: [{ id: "batch-during-outage", kind: RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({}) }] });
  const outcome = batch.results[0]!.outcome;
  expect(outcome.case === "error" && [outcome.value.code, outcome.value.reason]).toEqual(["unavailable", "lane_unavailable"]);
  // The message names no broker address.
  const error = await expectLaneError(() => atlas.publish(request), Code.Unavailable, "lane_unavailable");
  expect(error.rawMessage).not.toContain(`${nats.port}`);

  await nats.restart();
  const retried = await publishWhenBack(request);
  expect(retried.record?.id).toBe("during-outage");
  acknowledged.set("during-outage", published(retried));
  await waitFor(async () => (await lanesHealth()) === HealthCheckResponse_ServingStatus.SERVING, { what: "Laneway to report lanes serving" });
  // The retried key is one record, and the earlier ones are all still there.
  expect(await atlas.publish(request).then((r) => r.duplicate)).toBe(true);
  await expectStoredExactlyOnce();
});

test("a broker killed with SIGKILL keeps every acknowledged record; retries of in-flight keys resolve to one record each", async () => {
  await publishBatchOf("before-kill", 100);
  // A batch racing the kill: some records may be acknowledged, some not.
  const racing = atlas
    .publishBatch({
      lane: "measurements",
      records: Array.from({ length: 64 }, (_, i) => ({ id: `racing-${i}`, kind: RecordKind.EVENT, schema: "s-v1", payload: jsonPayload({ i }) })),
    })
    .catch((error: unknown) => ConnectError.from(error));
  await nats.kill("SIGKILL");
  const raced = await racing;
  if (raced instanceof ConnectError) {
    // The whole call can only fail for broker trouble, never as a success-shaped answer.
    expect(["lane_unavailable", "lane_timeout"]).toContain(reasonOf(raced));
  } else {
    for (const result of raced.results) {
      if (result.outcome.case === "published") acknowledged.set(result.outcome.value.record!.id, published(result.outcome.value));
      else expect(["lane_unavailable", "lane_timeout"]).toContain(result.outcome.value?.reason);
    }
  }
  await nats.restart();
  await publishWhenBack(eventOn("after-kill", { n: 3 }));
  // Every racing key, retried with its original content, resolves to exactly one record.
  for (let i = 0; i < 64; i++) {
    const response = await publishWhenBack(eventOn(`racing-${i}`, { i }, { schema: "s-v1" }));
    const earlier = acknowledged.get(`racing-${i}`);
    if (earlier !== undefined) {
      expect(response.duplicate).toBe(true);
      expect(published(response)).toEqual(earlier);
    }
    acknowledged.set(`racing-${i}`, published(response));
  }
  await expectStoredExactlyOnce();
});

test("a broker that stops answering makes calls end at operation_timeout with lane_timeout; after it resumes the same key succeeds once", async () => {
  const request = eventOn("during-pause", { n: 4 });
  await nats.pause();
  try {
    await expectLaneError(() => atlas.publish(request), Code.DeadlineExceeded, "lane_timeout");
  } finally {
    await nats.resume();
  }
  const response = await publishWhenBack(request);
  acknowledged.set("during-pause", published(response));
  await expectStoredExactlyOnce();
});
