import { randomInt } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, onTestFailed, test } from "vitest";
import { equals } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import { CommandState, SubmissionSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { CommandEventKind, type SubmitCommandResponse } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { isTerminalState, kmapClients, listAllRecords, waitUntilTerminal, type KmapClients } from "../helpers/kmap-clients.js";
import { verifyCommands, verifyNodes } from "../helpers/kmap-invariants.js";
import { KmapModel, submitPlanned, type PlannedCommand } from "../helpers/kmap-model.js";
import { kindsOf, startKmapProcess, type KmapProcess } from "../helpers/kmap-process.js";
import { pausedAt, processState, waitUntilPaused } from "../helpers/pause-points.js";
import { SeededRandom } from "../helpers/seeded-random.js";
import { holdWriteLock } from "../helpers/sqlite-lock.js";
import { generateTokens, startLanewayProcess, type ChildLaneway, type TestTokens } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * Crash safety of the Kmap command lane, with `laneway serve` as a child
 * process killed with SIGKILL and restarted on the same data directory:
 * every command ends Committed or Failed exactly once, and Kweb history
 * holds exactly one transaction per committed command.
 *
 * The kill points are the runtime's named pause points
 * (`LANEWAY_PAUSE_AT`): at the chosen occurrence the server prints
 * `laneway-paused <point> <id>` and stops itself (SIGSTOP), so the
 * SIGKILL lands exactly there — after marking Applying, after the Kweb
 * commit and before the lane's status update, between records. A loop then
 * kills at random points and random moments over many restarts. To make the
 * kills leave a backlog (commands are submitted one at a time, and the
 * runtime keeps up with that), the test holds the Kweb file's write lock
 * while it submits — the writer outage the specification names — so the
 * commands queue up behind a deferred head and the restart has to apply
 * them in submission order.
 *
 * The loop prints its seed when it fails; `LANEWAY_KMAP_CRASH_SEED=<seed>`
 * replays the same rounds and command choices (the timing, and so the
 * exact kill moments, vary), and `LANEWAY_KMAP_CRASH_VERBOSE=1` prints what
 * each round did.
 *
 * Commands are a mix (see KmapModel): creations, updates and links whose
 * expected transaction ids are valid, updates whose expectations are stale
 * by the time they apply (strict submission order makes that predictable),
 * and updates of missing nodes. Each must end with the outcome the model
 * predicts; a command applied twice would end Failed (a second link is a
 * duplicate, a second update is stale) or leave a second transaction.
 * `verifyLane` checks the invariants through the generated clients.
 */

/** What killing and stopping need of ChildLaneway and KmapProcess alike. */
interface Killable {
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly clients: { closeAll(): void };
  readonly stderr: string[];
}

const running: Killable[] = [];
const dataDirs: string[] = [];

afterEach(async () => {
  for (const laneway of running.splice(0)) {
    laneway.clients.closeAll();
    await laneway.kill("SIGKILL");
  }
  for (const dir of dataDirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function newDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "laneway-kmap-crash-"));
  dataDirs.push(dir);
  return dir;
}

async function startLaneway(dataDir: string, tokens: TestTokens, pauseAt?: string): Promise<ChildLaneway> {
  const laneway = await startLanewayProcess({ dataDir, tokens, lanesConfig: false, env: pauseAt ? { LANEWAY_PAUSE_AT: pauseAt } : {} });
  running.push(laneway);
  return laneway;
}

/** SIGKILLs the process and checks it was the kill that ended it (it had not crashed on its own). */
async function killHard(laneway: Killable): Promise<void> {
  laneway.clients.closeAll();
  const exit = await laneway.kill("SIGKILL");
  expect(exit, laneway.stderr.join("\n")).toEqual({ code: null, signal: "SIGKILL" });
}

/**
 * Submits `commands` in order until `signal` aborts (the process paused or
 * was killed). Returns the commands without an answer, in order: each must
 * be resubmitted, first thing, after the restart — the one in flight may or
 * may not be stored, and resubmitting the same id keeps the order either way.
 */
async function submitInOrder(
  clients: KmapClients,
  commands: readonly PlannedCommand[],
  signal: AbortSignal,
  answered: Map<string, SubmitCommandResponse>,
): Promise<PlannedCommand[]> {
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

/**
 * Waits until a queued record shows a deferred attempt (`writer_unavailable`):
 * the runtime has met the held Kweb lock and everything behind the head is a
 * backlog. Gives up quietly once `signal` aborts (the process paused or was
 * killed).
 */
async function untilWriterOutageSeen(clients: KmapClients, signal: AbortSignal): Promise<void> {
  await waitFor(
    async () => {
      if (signal.aborted) return true;
      const records = await listAllRecords(clients.commands, signal);
      return records.some((r) => r.state === CommandState.QUEUED && r.error?.code === "writer_unavailable");
    },
    { timeoutMs: 60_000, what: "the runtime to defer a command while the Kweb write lock is held" },
  );
}

/** SIGTERM after the checks: the lane shuts down cleanly (exit 0) after all the kills. */
async function stopCleanly(laneway: Killable): Promise<void> {
  laneway.clients.closeAll();
  const exit = await laneway.kill("SIGTERM");
  expect(exit, laneway.stderr.join("\n")).toEqual({ code: 0, signal: null });
}


describe("SIGKILL at a named point, then restart", () => {
  // Three seed creations come first (occurrences 1–3 of every point), then
  // the batch below, submitted while the test holds the Kweb write lock: the
  // first batch command's attempt (occurrence 4 of after-applying) finds the
  // writer unavailable and is retried after 1 s, and the whole batch queues
  // up behind it, so the kill leaves a backlog that the restart must apply
  // in submission order. `pausedIndex` is the batch command the occurrence
  // hits.
  const cases = [
    { point: "after-applying", occurrence: 5, pausedIndex: 0, why: "a valid update marked Applying on its retry, Kweb not called yet" },
    { point: "after-kweb-commit", occurrence: 6, pausedIndex: 4, why: "a link committed in Kweb, the lane not told (applying it again would fail as a duplicate)" },
    { point: "between-records", occurrence: 5, pausedIndex: 1, why: "a stale update recorded Failed, the next record not taken" },
  ];
  for (const { point, occurrence, pausedIndex, why } of cases) test(`${point}: ${why}`, { timeout: 120_000 }, async () => {
    const dataDir = await newDataDir();
    const tokens = generateTokens();
    const model = new KmapModel();
    const answered = new Map<string, SubmitCommandResponse>();

    let laneway = await startLaneway(dataDir, tokens, `${point}:${occurrence}`);
    let clients = kmapClients(laneway);
    const seeds = [model.create("seed a"), model.create("seed b"), model.create("seed c")];
    for (const seed of seeds) answered.set(seed.id, await submitPlanned(clients, seed));
    model.observe((await waitUntilTerminal(clients.commands, seeds.map((s) => s.id))).values());
    const [a, b, c] = model.nodes as [string, string, string];

    const batch = [
      model.update(a, "latest-observed", "update a quoting its current transaction"),
      model.update(a, "latest-observed", "update a quoting the same transaction again"),
      model.create("create"),
      model.updateMissing(),
      model.link(b, c, "latest-observed", "link b→c quoting both current transactions"),
      model.update(c, "latest-observed", "update c quoting its creation, which the link replaced"),
      model.update(b, "none", "update b without expectations"),
      model.create("create"),
    ];
    expect(batch.map((p) => p.expected)).toEqual([
      "committed",
      "stale_revision",
      "committed",
      "missing_node",
      "committed",
      "stale_revision",
      "committed",
      "committed",
    ]);

    // The process may stop before every command is in (after-applying can
    // be reached while the lock is held); the rest follow the restart.
    const stop = new AbortController();
    const paused = waitUntilPaused(laneway).finally(() => stop.abort());
    paused.catch(() => {});
    const kwebLock = holdWriteLock(join(dataDir, "kmap", "kweb.sqlite"));
    let unanswered: PlannedCommand[];
    try {
      unanswered = await submitInOrder(clients, batch, stop.signal, answered);
      await untilWriterOutageSeen(clients, stop.signal);
    } finally {
      kwebLock.release();
    }
    const pause = await paused;
    expect(pause).toEqual({ point, id: batch[pausedIndex]!.id });
    expect(await processState(laneway.pid)).toBe("T");
    await killHard(laneway);

    laneway = await startLaneway(dataDir, tokens);
    clients = kmapClients(laneway);
    for (const planned of unanswered) answered.set(planned.id, await submitPlanned(clients, planned));
    // Resubmitting an answered command returns the original record.
    const seed = await submitPlanned(clients, seeds[0]!);
    expect(seed.existing).toBe(true);
    expect(seed.record!.sequence).toBe(answered.get(seeds[0]!.id)!.record!.sequence);
    expect(equals(SubmissionSchema, seed.record!.submission!, answered.get(seeds[0]!.id)!.record!.submission!)).toBe(true);

    const report = await verifyCommands(clients, model);
    await verifyNodes(clients, model, report);
    const pausedEvents = report.events.get(pause.id)!;
    const pausedRecord = report.records.get(pause.id)!;
    const recovered = report.log.filter((e) => e.kind === CommandEventKind.RECOVERED);
    // The writer outage deferred the first batch command, never failed it.
    expect(kindsOf(report.events.get(batch[0]!.id))).toContain("RETRY_SCHEDULED");
    if (point === "between-records") {
      // Nothing was Applying at the kill: nothing to recover.
      expect(recovered).toEqual([]);
      expect(kindsOf(pausedEvents)).toEqual(["QUEUED", "APPLYING", "FAILED"]);
      expect(pausedRecord.attempts).toBe(1);
    } else {
      // The restart found the record Applying, returned it to Queued, and
      // the runtime finished it: one RECOVERED, one more attempt, Committed.
      expect(recovered.map((e) => e.record!.submission!.idempotencyId)).toEqual([pause.id]);
      const kinds = kindsOf(pausedEvents);
      expect(kinds.slice(-4)).toEqual(["APPLYING", "RECOVERED", "APPLYING", "COMMITTED"]);
      if (point === "after-applying") expect(kinds.slice(0, 4)).toEqual(["QUEUED", "APPLYING", "RETRY_SCHEDULED", "APPLYING"]);
      else expect(kinds).toEqual(["QUEUED", "APPLYING", "RECOVERED", "APPLYING", "COMMITTED"]);
      const committedAt = timestampMs(report.transactionOf.get(pause.id)!.committedAt!);
      const recoveredAt = timestampMs(recovered[0]!.changedAt!);
      if (point === "after-kweb-commit") {
        // The one transaction is the one the killed process committed: the
        // restart answered from history instead of applying again.
        expect(committedAt).toBeLessThanOrEqual(recoveredAt);
      } else {
        // Kweb had not been called: the transaction is the restart's.
        expect(committedAt).toBeGreaterThanOrEqual(recoveredAt);
      }
    }
    await stopCleanly(laneway);
  });
});

type RoundMode = "after-applying" | "after-kweb-commit" | "between-records" | "anytime";

interface RoundPlan {
  readonly mode: RoundMode;
  readonly occurrence: number;
  readonly fresh: number;
  readonly resubmit: number;
  readonly killAfterMs: number;
  readonly backlog: boolean;
}

const ROUNDS = 12;

test("random kill points over many restarts", { timeout: 240_000 }, async () => {
  const seed = process.env.LANEWAY_KMAP_CRASH_SEED ? Number(process.env.LANEWAY_KMAP_CRASH_SEED) : randomInt(2 ** 31);
  const history: string[] = [];
  onTestFailed(() => {
    console.error(`crash-safety random kill points: seed ${seed} (rerun with LANEWAY_KMAP_CRASH_SEED=${seed})\n  ${history.join("\n  ")}`);
  });
  // The plan of every round comes from its own generator, so a seed gives
  // the same rounds whatever the timing; commands come from a second one.
  const planning = new SeededRandom(seed);
  const picking = new SeededRandom(seed ^ 0x5bd1e995);
  const plans: RoundPlan[] = Array.from({ length: ROUNDS }, () => ({
    mode: planning.pick<RoundMode>(["after-applying", "after-kweb-commit", "between-records", "anytime"]),
    occurrence: planning.int(1, 6),
    fresh: planning.int(3, 8),
    resubmit: planning.int(0, 2),
    killAfterMs: planning.int(0, 300),
    backlog: planning.chance(0.5),
  }));

  const dataDir = await newDataDir();
  const tokens = generateTokens();
  const model = new KmapModel(() => picking.hexId());
  /** Planned commands without an answer yet, in submission order. */
  let unanswered: PlannedCommand[] = [];
  const answered = new Map<string, SubmitCommandResponse>();
  /** Commands paused (then killed) after Applying: each must show a RECOVERED event. */
  const mustRecover: string[] = [];
  let kills = 0;

  const nextCommand = (): PlannedCommand => {
    const nodes = model.nodes;
    if (nodes.length < 2 || picking.chance(0.2)) return model.create();
    const roll = picking.next();
    if (roll < 0.3) return model.update(picking.pick(nodes), "latest-observed");
    if (roll < 0.4) return model.update(picking.pick(nodes), "creation");
    if (roll < 0.5) return model.update(picking.pick(nodes), "none");
    if (roll < 0.8) {
      const from = picking.pick(nodes);
      const to = picking.pick(nodes.filter((n) => n !== from));
      return model.link(from, to, picking.chance(0.7) ? "latest-observed" : "none");
    }
    return model.updateMissing();
  };

  /** Every answered command has its record, and all are terminal. */
  const laneIdle = async (clients: KmapClients, signal: AbortSignal) => {
    const records = await listAllRecords(clients.commands, signal);
    return records.length === answered.size && records.every((r) => isTerminalState(r.state));
  };

  const answer = (planned: PlannedCommand, response: SubmitCommandResponse) => {
    const earlier = answered.get(planned.id);
    if (earlier) expect(response.record!.sequence).toBe(earlier.record!.sequence);
    else answered.set(planned.id, response);
  };

  /** One round's submissions; every call is abortable by `signal` (the pause or the kill). */
  const submitRound = async (clients: KmapClients, plan: RoundPlan, signal: AbortSignal) => {
    // What the previous process may or may not have stored goes first, in order.
    while (unanswered.length > 0) {
      answer(unanswered[0]!, await submitPlanned(clients, unanswered[0]!, signal));
      unanswered.shift();
    }
    model.observe(await listAllRecords(clients.commands, signal));
    // Repeating an answered submission returns the original record.
    for (let i = 0; i < plan.resubmit && answered.size > 0; i++) {
      const id = picking.pick([...answered.keys()]);
      const response = await submitPlanned(clients, model.get(id), signal);
      expect(response.existing).toBe(true);
      expect(response.record!.sequence).toBe(answered.get(id)!.record!.sequence);
      expect(equals(SubmissionSchema, response.record!.submission!, answered.get(id)!.record!.submission!)).toBe(true);
    }
    // In a backlog round the fresh commands queue up behind a writer
    // outage (the test holds the Kweb write lock), so the kill can leave a
    // long backlog for the restart to apply in order. The lock is taken
    // when the lane is idle, so the deferred head is a fresh command (first
    // attempt: retried after 1 s) rather than one with many attempts, whose
    // backoff would grow towards 60 s.
    if (plan.backlog) {
      await waitFor(async () => signal.aborted || (await laneIdle(clients, signal)), { timeoutMs: 60_000, what: "an idle lane" });
      if (signal.aborted) return;
    }
    const kwebLock = plan.backlog ? holdWriteLock(join(dataDir, "kmap", "kweb.sqlite")) : undefined;
    try {
      for (let i = 0; i < plan.fresh; i++) {
        const planned = nextCommand();
        unanswered.push(planned);
        answer(planned, await submitPlanned(clients, planned, signal));
        unanswered.shift();
        if (picking.chance(0.3)) model.observe(await listAllRecords(clients.commands, signal));
      }
      if (kwebLock) await untilWriterOutageSeen(clients, signal);
    } finally {
      kwebLock?.release();
    }
  };

  for (const [index, plan] of plans.entries()) {
    history.push(`round ${index + 1}: ${JSON.stringify(plan)}`);
    const pauseAt = plan.mode === "anytime" ? undefined : `${plan.mode}:${plan.occurrence}`;
    const laneway: KmapProcess = await startKmapProcess({ dataDir, tokens, pauseAt });
    running.push(laneway);
    const stop = new AbortController();
    const giveUp = new AbortController();
    const paused = pauseAt ? waitUntilPaused(laneway, { signal: giveUp.signal }).finally(() => stop.abort()) : undefined;
    paused?.catch(() => {});
    const killed =
      plan.mode === "anytime"
        ? new Promise<void>((resolve) =>
            setTimeout(() => {
              stop.abort();
              void laneway.kill("SIGKILL");
              resolve();
            }, plan.killAfterMs),
          )
        : undefined;

    if (laneway.url !== undefined) {
      const clients = kmapClients(laneway);
      try {
        await submitRound(clients, plan, stop.signal);
        if (paused) {
          // Wait for the pause, or for the lane to be idle if this round
          // never reaches the occurrence (then the kill lands at rest).
          const reached = await waitFor(
            async () => {
              if (pausedAt(laneway)) return "paused";
              if (laneway.hasExited()) return "exited";
              return (await laneIdle(clients, stop.signal)) ? "idle" : undefined;
            },
            { timeoutMs: 60_000, what: "the pause or an idle lane" },
          );
          if (reached === "exited") throw new Error("laneway exited on its own");
        }
      } catch (error) {
        if (!(stop.signal.aborted && error instanceof ConnectError)) {
          throw new Error(`round ${index + 1} failed: ${String(error)}\nlaneway stderr:\n${laneway.stderr.join("\n")}`, { cause: error });
        }
      }
    }
    await killed;
    const pause = pausedAt(laneway);
    if (pause) {
      await paused;
      expect(await processState(laneway.pid)).toBe("T");
      if (pause.point !== "between-records") mustRecover.push(pause.id);
    }
    giveUp.abort();
    history.push(`  ${pause ? `paused ${pause.point} at ${model.get(pause.id).label} ${pause.id}` : "killed without a pause"}${laneway.url ? "" : " before listening"}`);
    await killHard(laneway);
    kills++;
  }

  const laneway = await startKmapProcess({ dataDir, tokens });
  running.push(laneway);
  const clients = kmapClients(laneway);
  for (const planned of unanswered) answer(planned, await submitPlanned(clients, planned));
  unanswered = [];
  history.push(`final: ${model.planned.length} commands, ${mustRecover.length} paused after Applying`);

  const report = await verifyCommands(clients, model);
  await verifyNodes(clients, model, report);
  // Acknowledged submissions survived every kill, at their original place.
  for (const [id, response] of answered) expect(report.records.get(id)!.sequence).toBe(response.record!.sequence);
  // A command killed after Applying (possibly more than once) was recovered each time.
  for (const id of new Set(mustRecover)) {
    const recoveries = kindsOf(report.events.get(id)).filter((kind) => kind === "RECOVERED").length;
    expect(recoveries, `${model.get(id).label} ${id} was killed after Applying`).toBeGreaterThanOrEqual(mustRecover.filter((m) => m === id).length);
  }
  // Each restart recovers at most the one record that was Applying.
  expect(report.log.filter((e) => e.kind === CommandEventKind.RECOVERED).length).toBeLessThanOrEqual(kills);
  if (process.env.LANEWAY_KMAP_CRASH_VERBOSE) console.log(`seed ${seed}\n  ${history.join("\n  ")}`);
  await stopCleanly(laneway);
});
