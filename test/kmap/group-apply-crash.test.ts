import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { CommandEventKind, type SubmitCommandResponse } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { kmapClients, listAllRecords, waitUntilTerminal } from "../helpers/kmap-clients.js";
import { verifyCommands, verifyNodes } from "../helpers/kmap-invariants.js";
import { KmapModel, submitPlanned } from "../helpers/kmap-model.js";
import { processState, waitUntilPaused } from "../helpers/pause-points.js";
import { holdWriteLock } from "../helpers/sqlite-lock.js";
import { generateTokens } from "../helpers/laneway.js";
import { deferredHead, kindsOf, kmapCrashRuns } from "../helpers/kmap-process.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Group apply under SIGKILL: `laneway serve` as a child process, killed at a
 * pause point inside a group of several commands, then restarted on the
 * same data directory.
 *
 * The runtime applies the queued, due commands behind the head as one
 * group: each command in a Kweb transaction of its own (its own signed
 * transaction), committed without an fsync, while only the head is
 * Applying in the lane and the others stay Queued; then one fsync of the
 * Kweb's WAL for the whole group, and one lane transaction that records
 * the head Committed and every further member Applying and Committed. The
 * test builds such a group deterministically: it holds the Kweb file's
 * write lock while it submits (the head is deferred, the rest queue up
 * behind it), releases it, and the head's retry takes the whole backlog up
 * to a command that is rejected (a stale update, which ends the group
 * unwritten and is then applied — and recorded Failed — alone).
 *
 * After every kill the restart must leave each command terminal exactly
 * once, in submission order, with one signed transaction per committed
 * command, chained and verifying (verifyCommands, verifyNodes); only the
 * head was Applying, so only the head is recovered; and the members whose
 * Kweb transaction was committed before the kill are answered from
 * history, not applied again.
 */

const runs = kmapCrashRuns("group");
const { start } = runs;

afterEach(() => runs.cleanup());

/** The group is batch[0..4]; batch[5] is stale once batch[1] applied, so it ends the group; batch[6] follows alone. */
const GROUP = 5;

// Two seed creations come first: occurrences 1 and 2 of group-kweb-commit,
// after-kweb-commit and between-records; the group's members follow in order.
const cases = [
  {
    pauseAt: "group-kweb-commit:5",
    pausedIndex: 2,
    why: "three members committed in Kweb without their fsync, the head Applying, the others Queued: the restart answers those three from history and applies the rest once",
    committedBeforeKill: 3,
  },
  {
    pauseAt: "group-kweb-commit:7",
    pausedIndex: GROUP - 1,
    why: "every member committed in Kweb, the group's fsync not yet made: the restart answers every member from history",
    committedBeforeKill: GROUP,
  },
  {
    pauseAt: "after-kweb-commit:3",
    pausedIndex: 0,
    why: "the group's Kweb transactions committed and fsync'd, the lane not told: the restart answers every member from history",
    committedBeforeKill: GROUP,
  },
  {
    pauseAt: "between-records:4",
    pausedIndex: 1,
    why: "the group recorded in one transaction that also took the rejected command: only that one is recovered",
    committedBeforeKill: GROUP,
  },
] as const;

for (const { pauseAt, pausedIndex, why, committedBeforeKill } of cases) {
  test(`${pauseAt}: ${why}`, { timeout: 120_000 }, async () => {
    const dataDir = await runs.newDataDir();
    const tokens = generateTokens();
    const model = new KmapModel();
    const answered = new Map<string, SubmitCommandResponse>();

    let laneway = await start(dataDir, tokens, pauseAt);
    let clients = kmapClients(laneway);
    const seeds = [model.create("seed a"), model.create("seed b")];
    for (const seed of seeds) answered.set(seed.id, await submitPlanned(clients, seed));
    model.observe((await waitUntilTerminal(clients.commands, seeds.map((s) => s.id))).values());
    const [a, b] = model.nodes as [string, string];

    const batch = [
      model.create("group: create"),
      model.update(a, "none", "group: update a"),
      model.link(a, b, "none", "group: link a→b"),
      model.update(b, "none", "group: update b"),
      model.create("group: create again"),
      model.update(a, "latest-observed", "update a quoting the transaction the group replaced"),
      model.create("after the group"),
    ];
    expect(batch.map((p) => p.expected)).toEqual(["committed", "committed", "committed", "committed", "committed", "stale_revision", "committed"]);

    const lock = holdWriteLock(join(dataDir, "kmap", "kweb.sqlite"));
    try {
      for (const planned of batch) answered.set(planned.id, await submitPlanned(clients, planned));
      await waitFor(async () => (await listAllRecords(clients.commands)).some((r) => r.error?.code === "writer_unavailable"), { what: "a deferred head" });
    } finally {
      lock.release();
    }
    const pause = await waitUntilPaused(laneway);
    expect(pause).toEqual({ point: pauseAt.split(":")[0], id: batch[pausedIndex]!.id });
    expect(await processState(laneway.pid)).toBe("T");
    laneway.clients.closeAll();
    expect(await laneway.kill("SIGKILL"), laneway.stderr.join("\n")).toEqual({ code: null, signal: "SIGKILL" });

    laneway = await start(dataDir, tokens);
    clients = kmapClients(laneway);
    const report = await verifyCommands(clients, model);
    await verifyNodes(clients, model, report);
    const recovered = report.log.filter((e) => e.kind === CommandEventKind.RECOVERED);
    const group = batch.slice(0, GROUP);

    // Exactly once, in submission order, each its own signed transaction.
    expect(report.transactions.map((t) => t.provenance)).toEqual([...seeds, ...group, batch[6]!].map((p) => p.id));
    expect(kindsOf(report.events.get(batch[6]!.id))).toEqual(["QUEUED", "APPLYING", "COMMITTED"]);

    if (pauseAt.startsWith("between-records")) {
      // The group's outcomes were recorded; the stale update was Applying.
      expect(recovered.map((e) => e.record!.submission!.idempotencyId)).toEqual([batch[5]!.id]);
      deferredHead(kindsOf(report.events.get(batch[0]!.id)), ["APPLYING", "COMMITTED"]);
      for (const planned of group.slice(1)) expect(kindsOf(report.events.get(planned.id))).toEqual(["QUEUED", "APPLYING", "COMMITTED"]);
      expect(kindsOf(report.events.get(batch[5]!.id))).toEqual(["QUEUED", "APPLYING", "RECOVERED", "APPLYING", "FAILED"]);
      // One lane transaction: the head Committed, each further member Applying and Committed, the stale update taken.
      const start = report.log.findIndex((e) => e.kind === CommandEventKind.COMMITTED && e.record!.submission!.idempotencyId === batch[0]!.id);
      const shared = report.log.slice(start, start + 2 * GROUP);
      expect(new Set(shared.map((e) => timestampMs(e.changedAt!))).size).toBe(1);
      expect(shared.map((e) => [batch.findIndex((p) => p.id === e.record!.submission!.idempotencyId), CommandEventKind[e.kind]])).toEqual([
        [0, "COMMITTED"],
        ...group.slice(1).flatMap((_, i) => [
          [i + 1, "APPLYING"],
          [i + 1, "COMMITTED"],
        ]),
        [5, "APPLYING"],
      ]);
      expect(shared.map((e) => Number(e.position - shared[0]!.position))).toEqual(shared.map((_, i) => i));
    } else {
      // Only the head was Applying at the kill: the one restart recovered
      // it, and nothing else — the further members were still Queued.
      expect(recovered.map((e) => e.record!.submission!.idempotencyId)).toEqual([batch[0]!.id]);
      deferredHead(kindsOf(report.events.get(batch[0]!.id)), ["APPLYING", "RECOVERED", "APPLYING", "COMMITTED"]);
      for (const planned of group.slice(1)) {
        expect(kindsOf(report.events.get(planned.id))).toEqual(["QUEUED", "APPLYING", "COMMITTED"]);
        expect(report.records.get(planned.id)!.attempts).toBe(1);
      }
      // The rejected command ended the group unwritten and was applied alone, once.
      expect(kindsOf(report.events.get(batch[5]!.id))).toEqual(["QUEUED", "APPLYING", "FAILED"]);
      const recoveredAt = timestampMs(recovered[0]!.changedAt!);
      group.forEach((planned, i) => {
        const committedAt = timestampMs(report.transactionOf.get(planned.id)!.committedAt!);
        // Committed in Kweb before the kill: the restart found it by
        // provenance and applied nothing. Not committed: the restart applied it.
        if (i < committedBeforeKill) expect(committedAt).toBeLessThanOrEqual(recoveredAt);
        else expect(committedAt).toBeGreaterThanOrEqual(recoveredAt);
      });
    }
    laneway.clients.closeAll();
    expect(await laneway.kill("SIGTERM"), laneway.stderr.join("\n")).toEqual({ code: 0, signal: null });
  });
}
