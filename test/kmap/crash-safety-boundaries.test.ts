import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { CommandState } from "../../gen/laneway/kmap/v1/command_pb.js";
import { CommandEventKind, type SubmitCommandResponse } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { kmapClients, listAllRecords, waitUntilTerminal, type KmapClients } from "../helpers/kmap-clients.js";
import { verifyCommands, verifyNodes } from "../helpers/kmap-invariants.js";
import { KmapModel, submitPlanned, type PlannedCommand } from "../helpers/kmap-model.js";
import { processState, waitUntilPaused } from "../helpers/pause-points.js";
import { holdWriteLock } from "../helpers/sqlite-lock.js";
import { generateTokens } from "../helpers/laneway.js";
import { deferredHead, kindsOf, kmapCrashRuns } from "../helpers/kmap-process.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * SIGKILL at the transaction boundaries the lane gained when its runtime
 * moved into the Kweb worker thread, then restart on the same data
 * directory — with the same invariants as crash-safety.test.ts (every
 * command terminal exactly once, one signed transaction per committed
 * command; group apply's own boundaries are in group-apply-crash.test.ts):
 *
 * - `after-commit-and-applying`: one transaction recorded command N — here
 *   a whole group of commands, each its own Kweb transaction — Committed
 *   (without an fsync: recovery can rebuild it) and marked N+1 Applying;
 *   Kweb not yet called for N+1. The restart keeps the group Committed
 *   exactly once and recovers N+1.
 * - `after-queued`: a group of submissions is durable in the worker, and
 *   none was answered. The client resubmits after the restart and gets the
 *   stored record (`existing`), at its original place in the order.
 *
 * The pause itself happens in the worker thread: it hands the point to the
 * main thread, which prints the pause line and stops the whole process.
 */

const runs = kmapCrashRuns("boundary");
const { start } = runs;

afterEach(() => runs.cleanup());

/** Submits in order until `signal` aborts; returns the commands left without an answer. */
async function submitInOrder(clients: KmapClients, commands: readonly PlannedCommand[], signal: AbortSignal, answered: Map<string, SubmitCommandResponse>) {
  for (const [index, planned] of commands.entries()) {
    if (signal.aborted) return commands.slice(index);
    try {
      answered.set(planned.id, await submitPlanned(clients, planned, signal));
    } catch (error) {
      if (signal.aborted && error instanceof ConnectError) return commands.slice(index);
      throw error;
    }
  }
  return [];
}

test("after-commit-and-applying: a group committed and the next command applying in one transaction, then SIGKILL", { timeout: 120_000 }, async () => {
  const dataDir = await runs.newDataDir();
  const tokens = generateTokens();
  const model = new KmapModel();
  const answered = new Map<string, SubmitCommandResponse>();

  let laneway = await start(dataDir, tokens, "after-commit-and-applying:1");
  let clients = kmapClients(laneway);
  // A backlog: the Kweb file is locked elsewhere while the commands are
  // submitted, so they queue behind a deferred head; once the lock goes, the
  // head and the two creations behind it are applied as one group (the
  // update of a missing node is rejected, which ends the group before it),
  // and the group's outcomes and the next command's Applying mark are one
  // transaction — the lane's "N committed, N+1 applying" boundary.
  const lock = holdWriteLock(join(dataDir, "kmap", "kweb.sqlite"));
  const batch = [model.create("first"), model.create("second"), model.create("third"), model.updateMissing()];
  try {
    for (const planned of batch) answered.set(planned.id, await submitPlanned(clients, planned));
    await waitFor(async () => (await listAllRecords(clients.commands)).some((r) => r.error?.code === "writer_unavailable"), { what: "a deferred head" });
  } finally {
    lock.release();
  }
  const pause = await waitUntilPaused(laneway);
  expect(pause).toEqual({ point: "after-commit-and-applying", id: batch[3]!.id });
  expect(await processState(laneway.pid)).toBe("T");
  await runs.killHard(laneway);

  laneway = await start(dataDir, tokens);
  clients = kmapClients(laneway);
  const report = await verifyCommands(clients, model);
  await verifyNodes(clients, model, report);
  // The group was Committed by the killed process, once.
  deferredHead(kindsOf(report.events.get(batch[0]!.id)), ["APPLYING", "COMMITTED"]);
  for (const planned of batch.slice(1, 3)) expect(kindsOf(report.events.get(planned.id))).toEqual(["QUEUED", "APPLYING", "COMMITTED"]);
  // The next one was Applying: recovered, applied once by the restart.
  expect(kindsOf(report.events.get(batch[3]!.id))).toEqual(["QUEUED", "APPLYING", "RECOVERED", "APPLYING", "FAILED"]);
  expect(report.records.get(batch[3]!.id)!.attempts).toBe(2);
  expect(report.log.filter((e) => e.kind === CommandEventKind.RECOVERED).map((e) => e.record!.submission!.idempotencyId)).toEqual([batch[3]!.id]);
  expect(report.transactions.map((t) => t.provenance)).toEqual([batch[0]!.id, batch[1]!.id, batch[2]!.id]);
  laneway.clients.closeAll();
  expect(await laneway.kill("SIGTERM"), laneway.stderr.join("\n")).toEqual({ code: 0, signal: null });
});

test("after-queued: a durable group not yet answered, then SIGKILL; the resubmission finds it", { timeout: 120_000 }, async () => {
  const dataDir = await runs.newDataDir();
  const tokens = generateTokens();
  const model = new KmapModel();
  const answered = new Map<string, SubmitCommandResponse>();

  let laneway = await start(dataDir, tokens, "after-queued:3");
  let clients = kmapClients(laneway);
  const commands = [model.create("one"), model.create("two"), model.create("three"), model.create("four")];
  const stop = new AbortController();
  const paused = waitUntilPaused(laneway).finally(() => stop.abort());
  const unanswered = await submitInOrder(clients, commands, stop.signal, answered);
  expect(await paused).toEqual({ point: "after-queued", id: commands[2]!.id });
  expect(unanswered.map((p) => p.id)).toEqual([commands[2]!.id, commands[3]!.id]);
  await runs.killHard(laneway);

  laneway = await start(dataDir, tokens);
  clients = kmapClients(laneway);
  // The third was stored before the kill, although it was never answered.
  const third = await submitPlanned(clients, commands[2]!);
  expect(third.existing).toBe(true);
  expect(third.record!.sequence).toBe(3n);
  const fourth = await submitPlanned(clients, commands[3]!);
  expect(fourth.existing).toBe(false);
  expect(fourth.record!.sequence).toBe(4n);
  const records = await waitUntilTerminal(clients.commands, commands.map((c) => c.id));
  expect(commands.map((c) => records.get(c.id)!.state)).toEqual(commands.map(() => CommandState.COMMITTED));
  const report = await verifyCommands(clients, model);
  await verifyNodes(clients, model, report);
  laneway.clients.closeAll();
  expect(await laneway.kill("SIGTERM"), laneway.stderr.join("\n")).toEqual({ code: 0, signal: null });
});
