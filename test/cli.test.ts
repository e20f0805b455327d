import { execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { KmapCommandService } from "../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { runCli } from "../src/cli/main.js";
import { SERVER_SETTINGS } from "../src/config/index.js";
import { repoRoot, startLanewayInProcess, type InProcessLaneway } from "./helpers/laneway.js";
import { waitFor } from "./helpers/wait-for.js";

/**
 * The `laneway` command against a running server: it calls the service
 * through the generated client on each protocol, prints protobuf JSON, and
 * reports failures as one line with the code and reason and a nonzero exit
 * code, never echoing the token.
 */

const execFileAsync = promisify(execFile);
let laneway: InProcessLaneway;

beforeAll(async () => {
  laneway = await startLanewayInProcess();
});

afterAll(async () => {
  await laneway?.stop();
});

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileAsync(join(repoRoot, "bin/laneway.js"), args, {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANEWAY_ADDRESS: laneway.url, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe.each(["connect-json", "connect-binary", "grpc", "grpc-web"])("over %s", (protocol) => {
  test("lanes registry prints the caller's registry as JSON", async () => {
    const result = await cli(["lanes", "registry", "--protocol", protocol], { LANEWAY_TOKEN: laneway.tokens.beacon });
    expect(result.code).toBe(0);
    const registry = JSON.parse(result.stdout);
    expect(registry.project).toBe("beacon");
    expect(registry.lanes[0].groups).toEqual(["summarizers"]);
  });
});

test("--token-env selects the variable that holds the token", async () => {
  const result = await cli(["lanes", "registry", "--token-env", "ATLAS_LANE_TOKEN"], { ATLAS_LANE_TOKEN: laneway.tokens.atlas });
  expect(JSON.parse(result.stdout).project).toBe("atlas");
});

test("a refused call prints code, reason and message on one line and exits 1", async () => {
  const result = await cli(["lanes", "registry"], { LANEWAY_TOKEN: laneway.tokens.admin });
  expect(result.code).toBe(1);
  expect(result.stderr).toBe(
    "laneway: permission_denied (forbidden): the operator token cannot call laneway.lane.v1.LaneService: it needs a project token\n",
  );
  expect(result.stderr).not.toContain(laneway.tokens.admin);
});

test("a hive operation on a server without a hive exits 1 with unavailable", async () => {
  const result = await cli(["hive", "migrate", "dead", "rig"], { LANEWAY_TOKEN: laneway.tokens.admin });
  expect(result.code).toBe(1);
  expect(result.stderr).toMatch(/^laneway: unavailable \(swarm_unavailable\): the hive is not initialized/);
});

test("a refused publish exits 1 with its code and reason", async () => {
  const result = await cli(["lanes", "publish", "measurements", "--id", "one", "--kind", "event", "--schema", "s-v1", "--payload", "{}"], {
    LANEWAY_TOKEN: laneway.tokens.atlas,
  });
  expect(result.code).toBe(0);
  const again = await cli(["lanes", "publish", "measurements", "--id", "one", "--kind", "event", "--schema", "s-v1", "--payload", "{\"other\":1}"], {
    LANEWAY_TOKEN: laneway.tokens.atlas,
  });
  expect(again.code).toBe(1);
  expect(again.stderr).toMatch(/^laneway: aborted \(lane_conflict\): id one is already published/);
});

test("usage mistakes exit 2 without echoing arguments", async () => {
  const unknownOption = await cli(["lanes", "registry", "--token", "secret-value-0123456789"]);
  expect(unknownOption.code).toBe(2);
  expect(unknownOption.stderr).not.toContain("secret-value");
  const missing = await cli(["lanes", "claim", "measurements"]);
  expect(missing.code).toBe(2);
  expect(missing.stderr).toContain("usage:\n  laneway lanes claim <lane> <group>");
  const unknownCommand = await cli(["lanes", "frobnicate"]);
  expect(unknownCommand.code).toBe(2);
});

test("health and version need no token", async () => {
  const health = await cli(["health", "laneway.nats"]);
  expect(health.code).toBe(0);
  expect(JSON.parse(health.stdout).status).toBe("SERVING");
  const version = await cli(["version"]);
  expect(version.stdout).toMatch(/^laneway \d+\.\d+\.\d+\n$/);
});

describe("kmap", () => {
  const admin = () => ({ LANEWAY_TOKEN: laneway.tokens.admin });

  test("submit --wait follows a command to Committed, and verify checks its signature", async () => {
    const submitted = await cli(["kmap", "submit", "create-node", "--kind", "topic", "--title", "Glaciers", "--attr", "region=alps", "--wait"], admin());
    expect(submitted.code).toBe(0);
    const record = JSON.parse(submitted.stdout);
    expect(record.state).toBe("COMMAND_STATE_COMMITTED");
    expect(record.submission.idempotencyId).toMatch(/^[0-9a-f]{32}$/);
    const verified = await cli(["kmap", "verify", record.transactionId], admin());
    expect(verified.code).toBe(0);
    expect(verified.stdout).toMatch(new RegExp(`^transaction ${record.transactionId} verifies with key [0-9a-f]{32}\n$`));
    const node = await cli(["kmap", "node", record.createdNodeId, "--protocol", "grpc"], admin());
    expect(JSON.parse(node.stdout).node.attributes).toEqual({ region: "alps" });
  });

  test("a command that fails terminally exits 1 with its error", async () => {
    const missing = "f".repeat(32);
    const result = await cli(["kmap", "submit", "delete-node", missing, "--wait"], admin());
    expect(result.code).toBe(1);
    expect(result.stdout).toContain("COMMAND_STATE_FAILED");
    expect(result.stderr).toMatch(new RegExp(`failed: missing_node: node ${missing} does not exist\n$`));
  });

  test("get, list, nodes and watch read what submit wrote", async () => {
    const id = "c".repeat(32);
    const submitted = await cli(["kmap", "submit", "create-node", "--kind", "topic", "--title", "Fjords", "--id", id, "--wait"], admin());
    const record = JSON.parse(submitted.stdout);
    const got = JSON.parse((await cli(["kmap", "get", id], admin())).stdout);
    expect(got.record).toMatchObject({ state: "COMMAND_STATE_COMMITTED", transactionId: record.transactionId });
    const listed = JSON.parse((await cli(["kmap", "list", "--state", "committed", "--page-size", "1000"], admin())).stdout);
    expect(listed.records.map((r: { submission: { idempotencyId: string } }) => r.submission.idempotencyId)).toContain(id);
    const nodes = JSON.parse((await cli(["kmap", "nodes", "--page-size", "1000"], admin())).stdout);
    expect(nodes.nodes.map((n: { id: string }) => n.id)).toContain(record.createdNodeId);
    const history = JSON.parse((await cli(["kmap", "transactions", "--provenance", id], admin())).stdout);
    expect(history.transactions.map((t: { id: string }) => t.id)).toEqual([record.transactionId]);
    // watch streams until interrupted: read its first lines, then stop it.
    const watcher = spawn(join(repoRoot, "bin/laneway.js"), ["kmap", "watch", "--id", id], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANEWAY_ADDRESS: laneway.url, ...admin() },
    });
    let out = "";
    watcher.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    await waitFor(() => out.split("\n").filter(Boolean).length >= 3, { what: "three watched changes" });
    watcher.kill("SIGINT");
    const kinds = out.split("\n").filter(Boolean).map((line) => JSON.parse(line).kind);
    expect(kinds.slice(0, 3)).toEqual(["COMMAND_EVENT_KIND_QUEUED", "COMMAND_EVENT_KIND_APPLYING", "COMMAND_EVENT_KIND_COMMITTED"]);
  });

  test("an operation's usage mistakes exit 2", async () => {
    const noTitle = await cli(["kmap", "submit", "create-node", "--kind", "topic"], admin());
    expect(noTitle.code).toBe(2);
    expect(noTitle.stderr).toContain("--title is required for create-node");
    const unknown = await cli(["kmap", "submit", "rename-node"], admin());
    expect(unknown.code).toBe(2);
  });
});

test("submit --wait does not report success when the server ends the watch before the command finished", async () => {
  const own = await startLanewayInProcess({ lanesConfig: false });
  // A real second writer holds the Kweb file: the command stays Queued.
  const blocker = new Database(join(own.dataDir, "kmap", "kweb.sqlite"));
  blocker.exec("BEGIN IMMEDIATE");
  try {
    const id = "d".repeat(32);
    const running = execFileAsync(join(repoRoot, "bin/laneway.js"), ["kmap", "submit", "create-node", "--kind", "topic", "--title", "Held", "--id", id, "--wait"], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANEWAY_ADDRESS: own.url, LANEWAY_TOKEN: own.tokens.admin },
    }).then(
      () => ({ code: 0, stderr: "" }),
      (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
    );
    const commands = own.clients.client(KmapCommandService, { token: own.tokens.admin });
    // Deferred twice: the CLI has long been following it.
    await waitFor(async () => ((await commands.getCommand({ idempotencyId: id }).catch(() => undefined))?.record?.attempts ?? 0) >= 2, {
      what: "the command to be deferred twice",
    });
    await own.server.close();
    const result = await running;
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`the server ended the watch before command ${id} finished`);
  } finally {
    blocker.exec("ROLLBACK");
    blocker.close();
    await own.stop();
  }
});

describe("help", () => {
  async function help(argv: string[]): Promise<{ code: number; out: string }> {
    let out = "";
    const io = { env: {}, stdout: (t: string) => (out += t), stderr: (t: string) => (out += t), signal: new AbortController().signal };
    const code = await runCli(argv, io);
    return { code, out };
  }

  /** Readable: no line padded out to a long usage, and no trailing spaces. */
  function expectReadable(text: string): void {
    for (const line of text.split("\n")) {
      expect(line.length, line).toBeLessThanOrEqual(140);
      expect(line, "a line ends in spaces").toBe(line.trimEnd());
    }
  }

  test("laneway --help lists every command and group, aligned", async () => {
    const { code, out } = await help(["--help"]);
    expect(code).toBe(0);
    expectReadable(out);
    const rows = out.split("\n").filter((l) => l.startsWith("  laneway "));
    expect(rows.map((l) => l.split(/\s+/)[2])).toEqual(["serve", "version", "health", "lanes", "hive", "kmap"]);
    const summaryColumns = new Set(rows.map((l) => (/^ {2}laneway .*? {2,}\S/.exec(l)?.[0].length ?? 0) - 1));
    expect(summaryColumns.size).toBe(1);
  });

  test("laneway serve --help names every flag with its variable, and exits 0", async () => {
    const { code, out } = await help(["serve", "--help"]);
    expect(code).toBe(0);
    for (const flag of ["--listen", "--data-dir", "--nats-url", "--replicas", "--allow-unsafe-broker", "--lanes-config", "--demo", "--max-request-bytes", "--max-connections", "--headers-timeout", "--request-timeout", "--idle-timeout"]) {
      expect(out).toContain(flag);
    }
    expect(out).toContain("LANEWAY_MAX_REQUEST_BYTES");
    for (const setting of SERVER_SETTINGS) expect(out, setting.env).toContain(setting.env);
    for (const variable of ["LANEWAY_ADMIN_TOKEN", "LANEWAY_LOG_LEVEL", "LANEWAY_LOG_FORMAT", "LANEWAY_LOG_CALLS_SAMPLE", "LANEWAY_METRICS_TOKEN", "LANEWAY_METRICS_REFRESH_MS"]) {
      expect(out).toMatch(new RegExp(`^ +${variable} +\\S`, "m"));
    }
  });

  test("laneway serve refuses a bad log or metrics variable before it starts anything: exit 2, one line naming it", async () => {
    let err = "";
    const io = { env: { LANEWAY_LOG_LEVEL: "verbose" }, stdout: () => {}, stderr: (t: string) => (err += t), signal: new AbortController().signal };
    expect(await runCli(["serve", "--data-dir", "/nonexistent/laneway-never-created"], io)).toBe(2);
    expect(err).toBe("laneway: LANEWAY_LOG_LEVEL must be debug, info, warn or error\n");
  });

  test.each(["lanes", "hive", "kmap"])("every %s command answers --help, and so does the group", async (group) => {
    const groupHelp = await help([group, "--help"]);
    expect(groupHelp.code).toBe(0);
    expectReadable(groupHelp.out);
    const names = groupHelp.out.split("\n").filter((l) => l.startsWith(`  laneway ${group} `)).map((l) => l.split(/\s+/)[3]!);
    expect(names.length).toBeGreaterThan(3);
    for (const name of names) {
      const one = await help([group, name, "--help"]);
      expect(one.code, name).toBe(0);
      expect(one.out.startsWith(`usage:\n  laneway ${group} ${name}`), one.out).toBe(true);
      expectReadable(one.out);
    }
  });

  test("laneway health --help", async () => {
    const { code, out } = await help(["health", "--help"]);
    expect(code).toBe(0);
    expect(out).toContain("usage: laneway health [service]");
  });
});
