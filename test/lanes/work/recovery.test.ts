import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { DeliveryState, LaneService, type GroupState, type RecoveryResult } from "../../../gen/laneway/lane/v1/lane_service_pb.js";
import { generateTokens, startLanewayInProcess, type InProcessLaneway } from "../../helpers/laneway.js";
import { expectLaneError, newToken, type LaneClient } from "../../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";
import { waitFor } from "../../helpers/wait-for.js";
import { claimOne, completionOf, deliveriesView, deliveryOf, inspectGroup, publishWork, receiptOf, responseLoser } from "../../helpers/work.js";
import { buildLanesConfig } from "../../helpers/lanes-config.js";

/**
 * Explicit same-namespace group recovery, on a namespace whose records are
 * retained for 2 seconds and whose leases last 4: work really leaves
 * retention, and the tests wait for it (the broker's clock), then recover
 * through the generated client.
 *
 * - absent foreign owner: a member claims the group's only slot and
 *   vanishes; its record expires; a recoverer retires the delivery without
 *   its receipt (`missing`), with no cursor gap, and the slot is reused;
 * - cursor gaps: unclaimed work that expired makes claims fail with
 *   `lane_cursor` (also while the lane holds nothing at all) until the gap
 *   is accepted exactly at its boundary, never across retained work;
 * - live leases and acknowledgement history survive a recovery; live,
 *   acknowledged, unknown and wrongly-receipted deliveries cannot be
 *   retired; renewal in between makes the quoted revision a conflict;
 * - the missing-prefix checkpoint does not suppress unlisted deliveries;
 * - idempotence: a lost response retried (also after a Laneway restart and
 *   a broker restart) returns the stored result without reapplying it; the
 *   same id with another body or from another recoverer conflicts;
 * - capability isolation: only configured recoverers (who are members);
 * - at most 64 recovery records: the 65th is `lane_capacity`.
 */

const LANE_BOUNDS = { retention: "2s", duplicate_window: "1s", lease: "4s", retry_delay: "100ms", max_retry_delay: "100ms" };
const cinderToken = newToken();
const tokens = generateTokens();

const config = buildLanesConfig({
  namespace: "recover",
  projects: ["atlas", "beacon", "cinder"],
  lanes: [
    { id: "absent", owner: "atlas", publishers: ["atlas"], groups: { solo: ["atlas", "beacon"] }, recoverers: { solo: ["beacon"] } },
    { id: "gap", owner: "atlas", publishers: ["atlas"], groups: { gappers: ["beacon"] }, recoverers: { gappers: ["beacon"] } },
    { id: "keep", owner: "atlas", publishers: ["atlas"], groups: { keepers: ["atlas", "beacon"] }, recoverers: { keepers: ["beacon"] } },
    { id: "prefix", owner: "atlas", publishers: ["atlas"], groups: { prefixers: ["atlas", "beacon"] }, recoverers: { prefixers: ["beacon"] } },
    { id: "idem", owner: "atlas", publishers: ["atlas"], groups: { idem: ["atlas", "beacon"] }, recoverers: { idem: ["atlas", "beacon"] } },
    {
      id: "caps",
      owner: "atlas",
      publishers: ["atlas"],
      subscribers: ["cinder"],
      groups: { capped: ["atlas", "beacon"], plain: ["beacon"] },
      recoverers: { capped: ["beacon"] },
    },
  ],
  ...LANE_BOUNDS,
});

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
let atlas: LaneClient;
let beacon: LaneClient;
let cinder: LaneClient;

async function start(): Promise<InProcessLaneway> {
  return startLanewayInProcess({ natsUrl: nats.url, lanesConfig: config, tokens, env: { CINDER_LANE_TOKEN: cinderToken } });
}

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await start();
  atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
  beacon = laneway.clients.client(LaneService, { token: tokens.beacon });
  cinder = laneway.clients.client(LaneService, { token: cinderToken });
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

/** Waits until the records through `sequence` left retention and none of `leased` holds a live lease. */
async function waitExpired(client: LaneClient, lane: string, group: string, sequence: bigint, leased: readonly bigint[] = []): Promise<GroupState> {
  return waitFor(
    async () => {
      const g = await inspectGroup(client, lane, group);
      if (g.firstRetained <= sequence) return undefined;
      const live = leased.some((s) => deliveryOf(g, s)?.state === DeliveryState.LEASED);
      return live ? undefined : g;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: `records through ${sequence} to leave retention` },
  );
}

function resultView(result: RecoveryResult | undefined) {
  return {
    id: result?.id,
    project: result?.project,
    cursorThrough: result?.cursorThrough,
    missingThrough: result?.missingThrough,
    expirations: result?.expirations.map((x) => [x.project, x.sequence, x.attempt]),
    revision: result?.revision,
    recordedAt: result?.recordedAt ? timestampMs(result.recordedAt) : undefined,
  };
}

describe("retiring expired deliveries", () => {
  test("a recoverer retires an absent foreign owner's expired delivery from the group's only slot, without a gap or a receipt; the slot is reused and the owner's receipt is dead", async () => {
    const [record] = await publishWork(atlas, "absent", ["absent-one"]);
    const owned = (await claimOne(atlas, "absent", "solo"))!;
    expect(owned.record!.sequence).toBe(record!.sequence);
    // atlas disappears forever: its lease runs out and the record leaves retention.
    const expired = await waitExpired(beacon, "absent", "solo", record!.sequence, [record!.sequence]);
    expect(expired.slots).toBe(1);
    expect(expired.cursor).toBe(record!.sequence);
    expect(expired.lastSequence).toBe(record!.sequence);
    expect(deliveriesView(expired)).toEqual([[Number(record!.sequence), "atlas", 1, "RELEASED"]]);
    expect(deliveryOf(expired, record!.sequence)!.retained).toBe(false);
    // The waiting delivery is not skipped silently.
    await expectLaneError(() => beacon.claim({ lane: "absent", group: "solo" }), Code.Aborted, "lane_cursor");

    const recovered = await beacon.recoverGroup({
      lane: "absent",
      group: "solo",
      id: "absent-owner",
      revision: expired.revision,
      cursorThrough: expired.cursor,
      missing: [record!.sequence],
    });
    expect(resultView(recovered.result)).toMatchObject({
      id: "absent-owner",
      project: "beacon",
      cursorThrough: record!.sequence,
      missingThrough: record!.sequence,
      expirations: [["atlas", record!.sequence, 1]],
      revision: expired.revision,
    });
    const after = await inspectGroup(beacon, "absent", "solo");
    expect(after.deliveries).toEqual([]);
    expect([after.slots, after.recoveries, after.missingThrough]).toEqual([1, 1, record!.sequence]);
    // The recovery history is the audit record RecoverGroup returned, with no receipt in it.
    expect(after.recoveryHistory.map(resultView)).toEqual([resultView(recovered.result)]);
    expect(JSON.stringify(after.recoveryHistory, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v))).not.toContain(owned.receipt);
    // The retirement is no acknowledgement: the original receipt can do nothing.
    for (const call of [
      () => atlas.ack({ lane: "absent", group: "solo", ...receiptOf(owned) }),
      () => atlas.nack({ lane: "absent", group: "solo", ...receiptOf(owned) }),
      () => atlas.renew({ lane: "absent", group: "solo", ...receiptOf(owned) }),
    ]) {
      await expectLaneError(call, Code.Aborted, "lane_stale");
    }
    // Later work reuses the freed slot without growth.
    const [next] = await publishWork(atlas, "absent", ["absent-two"]);
    const work = (await claimOne(beacon, "absent", "solo"))!;
    expect(work.record!.sequence).toBe(next!.sequence);
    expect((await inspectGroup(beacon, "absent", "solo")).slots).toBe(1);
    expect((await beacon.ack({ lane: "absent", group: "solo", ...receiptOf(work) })).duplicate).toBe(false);
  });

  test("expired unclaimed work is a cursor gap: claims fail with lane_cursor (also while the lane retains nothing) until a recovery accepts exactly the boundary", async () => {
    // The group exists before its work arrives.
    expect(await claimOne(beacon, "gap", "gappers")).toBeUndefined();
    const first = await publishWork(atlas, "gap", ["gap-1", "gap-2", "gap-3"]);
    const last = first[2]!.sequence;
    const empty = await waitExpired(beacon, "gap", "gappers", last);
    // The lane retains nothing: its first retained sequence is the next one.
    expect([empty.cursor, empty.firstRetained, empty.lastSequence]).toEqual([0n, last + 1n, last]);
    await expectLaneError(() => beacon.claim({ lane: "gap", group: "gappers" }), Code.Aborted, "lane_cursor");
    // Nothing is retained: the boundary is first_retained - 1, the last sequence, and the refusal says so.
    const short = await expectLaneError(
      () => beacon.recoverGroup({ lane: "gap", group: "gappers", id: "gap-short", revision: empty.revision, cursorThrough: last - 1n }),
      Code.InvalidArgument,
      "lane_invalid",
    );
    expect(short.rawMessage).toContain(`cursor_through must be ${last}, the expired prefix boundary (first_retained ${last + 1n} - 1)`);
    const accepted = await beacon.recoverGroup({ lane: "gap", group: "gappers", id: "gap-all", revision: empty.revision, cursorThrough: last });
    expect(resultView(accepted.result)).toMatchObject({ cursorThrough: last, missingThrough: last, expirations: [] });
    expect(await claimOne(beacon, "gap", "gappers")).toBeUndefined();

    // A gap before retained work: the boundary is first_retained - 1, and never beyond it.
    const [, expiring] = await publishWork(atlas, "gap", ["gap-4", "gap-5"]);
    const claimed = (await claimOne(beacon, "gap", "gappers"))!;
    await beacon.ack({ lane: "gap", group: "gappers", ...receiptOf(claimed) });
    await waitExpired(beacon, "gap", "gappers", expiring!.sequence);
    const [retained] = await publishWork(atlas, "gap", ["gap-6"]);
    await expectLaneError(() => beacon.claim({ lane: "gap", group: "gappers" }), Code.Aborted, "lane_cursor");
    const gapped = await inspectGroup(beacon, "gap", "gappers");
    expect([gapped.cursor, gapped.firstRetained]).toEqual([claimed.record!.sequence, retained!.sequence]);
    for (const cursorThrough of [retained!.sequence, gapped.cursor, retained!.sequence - 2n]) {
      await expectLaneError(
        () => beacon.recoverGroup({ lane: "gap", group: "gappers", id: `gap-wrong-${cursorThrough}`, revision: gapped.revision, cursorThrough }),
        Code.InvalidArgument,
        "lane_invalid",
      );
    }
    // The refusals changed nothing.
    expect((await inspectGroup(beacon, "gap", "gappers")).revision).toBe(gapped.revision);
    const boundary = await beacon.recoverGroup({ lane: "gap", group: "gappers", id: "gap-boundary", revision: gapped.revision, cursorThrough: retained!.sequence - 1n });
    expect(boundary.result!.cursorThrough).toBe(retained!.sequence - 1n);
    const work = (await claimOne(beacon, "gap", "gappers"))!;
    expect(work.record!.id).toBe("gap-6");
    await beacon.ack({ lane: "gap", group: "gappers", ...receiptOf(work) });
  });

  test("a recovery keeps live leases and acknowledgement history; live, acknowledged, unknown or wrongly receipted deliveries are refused; a renewal in between is a revision conflict", async () => {
    const records = await publishWork(atlas, "keep", ["keep-1", "keep-2", "keep-3", "keep-4", "keep-5"]);
    const [k1, k2, k3, k4, k5] = records.map((r) => r.sequence) as [bigint, bigint, bigint, bigint, bigint];
    const acked = (await claimOne(beacon, "keep", "keepers"))!;
    const ackedAt = timestampMs((await beacon.ack({ lane: "keep", group: "keepers", ...receiptOf(acked) })).ackedAt!);
    const live = (await claimOne(beacon, "keep", "keepers"))!;
    const abandoned = (await claimOne(beacon, "keep", "keepers"))!;
    const foreign = (await claimOne(atlas, "keep", "keepers"))!;
    await atlas.nack({ lane: "keep", group: "keepers", ...receiptOf(foreign) });
    expect([acked, live, abandoned, foreign].map((w) => w.record!.sequence)).toEqual([k1, k2, k3, k4]);
    // keep-5 is never claimed: a gap after the cursor. Keep keep-2's lease alive while the rest expires.
    const renew = () => beacon.renew({ lane: "keep", group: "keepers", ...receiptOf(live) });
    await waitFor(
      async () => {
        await renew();
        const g = await inspectGroup(beacon, "keep", "keepers");
        return g.firstRetained > k5 && deliveryOf(g, k3)!.state === DeliveryState.RELEASED ? g : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: "the keep lane to expire" },
    );
    await renew();
    const g = await inspectGroup(beacon, "keep", "keepers");
    expect(deliveriesView(g)).toEqual([
      [Number(k2), "beacon", 1, "LEASED"],
      [Number(k3), "beacon", 1, "RELEASED"],
      [Number(k4), "atlas", 1, "RELEASED"],
    ]);
    expect(completionOf(g, k1)).toEqual({ attempt: 1, lastAckedAt: ackedAt });
    const base = { lane: "keep", group: "keepers", revision: g.revision, cursorThrough: k5 };
    const refused: [string, () => Promise<unknown>, Code, string][] = [
      ["live lease", () => beacon.recoverGroup({ ...base, id: "keep-live", missing: [k2] }), Code.InvalidArgument, "lane_invalid"],
      ["acknowledged", () => beacon.recoverGroup({ ...base, id: "keep-acked", missing: [k1] }), Code.InvalidArgument, "lane_invalid"],
      ["not in the ledger", () => beacon.recoverGroup({ ...base, id: "keep-unknown", missing: [k5] }), Code.InvalidArgument, "lane_invalid"],
      ["another delivery's receipt", () => beacon.recoverGroup({ ...base, id: "keep-receipt", expired: [{ sequence: k3, receipt: live.receipt }] }), Code.Aborted, "lane_stale"],
      ["the cursor short of the gap", () => beacon.recoverGroup({ ...base, id: "keep-cursor", cursorThrough: k4 }), Code.InvalidArgument, "lane_invalid"],
      ["a repeated sequence", () => beacon.recoverGroup({ ...base, id: "keep-twice", expired: [{ sequence: k3, receipt: abandoned.receipt }], missing: [k3] }), Code.InvalidArgument, "lane_invalid"],
      ["17 deliveries", () => beacon.recoverGroup({ ...base, id: "keep-many", missing: Array.from({ length: 17 }, (_, i) => BigInt(i + 1)) }), Code.InvalidArgument, "lane_invalid"],
    ];
    for (const [what, call, code, reason] of refused) {
      const error = await expectLaneError(call, code, reason);
      expect(error.rawMessage, what).not.toContain(live.receipt);
    }
    expect((await inspectGroup(beacon, "keep", "keepers")).revision).toBe(g.revision);
    // A renewal after the inspection changes the group state: the quoted revision is stale.
    await renew();
    await expectLaneError(
      () => beacon.recoverGroup({ ...base, id: "keep-raced", expired: [{ sequence: k3, receipt: abandoned.receipt }], missing: [k4] }),
      Code.Aborted,
      "lane_conflict",
    );
    await renew();
    const fresh = await inspectGroup(beacon, "keep", "keepers");
    const recovered = await beacon.recoverGroup({
      ...base,
      id: "keep-retire",
      revision: fresh.revision,
      expired: [{ sequence: k3, receipt: abandoned.receipt }],
      missing: [k4],
    });
    expect(resultView(recovered.result)).toMatchObject({
      project: "beacon",
      cursorThrough: k5,
      missingThrough: k5,
      expirations: [
        ["beacon", k3, 1],
        ["atlas", k4, 1],
      ],
    });
    // The live lease still renews and acks; the history still answers duplicates (with its bucket's last acknowledgement: no other ack since).
    expect(timestampMs((await renew()).leaseExpiresAt!)).toBeGreaterThan(0);
    const repeat = await beacon.ack({ lane: "keep", group: "keepers", ...receiptOf(acked) });
    expect([repeat.duplicate, timestampMs(repeat.ackedAt!)]).toEqual([true, ackedAt]);
    expect((await beacon.ack({ lane: "keep", group: "keepers", ...receiptOf(live) })).duplicate).toBe(false);
    // The retired receipts are dead.
    await expectLaneError(() => beacon.ack({ lane: "keep", group: "keepers", ...receiptOf(abandoned) }), Code.Aborted, "lane_stale");
    await expectLaneError(() => atlas.nack({ lane: "keep", group: "keepers", ...receiptOf(foreign) }), Code.Aborted, "lane_stale");
    const after = await inspectGroup(beacon, "keep", "keepers");
    expect(deliveriesView(after)).toEqual([]);
    expect([k1, k2, k3, k4].map((s) => completionOf(after, s)?.attempt)).toEqual([1, 1, undefined, undefined]);
    expect(after.cursor).toBe(k5);
  });

  test("the accepted missing-prefix checkpoint does not suppress unlisted pending deliveries below it: each needs its own fenced acceptance", async () => {
    const [p1, p2, p3] = await publishWork(atlas, "prefix", ["prefix-1", "prefix-2", "prefix-3"]);
    const first = (await claimOne(atlas, "prefix", "prefixers"))!;
    const second = (await claimOne(atlas, "prefix", "prefixers"))!;
    const third = (await claimOne(beacon, "prefix", "prefixers"))!;
    await beacon.ack({ lane: "prefix", group: "prefixers", ...receiptOf(third) });
    expect([first, second, third].map((w) => w.record!.sequence)).toEqual([p1!.sequence, p2!.sequence, p3!.sequence]);
    const g = await waitExpired(beacon, "prefix", "prefixers", p3!.sequence, [p1!.sequence, p2!.sequence]);
    const only2 = await beacon.recoverGroup({ lane: "prefix", group: "prefixers", id: "prefix-two", revision: g.revision, cursorThrough: g.cursor, missing: [p2!.sequence] });
    expect(only2.result!.missingThrough).toBe(p2!.sequence);
    // prefix-1 lies below the checkpoint but was not listed: still pending, still blocking.
    const between = await inspectGroup(beacon, "prefix", "prefixers");
    expect(between.missingThrough).toBe(p2!.sequence);
    expect(deliveriesView(between)).toEqual([[Number(p1!.sequence), "atlas", 1, "RELEASED"]]);
    expect(completionOf(between, p3!.sequence)?.attempt).toBe(1);
    await expectLaneError(() => beacon.claim({ lane: "prefix", group: "prefixers" }), Code.Aborted, "lane_cursor");
    const only1 = await beacon.recoverGroup({ lane: "prefix", group: "prefixers", id: "prefix-one", revision: between.revision, cursorThrough: between.cursor, missing: [p1!.sequence] });
    expect(resultView(only1.result)).toMatchObject({ missingThrough: p2!.sequence, expirations: [["atlas", p1!.sequence, 1]] });
    expect(await claimOne(beacon, "prefix", "prefixers")).toBeUndefined();
    const [p4] = await publishWork(atlas, "prefix", ["prefix-4"]);
    expect((await claimOne(beacon, "prefix", "prefixers"))!.record!.sequence).toBe(p4!.sequence);
  });
});

describe("who may recover", () => {
  test("only configured recoverers of the group: members, owners, subscribers and recoverers of other groups are refused, and nothing changes", async () => {
    expect(await claimOne(beacon, "caps", "capped")).toBeUndefined();
    expect(await claimOne(beacon, "caps", "plain")).toBeUndefined();
    const g = await inspectGroup(beacon, "caps", "capped");
    const request = { lane: "caps", group: "capped", id: "caps-one", revision: g.revision, cursorThrough: g.cursor };
    // atlas owns the lane and is a member of the group, but no recoverer.
    await expectLaneError(() => atlas.recoverGroup(request), Code.PermissionDenied, "lane_forbidden");
    // cinder subscribes to the lane.
    await expectLaneError(() => cinder.recoverGroup(request), Code.PermissionDenied, "lane_forbidden");
    // beacon recovers `capped`, not `plain`, of which it is a member.
    const plain = await inspectGroup(beacon, "caps", "plain");
    await expectLaneError(() => beacon.recoverGroup({ ...request, group: "plain", revision: plain.revision }), Code.PermissionDenied, "lane_forbidden");
    // beacon is no recoverer on another lane's group either.
    await expectLaneError(() => beacon.recoverGroup({ ...request, lane: "absent", group: "capped" }), Code.PermissionDenied, "lane_forbidden");
    expect((await inspectGroup(beacon, "caps", "capped")).revision).toBe(g.revision);
    expect((await inspectGroup(beacon, "caps", "capped")).recoveries).toBe(0);
    // The recoverer itself may.
    expect((await beacon.recoverGroup(request)).result!.project).toBe("beacon");
  });

  test("at most 64 recovery records are kept within ack_retention: the 65th recovery is lane_capacity and changes nothing", async () => {
    let g = await inspectGroup(beacon, "caps", "capped");
    const quoted = new Map<string, bigint>();
    for (let i = g.recoveries; i < 64; i++) {
      const result = await beacon.recoverGroup({ lane: "caps", group: "capped", id: `noop-${i}`, revision: g.revision, cursorThrough: g.cursor });
      expect(result.result!.revision).toBe(g.revision);
      quoted.set(`noop-${i}`, g.revision);
      g = await inspectGroup(beacon, "caps", "capped");
    }
    expect(g.recoveries).toBe(64);
    await expectLaneError(
      () => beacon.recoverGroup({ lane: "caps", group: "capped", id: "noop-65", revision: g.revision, cursorThrough: g.cursor }),
      Code.ResourceExhausted,
      "lane_capacity",
    );
    expect((await inspectGroup(beacon, "caps", "capped")).revision).toBe(g.revision);
    // A retry of a stored one is still answered.
    const retry = await beacon.recoverGroup({ lane: "caps", group: "capped", id: "noop-10", revision: quoted.get("noop-10")!, cursorThrough: g.cursor });
    expect([retry.result!.id, retry.result!.revision]).toEqual(["noop-10", quoted.get("noop-10")]);
  });
});

describe("idempotent recovery across lost responses and restarts", () => {
  test("a recovery whose response was lost returns the stored result when retried — after a Laneway restart and a broker restart too — without reapplying; another body or another recoverer with the id conflicts", async () => {
    const [record] = await publishWork(atlas, "idem", ["idem-one"]);
    await claimOne(atlas, "idem", "idem");
    const g = await waitExpired(beacon, "idem", "idem", record!.sequence, [record!.sequence]);
    const request = { lane: "idem", group: "idem", id: "idem-recovery", revision: g.revision, cursorThrough: g.cursor, missing: [record!.sequence] };

    const loser = responseLoser((method) => method === "RecoverGroup");
    const lossy = laneway.clients.client(LaneService, { token: tokens.beacon, interceptors: [loser.interceptor] });
    await expect(lossy.recoverGroup(request)).rejects.toThrow(/lost/);
    const lost = resultView((loser.lost[0] as { result: RecoveryResult }).result);
    expect(lost).toMatchObject({ project: "beacon", expirations: [["atlas", record!.sequence, 1]], revision: g.revision });
    const applied = await inspectGroup(beacon, "idem", "idem");
    expect(applied.deliveries).toEqual([]);

    const retried = await beacon.recoverGroup(request);
    expect(resultView(retried.result)).toEqual(lost);
    // Not reapplied: the group did not change.
    expect((await inspectGroup(beacon, "idem", "idem")).revision).toBe(applied.revision);

    // A restarted Laneway answers the same.
    await laneway.stop();
    laneway = await start();
    atlas = laneway.clients.client(LaneService, { token: tokens.atlas });
    beacon = laneway.clients.client(LaneService, { token: tokens.beacon });
    expect(resultView((await beacon.recoverGroup(request)).result)).toEqual(lost);

    // And after the broker restarted.
    await nats.restart();
    const afterBroker = await waitFor(
      async () => {
        try {
          return await beacon.recoverGroup(request);
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 60_000, intervalMs: 200, what: "the recovery to be answered after the broker restart" },
    );
    expect(resultView(afterBroker.result)).toEqual(lost);
    expect((await inspectGroup(beacon, "idem", "idem")).revision).toBe(applied.revision);

    // The same id with a changed body, or from another recoverer with the same body, conflicts.
    await expectLaneError(() => beacon.recoverGroup({ ...request, missing: [] }), Code.Aborted, "lane_conflict");
    await expectLaneError(() => beacon.recoverGroup({ ...request, revision: applied.revision }), Code.Aborted, "lane_conflict");
    await expectLaneError(() => atlas.recoverGroup(request), Code.Aborted, "lane_conflict");
    // A new id quoting the old revision conflicts too: the group changed since.
    await expectLaneError(() => beacon.recoverGroup({ ...request, id: "idem-again" }), Code.Aborted, "lane_conflict");
    expect((await inspectGroup(beacon, "idem", "idem")).revision).toBe(applied.revision);
  });
});
