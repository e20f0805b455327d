import { randomBytes } from "node:crypto";
import { afterEach, expect, test } from "vitest";
import { create } from "@bufbuild/protobuf";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { kmapClients } from "../helpers/kmap-clients.js";
import { generateTokens, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * "Root causes in the log": when the runtime dies of a storage fault, the
 * log line names the SQLite code an operator acts on — not just Laneway's
 * own wrapper — and never a path.
 *
 * The fault is real: `laneway serve` runs under a file-size limit
 * (RLIMIT_FSIZE, set with prlimit, as a full quota would), so once the
 * Kweb's write-ahead log reaches it, SQLite's writes fail (EFBIG), the Kweb
 * commit fails, and the runtime ends. Which file reaches the limit first
 * does not matter: the lane's database failing ends the runtime too.
 */

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function logLines(laneway: ChildLaneway): Record<string, unknown>[] {
  return laneway.stderr.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
}

test("a runtime that dies of a storage fault logs the SQLite code, never a path", { timeout: 120_000 }, async () => {
  const laneway = await startLanewayProcess({ tokens: generateTokens(), lanesConfig: false, fileSizeLimit: 1_500_000 });
  cleanups.push(() => laneway.remove());
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void laneway.exited.then((result) => (exit = result));
  const { commands } = kmapClients(laneway);

  // Large commands fill the write-ahead logs in a few dozen applies.
  const body = "x".repeat(60_000);
  await waitFor(
    async () => {
      if (exit !== undefined) return true;
      await commands
        .submitCommand({ idempotencyId: randomBytes(16).toString("hex"), command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title: "large", body } } }) })
        .catch(() => undefined);
      return exit !== undefined;
    },
    { timeoutMs: 90_000, intervalMs: 10, what: "the runtime to fail on the file-size limit" },
  );
  laneway.clients.closeAll();

  expect(exit, laneway.stderr.join("\n")).toEqual({ code: 1, signal: null });
  const failure = logLines(laneway).find((line) => String(line.msg).includes("the Kmap command runtime failed"));
  expect(failure, laneway.stderr.join("\n")).toMatchObject({ level: "error", rootCause: "SqliteError" });
  expect(String(failure!.rootCode)).toMatch(/^SQLITE_(IOERR|FULL)/);
  const stderr = laneway.stderr.join("\n");
  expect(stderr).not.toContain(laneway.dataDir);
  expect(stderr).not.toMatch(/\n\s+at /);
});
