import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, expect, test } from "vitest";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import { CommandEventKind, KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { kmapClients } from "../helpers/kmap-clients.js";
import { verifyCommands, verifyNodes } from "../helpers/kmap-invariants.js";
import { KmapModel, submitPlanned } from "../helpers/kmap-model.js";
import { waitUntilPaused } from "../helpers/pause-points.js";
import { generateTokens, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * "Runtime SQLite or task failures end the runtime": the server reports the
 * Kmap core as not serving in health, logs why, and exits non-zero so a
 * supervisor restarts it; the restart recovers.
 *
 * The fault is real and lives where the specification puts it, in the
 * lane's SQLite database: the test takes the write lock of
 * `<dataDir>/kmap/commands.sqlite` (BEGIN IMMEDIATE from its own
 * connection, as a backup job or a `sqlite3` shell could) while the server
 * is stopped at the `after-applying` pause point, then lets it continue. The
 * runtime applies the command in Kweb, and its status update to Committed
 * fails with SQLITE_BUSY (no later than the lane's 5 s busy timeout; the
 * test does not depend on when) — a lane storage failure, not a Kweb writer
 * outage, so the runtime must end. The lock is held until the process has
 * exited.
 *
 * Why not a read-only database: the suite runs as root here (`id -u` is 0),
 * and root ignores file modes, so chmod produces no fault; `chattr +i` needs
 * CAP_LINUX_IMMUTABLE and filesystem support; deleting or replacing the file
 * does nothing to an open SQLite connection. The lock works for any user.
 *
 * The Kweb transaction was committed before the lane failed, so the restart
 * both recovers the record (RECOVERED) and proves exactly-once: Kweb answers
 * from history, the record ends Committed once, and history holds one
 * transaction for it.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const { SERVING, NOT_SERVING } = HealthCheckResponse_ServingStatus;

function logLines(laneway: ChildLaneway): Record<string, unknown>[] {
  return laneway.stderr.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

test("a locked lane database ends the runtime: NOT_SERVING, a log line, exit 1; the restart recovers exactly once", { timeout: 120_000 }, async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-kmap-failure-"));
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const tokens = generateTokens();

  const laneway = await startLanewayProcess({ dataDir, tokens, lanesConfig: false, env: { LANEWAY_PAUSE_AT: "after-applying" } });
  cleanups.push(() => laneway.remove());
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void laneway.exited.then((result) => (exit = result));

  const health = laneway.clients.client(Health, { protocol: "grpc" });
  const statuses: HealthCheckResponse_ServingStatus[] = [];
  const watching = (async () => {
    for await (const res of health.watch({ service: KmapCommandService.typeName })) statuses.push(res.status);
  })().catch(() => {});
  await waitFor(() => statuses.includes(SERVING), { what: "the Kmap command service to be SERVING" });

  const model = new KmapModel();
  const command = model.create("applied while the lane database is locked");
  const clients = kmapClients(laneway);
  // The submission wakes the runtime, which can stop the process before the
  // answer is written; the answer comes once the process continues.
  const submitted = submitPlanned(clients, command);
  expect(await waitUntilPaused(laneway)).toEqual({ point: "after-applying", id: command.id });

  const lock = new Database(join(dataDir, "kmap", "commands.sqlite"), { timeout: 10_000 });
  try {
    lock.exec("BEGIN IMMEDIATE");
    process.kill(laneway.pid, "SIGCONT");
    expect((await submitted).existing).toBe(false);
    await waitFor(() => statuses.includes(NOT_SERVING), { timeoutMs: 60_000, what: "health to report the Kmap command service NOT_SERVING" });
    await waitFor(() => exit, { timeoutMs: 60_000, what: "laneway to exit after the runtime failure" });
  } finally {
    if (lock.inTransaction) lock.exec("ROLLBACK");
    lock.close();
  }
  laneway.clients.closeAll();
  await watching;

  expect(exit, laneway.stderr.join("\n")).toEqual({ code: 1, signal: null });
  expect(statuses).toEqual([SERVING, NOT_SERVING]);
  const failure = logLines(laneway).find((line) => String(line.msg).includes("the Kmap command runtime failed"));
  expect(failure, laneway.stderr.join("\n")).toMatchObject({ level: "error" });
  // It says why: the lane's database, in Laneway's own words, and the
  // driver's error class and code (a lock, not a full disk) — never the
  // driver's own text or the file's path.
  expect(String(failure!.reason)).toMatch(/command lane database/);
  expect(failure).toMatchObject({ cause: "SqliteError", causeCode: "SQLITE_BUSY" });
  const stderr = laneway.stderr.join("\n");
  expect(stderr).not.toMatch(/database is locked/i);
  expect(stderr).not.toContain(dataDir);

  // The supervisor's restart, with the lock gone.
  const restarted = await startLanewayProcess({ dataDir, tokens, lanesConfig: false });
  cleanups.push(() => restarted.remove());
  const restartedHealth = restarted.clients.client(Health, { protocol: "grpc" });
  expect((await restartedHealth.check({ service: KmapCommandService.typeName })).status).toBe(SERVING);
  const report = await verifyCommands(kmapClients(restarted), model);
  await verifyNodes(kmapClients(restarted), model, report);

  const events = report.events.get(command.id)!;
  expect(events.map((e) => CommandEventKind[e.kind])).toEqual(["QUEUED", "APPLYING", "RECOVERED", "APPLYING", "COMMITTED"]);
  expect(report.records.get(command.id)!.attempts).toBe(2);
  // One transaction, committed by the process that failed: the restart's
  // second attempt was answered from Kweb history.
  expect(report.transactions.map((t) => t.provenance)).toEqual([command.id]);
  const recovered = events.find((e) => e.kind === CommandEventKind.RECOVERED)!;
  expect(timestampMs(report.transactions[0]!.committedAt!)).toBeLessThanOrEqual(timestampMs(recovered.changedAt!));

  restarted.clients.closeAll();
  const stopped = await restarted.kill("SIGTERM");
  expect(stopped, restarted.stderr.join("\n")).toEqual({ code: 0, signal: null });
});
