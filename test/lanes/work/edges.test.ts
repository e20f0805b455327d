import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, reasonOf, type LaneClient } from "../../helpers/lanes.js";
import { waitFor } from "../../helpers/wait-for.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { claimOne, inspectGroup, ledgerValue, publishWork, putLedgerValue, receiptOf } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Groups at the edges of their state:
 *
 * - a group that never claimed has no ledger: inspection shows revision 0
 *   and 0 slots; receipts are stale there, a recovery has nothing to
 *   recover, and none of this creates the ledger;
 * - a ledger written in another state format (the JSON ledger of state
 *   format 3, as an older Laneway wrote it) is refused with lane_conflict
 *   naming the format, by every operation, and left as it is; a ledger that
 *   is not readable at all is lane_unavailable;
 * - a claim that finds only events after the cursor moves the cursor past
 *   them, so that events leaving retention (2 s here) are no gap of this
 *   group: no lane_cursor for records that were never work;
 * - a group whose configuration names no recoverer can never pass a gap:
 *   startup warns about each such group, and its claims' lane_cursor says
 *   what the operator can do.
 */

const config = buildLanesConfig({
  namespace: "edges",
  projects: ["atlas", "beacon"],
  lanes: [
    { id: "fresh", owner: "atlas", publishers: ["atlas"], groups: { idle: ["beacon"] }, recoverers: { idle: ["beacon"] } },
    { id: "older", owner: "atlas", publishers: ["atlas"], groups: { g: ["beacon"] }, recoverers: { g: ["beacon"] } },
    { id: "garbled", owner: "atlas", publishers: ["atlas"], groups: { g: ["beacon"] } },
  ],
  lease: "30s",
});

const shortConfig = {
  ...config,
  namespace: "edges-short",
  lanes: [
    { id: "mixed", owner: "atlas", publishers: ["atlas"], groups: { g: ["beacon"] } },
    { id: "orphan", owner: "atlas", publishers: ["atlas"], groups: { g: ["beacon"] } },
  ],
  retention: "2s",
  duplicate_window: "1s",
};

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let short: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config });
  atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
  short = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: shortConfig, tokens: laneway.tokens });
});

afterAll(async () => {
  await short?.stop();
  await laneway?.stop();
  await nats?.remove();
});

const fake = { sequence: 1n, receipt: "a".repeat(64) };

test("a group that never claimed: inspection shows revision 0 and no slots, receipts are stale, a recovery has nothing to recover, and nothing creates its ledger", async () => {
  await publishWork(atlas, "fresh", ["fresh-1"]);
  const g = await inspectGroup(beacon, "fresh", "idle");
  expect([g.revision, g.slots, g.cursor, g.deliveries.length, g.lastSequence]).toEqual([0n, 0, 0n, 0, 1n]);
  const where = { lane: "fresh", group: "idle" };
  for (const results of [
    (await beacon.ackBatch({ ...where, receipts: [fake, { sequence: 2n, receipt: "b".repeat(64) }] })).results,
    (await beacon.nackBatch({ ...where, receipts: [fake] })).results,
    (await beacon.renewBatch({ ...where, receipts: [fake] })).results,
  ]) {
    for (const r of results) expect([r.outcome.case, r.outcome.value && "reason" in r.outcome.value ? r.outcome.value.reason : undefined]).toEqual(["error", "lane_stale"]);
  }
  await expectLaneError(() => beacon.ack({ ...where, ...fake }), Code.Aborted, "lane_stale");
  await expectLaneError(() => beacon.recoverGroup({ ...where, id: "nothing-yet", revision: 1n, cursorThrough: 0n }), Code.Aborted, "lane_conflict");
  expect(await ledgerValue(nats.url, "edges", "fresh", "idle")).toBeUndefined();
  // Its first claim creates it, with one slot, and leases the work.
  const work = (await claimOne(beacon, "fresh", "idle"))!;
  expect(work.record!.id).toBe("fresh-1");
  expect((await inspectGroup(beacon, "fresh", "idle")).slots).toBe(1);
});

test("a ledger in state format 3 is refused with lane_conflict naming the format by every operation and left unchanged; an unreadable one is lane_unavailable", async () => {
  const [record] = await publishWork(atlas, "older", ["older-1"]);
  // Laneway knows the group first (its ledger is cached), then an older writer replaces the value.
  const work = (await claimOne(beacon, "older", "g"))!;
  expect(work.record!.sequence).toBe(record!.sequence);
  // What a Laneway of state format 3 stored: a JSON ledger with one-letter keys.
  const older = JSON.stringify({ f: 3, cursor: 1, rotation: 0, turn: "retry", missing: 0, slots: 1, d: [{ s: 1, p: "beacon", a: 1, st: "leased", le: Date.now() + 30_000, r: "x".repeat(43) }], rec: [] });
  await putLedgerValue(nats.url, "edges", "older", "g", older);
  const where = { lane: "older", group: "g" };
  await publishWork(atlas, "older", ["older-2"]);
  for (const call of [
    () => beacon.claim(where),
    () => beacon.inspectGroup(where),
    () => beacon.ack({ ...where, ...receiptOf(work) }),
    () => beacon.recoverGroup({ ...where, id: "against-older", revision: 1n, cursorThrough: 1n }),
  ]) {
    const error = await expectLaneError(call, Code.Aborted, "lane_conflict");
    expect(error.rawMessage).toContain("a group ledger was written in state format 3; this Laneway reads format 4");
    expect(error.rawMessage).not.toContain(work.receipt);
    expect(error.rawMessage).not.toContain(nats.url.replace("nats://", ""));
  }
  expect(await ledgerValue(nats.url, "edges", "older", "g")).toBe(older);

  await publishWork(atlas, "garbled", ["garbled-1"]);
  await putLedgerValue(nats.url, "edges", "garbled", "g", "{not a ledger");
  for (const call of [() => beacon.claim({ lane: "garbled", group: "g" }), () => beacon.inspectGroup({ lane: "garbled", group: "g" })]) {
    const error = await expectLaneError(call, Code.Unavailable, "lane_unavailable");
    expect(reasonOf(error)).toBe("lane_unavailable");
  }
  expect(await ledgerValue(nats.url, "edges", "garbled", "g")).toBe("{not a ledger");
});

test("a claim that finds only events after the cursor moves past them: once those events leave retention, claims answer no work, not lane_cursor; later work is claimed", async () => {
  const publisher = short.clients.client(LaneService, { token: laneway.tokens.atlas });
  const worker = short.clients.client(LaneService, { token: laneway.tokens.beacon });
  const where = { lane: "mixed", group: "g" };
  const [first] = await publishWork(publisher, "mixed", ["mixed-work-1"]);
  const work = (await claimOne(worker, "mixed", "g"))!;
  expect(work.record!.sequence).toBe(first!.sequence);
  await worker.ack({ ...where, ...receiptOf(work) });
  const events = await publishWork(publisher, "mixed", ["event-1", "event-2", "event-3"], { kind: RecordKind.EVENT });
  const lastEvent = events[events.length - 1]!.sequence;
  expect((await inspectGroup(worker, "mixed", "g")).cursor).toBe(first!.sequence);
  // The empty claim examined the events: the cursor passes them.
  expect((await worker.claim(where)).work).toBeUndefined();
  const passed = await inspectGroup(worker, "mixed", "g");
  expect([passed.cursor, passed.lastSequence]).toEqual([lastEvent, lastEvent]);
  // Everything leaves retention (the first retained is then the next sequence); the group has no gap.
  const expired = await waitFor(
    async () => {
      const g = await inspectGroup(worker, "mixed", "g");
      return g.firstRetained > lastEvent ? g : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 200, what: "the lane's records to expire" },
  );
  expect([expired.firstRetained, expired.lastSequence]).toEqual([lastEvent + 1n, lastEvent]);
  expect((await worker.claim(where)).work).toBeUndefined();
  const [later] = await publishWork(publisher, "mixed", ["mixed-work-2"]);
  const next = (await claimOne(worker, "mixed", "g"))!;
  expect([next.record!.sequence, next.attempt]).toEqual([later!.sequence, 1]);
});

test("a group whose configuration names no recoverer: startup warns about it (and only such groups), and once its work left retention unclaimed, claims say nobody may recover it and what the operator can do", async () => {
  const warned = (logs: readonly string[]) =>
    logs
      .map((line) => JSON.parse(line) as { level: string; msg: string; lane?: string; group?: string })
      .filter((l) => l.level === "warn" && l.msg.includes("has no recoverer"))
      .map((l) => `${l.lane}/${l.group}`);
  expect(warned(laneway.logs)).toEqual(["garbled/g"]);
  expect(warned(short.logs).sort()).toEqual(["mixed/g", "orphan/g"]);

  const publisher = short.clients.client(LaneService, { token: laneway.tokens.atlas });
  const worker = short.clients.client(LaneService, { token: laneway.tokens.beacon });
  expect((await worker.claim({ lane: "orphan", group: "g" })).work).toBeUndefined();
  const [lost] = await publishWork(publisher, "orphan", ["orphan-1"]);
  await waitFor(async () => (await inspectGroup(worker, "orphan", "g")).firstRetained > lost!.sequence, { timeoutMs: 30_000, intervalMs: 200, what: "the orphan's work to expire" });
  const error = await expectLaneError(() => worker.claim({ lane: "orphan", group: "g" }), Code.Aborted, "lane_cursor");
  expect(error.rawMessage).toContain("its configuration names no recoverer");
  expect(error.rawMessage).toContain("provision a namespace generation whose configuration names a recoverer");
});

test("sequences and revisions beyond 2^53 reach the group exactly: stale, conflict or invalid, quoted as sent", async () => {
  const huge = 2n ** 63n;
  const [record] = await publishWork(atlas, "fresh", ["exact-1"]);
  const work = await claimOne(beacon, "fresh", "idle", 5_000);
  expect(work?.record?.sequence).toBe(record!.sequence);
  const forged = { lane: "fresh", group: "idle", sequence: huge, receipt: work!.receipt };
  for (const call of [() => beacon.ack(forged), () => beacon.nack(forged), () => beacon.renew(forged)]) {
    const error = await expectLaneError(call, Code.Aborted, "lane_stale");
    expect(error.rawMessage).toContain(`delivery ${huge} of this group`);
  }
  // In a batch, the impossible sequence is answered in its place; the real receipt still completes its delivery.
  const batch = await beacon.ackBatch({ lane: "fresh", group: "idle", receipts: [{ sequence: huge + 1n, receipt: work!.receipt }, receiptOf(work!)] });
  expect(batch.results.map((r) => (r.outcome.case === "error" ? r.outcome.value.reason : r.outcome.case))).toEqual(["lane_stale", "acked"]);
  expect(batch.results[0]!.outcome.case === "error" && batch.results[0]!.outcome.value.message).toContain(`delivery ${huge + 1n} of this group`);
  const { revision } = await inspectGroup(beacon, "fresh", "idle");
  const base = { lane: "fresh", group: "idle", id: "exact-recovery", revision, cursorThrough: 0n, expired: [], missing: [] };
  const never = await expectLaneError(() => beacon.recoverGroup({ ...base, revision: huge }), Code.Aborted, "lane_conflict");
  expect(never.rawMessage).toContain(`never at revision ${huge}`);
  const beyond = await expectLaneError(() => beacon.recoverGroup({ ...base, cursorThrough: huge + 3n }), Code.InvalidArgument, "lane_invalid");
  expect(beyond.rawMessage).toContain(`cursor_through ${huge + 3n} is beyond`);
  const missing = await expectLaneError(() => beacon.recoverGroup({ ...base, missing: [huge + 5n] }), Code.InvalidArgument, "lane_invalid");
  expect(missing.rawMessage).toContain(`delivery ${huge + 5n} is not an unfinished delivery`);
});
