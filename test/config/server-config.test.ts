import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { ConfigError, loadServerConfig, Secret, SERVER_SETTINGS, ServerConfigError, type Env } from "../../src/config/index.js";
import { coreSettings } from "../../src/server/cores/index.js";
import { kmapBinding, type KmapSettings } from "../../src/server/cores/kmap.js";
import { swarmBinding } from "../../src/server/cores/swarm.js";
import { exampleLanesConfig } from "../../src/lanes/example-config.js";
import { loadStartupConfig } from "../../src/startup/index.js";

const work = mkdtempSync(join(tmpdir(), "laneway-server-config-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const creds = join(work, "svc.creds");
writeFileSync(creds, "not read by the loader\n", { mode: 0o600 });
const fakeBin = join(work, "fake-nats-server");
writeFileSync(fakeBin, "#!/bin/sh\n", { mode: 0o755 });
const notExecutable = join(work, "not-executable");
writeFileSync(notExecutable, "", { mode: 0o644 });
chmodSync(notExecutable, 0o644);

const ADMIN = "admin-token-0123456789abcdef0123456789abcdef";
const URL_SECRET = "pw-in-url";

// The server's settings and every core's, as `laneway serve` parses them.
const settings = coreSettings.flatMap((core) => core.declarations);
const load = (argv: string[], env: Env = {}) => loadServerConfig(argv, env, { cwd: work, settings });

/** The Kmap core's backlog bound, as its binding resolves it from the parsed settings. */
async function kmapMaxPending(argv: string[], env: Env = {}): Promise<number> {
  const server = load(argv, env);
  const resolved = await kmapBinding.settings!.resolve(server.declared, { env, cwd: work, server, demo: undefined });
  return (resolved as KmapSettings).maxPending;
}

function failure(argv: string[], env: Env = {}): ServerConfigError {
  try {
    load(argv, env);
  } catch (error) {
    expect(error).toBeInstanceOf(ServerConfigError);
    const message = (error as Error).message;
    for (const secret of [ADMIN, URL_SECRET, creds, "0.0.0.0"]) expect(message).not.toContain(secret);
    return error as ServerConfigError;
  }
  throw new Error("expected loadServerConfig to fail");
}

describe("defaults", () => {
  test("no flags and no environment", () => {
    const config = load([], {});
    expect(config).toEqual({
      listen: { host: "127.0.0.1", port: 7600 },
      dataDir: join(work, ".laneway"),
      natsServers: undefined,
      natsCredentialsEnv: undefined,
      natsCredentialsFile: undefined,
      natsServerBin: "/usr/sbin/nats-server",
      replicas: 1,
      allowUnsafeBroker: false,
      demo: false,
      shutdownTimeoutMs: 10_000,
      adminToken: undefined,
      wire: { maxRequestBytes: 16_777_216, maxConnections: 1024, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, idleTimeoutMs: 30_000 },
      observe: { logLevel: "info", logFormat: "json", callsSample: 0, metricsToken: undefined, metricsRefreshMs: 5_000 },
      declared: new Map(),
      cores: "all",
    });
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.listen)).toBe(true);
  });
});

describe("--allow-unsafe-broker", () => {
  test("the flag or LANEWAY_ALLOW_UNSAFE_BROKER=1 turns it on; a value other than 1 or 0 is refused", () => {
    expect(load(["--allow-unsafe-broker"], {}).allowUnsafeBroker).toBe(true);
    expect(load([], { LANEWAY_ALLOW_UNSAFE_BROKER: "1" }).allowUnsafeBroker).toBe(true);
    expect(load([], { LANEWAY_ALLOW_UNSAFE_BROKER: "0" }).allowUnsafeBroker).toBe(false);
    expect(() => load([], { LANEWAY_ALLOW_UNSAFE_BROKER: "yes" })).toThrow("LANEWAY_ALLOW_UNSAFE_BROKER must be 1 or 0");
  });
});

describe("precedence: flags > env > defaults", () => {
  const env: Env = {
    LANEWAY_LISTEN: "127.0.0.2:8000",
    LANEWAY_DATA_DIR: "env-data",
    LANEWAY_NATS_URL: "nats://env-broker:4222",
    LANEWAY_NATS_CREDENTIALS_ENV: "ENV_CREDS",
    ENV_CREDS: creds,
    FLAG_CREDS: "svc.creds",
    LANEWAY_REPLICAS: "3",
    LANEWAY_LANES_CONFIG: "env-lanes.json",
    LANEWAY_DEMO: "1",
    LANEWAY_SHUTDOWN_TIMEOUT: "30s",
    LANEWAY_NATS_SERVER_BIN: fakeBin,
    LANEWAY_ADMIN_TOKEN: ADMIN,
  };

  test("environment variables override defaults", () => {
    const config = load([], env);
    expect(config).toMatchObject({
      listen: { host: "127.0.0.2", port: 8000 },
      dataDir: join(work, "env-data"),
      natsServers: ["nats://env-broker:4222"],
      natsCredentialsEnv: "ENV_CREDS",
      natsCredentialsFile: creds,
      natsServerBin: fakeBin,
      replicas: 3,
      demo: true,
      shutdownTimeoutMs: 30_000,
    });
    expect(config.declared.get("lanes-config")).toEqual({ value: "env-lanes.json", source: "LANEWAY_LANES_CONFIG" });
    expect(config.adminToken).toBeInstanceOf(Secret);
    expect(config.adminToken?.equals(ADMIN)).toBe(true);
  });

  test("flags override environment variables", () => {
    const config = load(
      [
        "--listen", "[::1]:9000",
        "--data-dir=/var/lib/laneway",
        "--nats-url", "tls://a:4222,tls://b:4222",
        "--nats-credentials-env", "FLAG_CREDS",
        "--replicas", "5",
        "--lanes-config", "/etc/laneway/lanes.json",
        "--shutdown-timeout", "1m30s",
        "--nats-server-bin", "nats-server",
      ],
      { ...env, LANEWAY_DEMO: "0" },
    );
    expect(config).toMatchObject({
      listen: { host: "::1", port: 9000 },
      dataDir: "/var/lib/laneway",
      natsServers: ["tls://a:4222", "tls://b:4222"],
      natsCredentialsEnv: "FLAG_CREDS",
      natsCredentialsFile: creds,
      natsServerBin: "nats-server",
      replicas: 5,
      demo: false,
      shutdownTimeoutMs: 90_000,
    });
    expect(config.declared.get("lanes-config")).toEqual({ value: "/etc/laneway/lanes.json", source: "--lanes-config" });
  });

  test("--demo turns demo on whatever LANEWAY_DEMO says", () => {
    expect(load(["--demo"], { LANEWAY_DEMO: "0" }).demo).toBe(true);
    expect(load([], { LANEWAY_DEMO: "true" }).demo).toBe(true);
    expect(load([], { LANEWAY_DEMO: "false" }).demo).toBe(false);
  });

  test("settings mix: each falls back independently", () => {
    const config = load(["--replicas", "2"], { LANEWAY_NATS_URL: "nats://h:4222", LANEWAY_REPLICAS: "4", LANEWAY_LISTEN: "localhost:0" });
    expect(config.replicas).toBe(2);
    expect(config.listen).toEqual({ host: "localhost", port: 0 });
    expect(config.dataDir).toBe(join(work, ".laneway"));
  });

  test("an empty variable counts as unset; an empty flag is an error", () => {
    expect(load([], { LANEWAY_LISTEN: "", LANEWAY_ADMIN_TOKEN: "" })).toMatchObject({ listen: { port: 7600 }, adminToken: undefined });
    expect(failure(["--listen="]).message).toBe("--listen must not be empty");
  });

  test("a repeated flag takes its last value", () => {
    expect(load(["--replicas", "1", "--replicas", "1", "--listen", "127.0.0.1:1", "--listen", "127.0.0.1:2"]).listen.port).toBe(2);
  });
});

describe("errors name the flag or variable and never echo secrets or URLs", () => {
  const CASES: ReadonlyArray<readonly [string, string[], Env, string]> = [
    ["unknown flag", ["--lisen", "127.0.0.1:1"], {}, "unknown flag --lisen"],
    [
      "operator token as a flag",
      [`--admin-token=${ADMIN}`],
      {},
      "unknown flag --admin-token: the operator token is read only from the LANEWAY_ADMIN_TOKEN environment variable (command lines are visible in ps)",
    ],
    ["short flag", ["-l"], {}, "unknown flag -l (laneway serve has long flags only)"],
    ["positional argument", ["--demo", `nats://u:${URL_SECRET}@h:4222`], {}, "unexpected argument at position 2: laneway serve takes flags only"],
    ["positional after --", ["--", ADMIN], {}, "laneway serve takes no positional arguments (found some after --)"],
    ["missing value", ["--listen"], {}, "--listen needs a value"],
    ["value that looks like a flag", ["--listen", "--demo"], {}, '--listen needs a value (write --listen=VALUE for a value starting with "-")'],
    ["value for a boolean flag", ["--demo=1"], {}, "--demo takes no value (use --demo, or LANEWAY_DEMO=1)"],
    ["listen not loopback", ["--listen", "0.0.0.0:7600"], {}, "--listen must be a loopback address (127.0.0.0/8, [::1] or localhost): Laneway serves plain HTTP; put a TLS proxy in front of it for remote access"],
    ["listen from env not loopback", [], { LANEWAY_LISTEN: "example.com:80" }, "LANEWAY_LISTEN must be a loopback address (127.0.0.0/8, [::1] or localhost): Laneway serves plain HTTP; put a TLS proxy in front of it for remote access"],
    ["listen IPv6 not loopback", ["--listen", "[::]:7600"], {}, "--listen must be a loopback address (127.0.0.0/8, [::1] or localhost): Laneway serves plain HTTP; put a TLS proxy in front of it for remote access"],
    ["listen without port", ["--listen", "127.0.0.1"], {}, "--listen must be host:port, such as 127.0.0.1:7600 or [::1]:7600"],
    ["listen unbracketed IPv6", ["--listen", "::1:7600"], {}, "--listen must be host:port, such as 127.0.0.1:7600 or [::1]:7600 (bracket IPv6 addresses)"],
    ["listen bad host", ["--listen", "local_host:7600"], {}, "--listen must be host:port, such as 127.0.0.1:7600 or [::1]:7600"],
    ["listen port too large", ["--listen", "127.0.0.1:65536"], {}, "--listen port must be a number from 0 to 65535"],
    ["listen port not a number", ["--listen", "127.0.0.1:http"], {}, "--listen port must be a number from 0 to 65535"],
    ["nats url with credentials", ["--nats-url", `nats://svc:${URL_SECRET}@h:4222`], {}, "--nats-url must not contain credentials (user info); use --nats-credentials-env"],
    ["nats url env with credentials", [], { LANEWAY_NATS_URL: `nats://a:4222,tls://${URL_SECRET}@b:4222` }, "LANEWAY_NATS_URL must not contain credentials (user info) (entry 2 of 2); use --nats-credentials-env"],
    ["nats url wrong scheme", ["--nats-url", "ws://h:4222"], {}, "--nats-url must use the nats:// or tls:// scheme"],
    ["credentials env bad name", ["--nats-url", "nats://h:4222", "--nats-credentials-env", "NOT-A-NAME"], {}, "--nats-credentials-env must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$"],
    ["credentials env without url", ["--nats-credentials-env", "C"], { C: creds }, "--nats-credentials-env requires --nats-url (or LANEWAY_NATS_URL): the embedded nats-server admits only the credential Laneway generates for it"],
    ["credentials variable unset", ["--nats-url", "nats://h:4222", "--nats-credentials-env", "C"], {}, "--nats-credentials-env: C is not set (it must hold the path of a NATS credentials file)"],
    ["credentials file missing", [], { LANEWAY_NATS_URL: "nats://h:4222", LANEWAY_NATS_CREDENTIALS_ENV: "C", C: `${creds}.missing` }, "LANEWAY_NATS_CREDENTIALS_ENV: the credentials file named by C does not exist"],
    ["replicas zero", ["--replicas", "0"], {}, "--replicas must be at least 1, got 0"],
    ["replicas six", ["--nats-url", "nats://h:4222", "--replicas", "6"], {}, "--replicas must be at most 5, got 6"],
    ["replicas not a number", [], { LANEWAY_REPLICAS: "three" }, "LANEWAY_REPLICAS must be an integer from 1 to 5"],
    ["replicas negative", ["--replicas=-1"], {}, "--replicas must be an integer from 1 to 5"],
    ["replicas with embedded server", ["--replicas", "3"], {}, "--replicas above 1 requires --nats-url (or LANEWAY_NATS_URL): the embedded nats-server is a single node"],
    ["shutdown timeout too long", ["--shutdown-timeout", "11m"], {}, "--shutdown-timeout must be at most 10m0s, got 11m0s"],
    ["shutdown timeout negative", [], { LANEWAY_SHUTDOWN_TIMEOUT: "-1s" }, "LANEWAY_SHUTDOWN_TIMEOUT must be at least 0s, got -1s"],
    ["shutdown timeout not a duration", ["--shutdown-timeout", "10"], {}, '--shutdown-timeout must be a Go duration such as "10s" or "1m30s"'],
    ["demo env not boolean", [], { LANEWAY_DEMO: "yes" }, "LANEWAY_DEMO must be 1 or 0"],
    ["nats-server binary missing", ["--nats-server-bin", join(work, "nope")], {}, "--nats-server-bin does not name an executable file: install nats-server with apt-get install -y nats-server, or use --nats-url for an existing server"],
    ["nats-server binary not executable", [], { LANEWAY_NATS_SERVER_BIN: notExecutable }, "LANEWAY_NATS_SERVER_BIN does not name an executable file: install nats-server with apt-get install -y nats-server, or use --nats-url for an existing server"],
    ["operator token too short", [], { LANEWAY_ADMIN_TOKEN: "short" }, "LANEWAY_ADMIN_TOKEN must be 32 to 4096 bytes, got 5"],
    ["operator token too long", [], { LANEWAY_ADMIN_TOKEN: "x".repeat(4097) }, "LANEWAY_ADMIN_TOKEN must be 32 to 4096 bytes, got 4097"],
    ["operator token with a newline", [], { LANEWAY_ADMIN_TOKEN: `${"x".repeat(32)}\n` }, "LANEWAY_ADMIN_TOKEN must be visible ASCII without spaces"],
  ];

  test.each(CASES)("%s", (_name, argv, env, message) => {
    expect(failure(argv, env).message).toBe(message);
  });

  test("the error names the setting", () => {
    expect(failure([], { LANEWAY_REPLICAS: "9" }).setting).toBe("LANEWAY_REPLICAS");
    expect(failure(["--replicas", "9"], { LANEWAY_REPLICAS: "2" }).setting).toBe("--replicas");
  });
});

describe("accepted edge values", () => {
  test("listen forms", () => {
    expect(load(["--listen", "127.255.0.9:1"]).listen).toEqual({ host: "127.255.0.9", port: 1 });
    expect(load(["--listen", "[0:0:0:0:0:0:0:1]:65535"]).listen).toEqual({ host: "0:0:0:0:0:0:0:1", port: 65_535 });
    expect(load(["--listen", "LOCALHOST:7600"]).listen.host).toBe("LOCALHOST");
  });

  test("shutdown timeout bounds", () => {
    expect(load(["--shutdown-timeout", "0s"]).shutdownTimeoutMs).toBe(0);
    expect(load(["--shutdown-timeout", "0"]).shutdownTimeoutMs).toBe(0);
    expect(load(["--shutdown-timeout", "10m"]).shutdownTimeoutMs).toBe(600_000);
    expect(load(["--shutdown-timeout", "250ms"]).shutdownTimeoutMs).toBe(250);
  });

  test("the nats-server binary is not checked when an external server is used", () => {
    expect(load(["--nats-url", "nats://h:4222", "--nats-server-bin", join(work, "nope")]).natsServerBin).toBe(join(work, "nope"));
  });

  test("a relative binary path resolves against cwd", () => {
    expect(load(["--nats-server-bin", "./fake-nats-server"]).natsServerBin).toBe(fakeBin);
  });

  test("operator token bounds are inclusive", () => {
    expect(load([], { LANEWAY_ADMIN_TOKEN: "x".repeat(32) }).adminToken?.byteLength).toBe(32);
    expect(load([], { LANEWAY_ADMIN_TOKEN: "x".repeat(4096) }).adminToken?.byteLength).toBe(4096);
  });
});

describe("wire limits", () => {
  test("flags and variables set the read limit, connection cap and timeouts", () => {
    const config = load(["--max-request-bytes", "65536", "--headers-timeout", "2s", "--request-timeout", "5s"], { LANEWAY_MAX_CONNECTIONS: "64", LANEWAY_IDLE_TIMEOUT: "1m" });
    expect(config.wire).toEqual({ maxRequestBytes: 65_536, maxConnections: 64, headersTimeoutMs: 2_000, requestTimeoutMs: 5_000, idleTimeoutMs: 60_000 });
  });

  test.each([
    [["--max-request-bytes", "1000"], "--max-request-bytes must be an integer from 65536 to 1073741824, got 1000"],
    [["--max-request-bytes", "lots"], "--max-request-bytes must be an integer from 65536 to 1073741824"],
    [["--max-connections", "2"], "--max-connections must be an integer from 8 to 1000000, got 2"],
    [["--idle-timeout", "1ms"], "--idle-timeout must be from 100ms to 10m0s, got 1ms"],
    [["--request-timeout", "soon"], '--request-timeout must be a Go duration such as "10s" or "1m30s"'],
    [["--headers-timeout", "20s", "--request-timeout", "10s"], "--headers-timeout must be at most --request-timeout"],
  ])("%j is refused: %s", (argv, message) => {
    expect(failure(argv).message).toBe(message);
  });
});

describe("log and metrics settings", () => {
  test("their variables set the log level and format, the call sample, the metrics token and refresh; an empty one counts as unset", () => {
    const metrics = "metrics-token-that-is-a-secret";
    const config = load([], { LANEWAY_LOG_LEVEL: "debug", LANEWAY_LOG_FORMAT: "text", LANEWAY_LOG_CALLS_SAMPLE: "100", LANEWAY_METRICS_TOKEN: metrics, LANEWAY_METRICS_REFRESH_MS: "0" });
    expect(config.observe).toEqual({ logLevel: "debug", logFormat: "text", callsSample: 100, metricsToken: expect.any(Secret), metricsRefreshMs: 0 });
    expect(config.observe.metricsToken?.reveal()).toBe(metrics);
    expect(JSON.stringify(config)).not.toContain(metrics);
    expect(load([], { LANEWAY_LOG_LEVEL: "", LANEWAY_METRICS_TOKEN: "" }).observe).toMatchObject({ logLevel: "info", metricsToken: undefined });
  });

  test.each([
    [{ LANEWAY_LOG_LEVEL: "verbose" }, "LANEWAY_LOG_LEVEL must be debug, info, warn or error"],
    [{ LANEWAY_LOG_FORMAT: "xml" }, "LANEWAY_LOG_FORMAT must be json or text"],
    [{ LANEWAY_LOG_CALLS_SAMPLE: "-1" }, "LANEWAY_LOG_CALLS_SAMPLE must be an integer from 0 to 1000000000"],
    [{ LANEWAY_METRICS_REFRESH_MS: "soon" }, "LANEWAY_METRICS_REFRESH_MS must be an integer from 0 to 3600000"],
    [{ LANEWAY_METRICS_REFRESH_MS: "7200000" }, "LANEWAY_METRICS_REFRESH_MS must be an integer from 0 to 3600000, got 7200000"],
    [{ LANEWAY_METRICS_TOKEN: "t".repeat(4097) }, "LANEWAY_METRICS_TOKEN must be at most 4096 bytes"],
  ])("%j is refused: %s", (env, message) => {
    const error = failure([], env);
    expect(error.message).toBe(message);
    expect(error.message).not.toContain("t".repeat(64));
  });
});

describe("served cores", () => {
  test("--cores and LANEWAY_CORES choose all (the default) or named cores, which need an external broker; the flag wins", () => {
    expect(load([]).cores).toBe("all");
    expect(load(["--cores", "lanes", "--nats-url", "nats://127.0.0.1:4222"]).cores).toEqual(["lanes"]);
    expect(load(["--nats-url", "nats://127.0.0.1:4222"], { LANEWAY_CORES: "lanes" }).cores).toEqual(["lanes"]);
    expect(load(["--cores", "all"], { LANEWAY_CORES: "lanes" }).cores).toBe("all");
    expect(failure(["--cores", "lanes"]).message).toBe(
      "--cores lanes requires --nats-url (or LANEWAY_NATS_URL): a replica serves the full instance's broker",
    );
    for (const bad of ["", "Lanes", "lanes,lanes", "lanes,", "lanes kmap"]) {
      expect(failure(["--cores", bad, "--nats-url", "nats://127.0.0.1:4222"]).message, bad).toMatch(/^--cores must (be all or a comma-separated list of distinct core names|not be empty)$/);
    }
  });
});

describe("Kmap backlog bound", () => {
  test("--kmap-max-pending and LANEWAY_KMAP_MAX_PENDING set it; the flag wins", async () => {
    expect(await kmapMaxPending([])).toBe(10_000);
    expect(await kmapMaxPending(["--kmap-max-pending", "25"])).toBe(25);
    expect(await kmapMaxPending([], { LANEWAY_KMAP_MAX_PENDING: "7" })).toBe(7);
    expect(await kmapMaxPending(["--kmap-max-pending", "1"], { LANEWAY_KMAP_MAX_PENDING: "7" })).toBe(1);
  });

  test.each([
    [["--kmap-max-pending", "0"], "--kmap-max-pending must be an integer from 1 to 10000000, got 0"],
    [["--kmap-max-pending", "-3"], "--kmap-max-pending needs a value (write --kmap-max-pending=VALUE for a value starting with \"-\")"],
    [["--kmap-max-pending", "many"], "--kmap-max-pending must be an integer from 1 to 10000000"],
    [["--kmap-max-pending", "20000000"], "--kmap-max-pending must be an integer from 1 to 10000000, got 20000000"],
  ])("%j is refused: %s", async (argv, message) => {
    const error = await kmapMaxPending(argv).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerConfigError);
    expect((error as Error).message).toBe(message);
    for (const secret of [ADMIN, URL_SECRET, creds]) expect((error as Error).message).not.toContain(secret);
  });
});

describe("the hive hub's variables", () => {
  const hubSettings = async (env: Env) => {
    const server = load([], env);
    return (await swarmBinding.settings!.resolve(server.declared, { env, cwd: work, server, demo: undefined })) as { hub: Record<string, unknown>; lanes: unknown };
  };

  test("are read with the flags, before anything starts, and only those the binding declares", async () => {
    const resolved = await hubSettings({
      AGENTIHOOKS_NATS_SIGNER: "hub:main",
      AGENTIHOOKS_BUS_SCOPED: "1",
      AGENTIHOOKS_BUS: "nats",
      LANEWAY_HIVE_SLOT_ACCOUNTS: "claude-a:2,claude-b:3",
      LANEWAY_HIVE_SLOTS_PER_HIVE: "2",
      AGENTIHOOKS_BUS_BIND_TYPO: "1",
    });
    expect(resolved.hub).toMatchObject({ signer: "hub:main", redisUrl: undefined, busMode: { scoped: true, bind: false, legacy: true } });
    expect(resolved.hub.slotPolicy).toEqual({ accounts: new Map([["claude-a", 2], ["claude-b", 3]]), maxPerHive: 2 });
    expect(resolved.lanes).toBeUndefined();
    expect((await hubSettings({})).hub).toMatchObject({ signer: undefined, busMode: { scoped: false, bind: false, legacy: false } });
  });

  test.each([
    [{ AGENTIHOOKS_BUS_SCOPED: "yes" }, "the hive hub cannot start: AGENTIHOOKS_BUS_SCOPED must be 1 or 0"],
    [{ LANEWAY_HIVE_SLOTS_PER_HIVE: "0" }, "the hive hub cannot start: LANEWAY_HIVE_SLOTS_PER_HIVE must be a whole number from 1 to 999999"],
    [{ HIVE_LANES_LANE: "work" }, "the hive hub cannot start: the hive lane adapter needs HIVE_LANES_ADDRESS, HIVE_LANES_TOKEN, HIVE_LANES_LANE, HIVE_LANES_GROUP together; HIVE_LANES_ADDRESS, HIVE_LANES_TOKEN, HIVE_LANES_GROUP are not set"],
  ])("a bad value stops startup as a configuration error naming its variable, hive or not: %j", async (env, message) => {
    const error = await hubSettings(env).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(message);
  });
});

describe("a replica's settings", () => {
  test("a replica resolves only the cores it serves: a bad hive variable stops a full instance, not a lanes-only replica", async () => {
    const env = { AGENTIHOOKS_BUS_SCOPED: "yes", LANEWAY_NATS_URL: "nats://127.0.0.1:4999" };
    const full = await loadStartupConfig([], env, { cores: coreSettings }).catch((e: unknown) => e);
    expect(full).toBeInstanceOf(ConfigError);
    expect((full as Error).message).toBe("the hive hub cannot start: AGENTIHOOKS_BUS_SCOPED must be 1 or 0");
    const lanesConfig = join(work, "replica-lanes.json");
    writeFileSync(lanesConfig, JSON.stringify(exampleLanesConfig()));
    const tokens = { ATLAS_LANE_TOKEN: "a".repeat(32), BEACON_LANE_TOKEN: "b".repeat(32) };
    const replica = await loadStartupConfig(["--cores", "lanes", "--lanes-config", lanesConfig], { ...env, ...tokens }, { cores: coreSettings });
    expect([...replica.cores.keys()]).toEqual(["lanes"]);
  });
});

describe("every setting is documented", () => {
  test("docs/operations.md's settings tables name every flag and variable the server and the cores declare, and no other", () => {
    const doc = readFileSync(join(import.meta.dirname, "../../docs/operations.md"), "utf8");
    const documented = new Set([...doc.matchAll(/^\| (?:`--([a-z-]+)`|—) \| `([A-Z0-9_]+)(?:=1)?`/gm)].map((m) => m[1] ?? m[2]));
    const listed = [...doc.matchAll(/^\| `([A-Z][A-Z0-9_]+)`(?:, `([A-Z][A-Z0-9_]+)`)*/gm)].flatMap((m) => m[0].match(/[A-Z][A-Z0-9_]+/g) ?? []);
    for (const setting of [...SERVER_SETTINGS, ...settings]) {
      if (setting.flag !== undefined) expect(documented, `--${setting.flag}`).toContain(setting.flag);
      else expect([...listed, ...documented], setting.env).toContain(setting.env);
    }
    const declaredFlags = new Set([...SERVER_SETTINGS, ...settings].flatMap((s) => (s.flag === undefined ? [] : [s.flag])));
    for (const flag of [...doc.matchAll(/^\| `--([a-z-]+)`/gm)].map((m) => m[1]!)) expect(declaredFlags, `--${flag} in the docs`).toContain(flag);
    const declaredVariables = new Set([...SERVER_SETTINGS, ...settings].filter((s) => s.flag === undefined).map((s) => s.env));
    for (const variable of [...doc.matchAll(/^\| — \| `([A-Z0-9_]+)`/gm)].map((m) => m[1]!)) expect(declaredVariables, `${variable} in the docs`).toContain(variable);
  });
});
