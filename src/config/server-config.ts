/**
 * Settings of `laneway serve`: flags, `LANEWAY_*` variables, defaults —
 * the server's own, and the raw values of those each core declares.
 *
 * Precedence is flag > environment variable > default, per setting. An
 * empty environment variable counts as unset (`FOO=` usually means
 * "cleared"); an empty flag value is an error. A repeated flag takes its
 * last value, as `parseArgs` does.
 *
 * Messages name the flag or variable a bad value came from and never echo
 * the value: it may be a URL with credentials, a path that reveals layout,
 * or a token typed into the wrong place.
 *
 * Decisions the brief left open:
 * - `--listen` accepts loopback addresses only (127.0.0.0/8, [::1],
 *   localhost). Laneway serves plain HTTP with bearer tokens, and a
 *   specification's listener "allows only loopback plain HTTP"; remote
 *   access goes through a TLS proxy. Port 0 (pick a free port) is allowed.
 * - `--replicas` above 1 requires `--nats-url`: the embedded nats-server is
 *   a single node, and JetStream would refuse the streams later anyway.
 * - `--nats-credentials-env` requires `--nats-url`: the embedded server
 *   admits only the credential Laneway generates for it (a user nkey
 *   whose seed stays in the data directory).
 * - `--nats-server-bin` is checked (exists, executable) only when the
 *   embedded server will be started; a bare name is looked up on PATH at
 *   spawn time and not checked here.
 * - The operator token comes only from `LANEWAY_ADMIN_TOKEN`; there is no
 *   flag, because command lines are visible to every user through `ps`.
 */
import { accessSync, constants, statSync } from "node:fs";
import { isIPv4, isIPv6 } from "node:net";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import type { LogFormat, LogLevel } from "../log/logger.js";
import { resolveCredentialsFile } from "./credentials-file.js";
import { formatGoDuration, MILLISECOND, MINUTE, nanosToMillis, parseGoDuration } from "./duration.js";
import { ENV_NAME_RULE, envValue, isEnvName, type Env } from "./env-name.js";
import { ServerConfigError } from "./errors.js";
import { parseNatsServers } from "./nats-url.js";
import { Secret } from "./secret.js";
import { parseCount, settingKey, settingsHelp, type RawSetting, type SettingDeclaration, type SettingsSection, type SettingValues } from "./settings.js";
import { ADMIN_TOKEN_ENV, tokenProblem } from "./tokens.js";

export const SERVER_DEFAULTS = Object.freeze({
  listen: "127.0.0.1:7600",
  dataDir: ".laneway",
  replicas: 1,
  shutdownTimeout: "10s",
  natsServerBin: "/usr/sbin/nats-server",
  maxRequestBytes: 16 * 1024 * 1024,
  maxConnections: 1024,
  headersTimeout: "10s",
  requestTimeout: "30s",
  idleTimeout: "30s",
  metricsRefreshMs: 5_000,
});

/**
 * What every connection and request may cost, before and after
 * authentication alike (docs/operations.md, "Limits for slow and hostile
 * peers").
 */
export interface WireLimits {
  /** The largest request message, after decompression; larger ones are refused as they stream in. */
  readonly maxRequestBytes: number;
  /** Open connections at once; past it the oldest connection that has not sent a request is dropped, or the new one refused. */
  readonly maxConnections: number;
  /** From a connection's (or request's) first byte until its request headers are complete. */
  readonly headersTimeoutMs: number;
  /** From a request's first byte until its whole body has arrived. */
  readonly requestTimeoutMs: number;
  /** How long an HTTP/2 session may stay without open streams, and a response write may stall on a peer that does not read. */
  readonly idleTimeoutMs: number;
}

const WIRE_RANGES = {
  maxRequestBytes: { min: 64 * 1024, max: 1024 * 1024 * 1024 },
  maxConnections: { min: 8, max: 1_000_000 },
  timeout: { min: 100n * MILLISECOND, max: 10n * MINUTE },
};

/**
 * How the server is observed (docs/operations.md, "Logs" and "Metrics"):
 * read from variables only, checked with the flags.
 */
export interface ObserveSettings {
  /** The lowest level written (`LANEWAY_LOG_LEVEL`). */
  readonly logLevel: LogLevel;
  /** One JSON object per line, or text for a person (`LANEWAY_LOG_FORMAT`). */
  readonly logFormat: LogFormat;
  /** Every n-th successful call is logged at info; 0: successes only at debug (`LANEWAY_LOG_CALLS_SAMPLE`). */
  readonly callsSample: number;
  /** The bearer token /metrics requires; undefined: /metrics is open (`LANEWAY_METRICS_TOKEN`). */
  readonly metricsToken: Secret | undefined;
  /** How often figures read from the broker may be read again, in ms (`LANEWAY_METRICS_REFRESH_MS`). */
  readonly metricsRefreshMs: number;
}

const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];
const METRICS_TOKEN_MAX_BYTES = 4096;
const OBSERVE_RANGES = {
  callsSample: { min: 0, max: 1_000_000_000 },
  metricsRefreshMs: { min: 0, max: 3_600_000 },
};

const MIN_REPLICAS = 1;
const MAX_REPLICAS = 5;
const MAX_SHUTDOWN_TIMEOUT = 10n * MINUTE;

export interface ListenAddress {
  /** Host without brackets (`127.0.0.1`, `::1`, `localhost`). */
  readonly host: string;
  /** 0–65535; 0 asks the OS for a free port. */
  readonly port: number;
}

export interface ServerConfig {
  readonly listen: ListenAddress;
  /** Absolute data directory (JetStream store of the embedded server, SQLite, demo files). */
  readonly dataDir: string;
  /** External NATS servers; `undefined` means start the embedded nats-server. */
  readonly natsServers: readonly string[] | undefined;
  /** The variable that named the NATS credentials file, if any. */
  readonly natsCredentialsEnv: string | undefined;
  /** Absolute, existing, readable NATS credentials file, if any. */
  readonly natsCredentialsFile: string | undefined;
  /** nats-server executable for the embedded server (absolute path, or a bare name looked up on PATH). */
  readonly natsServerBin: string;
  /** Replica count of streams and KV buckets. */
  readonly replicas: number;
  /** `--allow-unsafe-broker`: run `--replicas` above 1 on a nats-server with known defects (src/nats/version-gate.ts), with a warning. */
  readonly allowUnsafeBroker: boolean;
  /** Demo mode: create/reuse the demo files (a core's example configuration, tokens.env) under the data directory. */
  readonly demo: boolean;
  /** Grace period for in-flight requests on shutdown, in whole milliseconds. */
  readonly shutdownTimeoutMs: number;
  /** The operator token (every core's operator RPCs); `undefined` disables those RPCs. */
  readonly adminToken: Secret | undefined;
  /** Read limits and timeouts for every connection and request. */
  readonly wire: WireLimits;
  /** The log and metrics settings. */
  readonly observe: ObserveSettings;
  /** The values of the settings the cores declare (`ServerConfigOptions.settings`), by flag; each core resolves its own. */
  readonly declared: SettingValues;
  /** The cores this process serves (the server's core list decides what the names mean). */
  readonly cores: CoreSelection;
}

/**
 * The value of `--cores`: every core, or the names of the cores this
 * process serves (a replica beside one full instance; the server checks
 * the names against its core list).
 */
export type CoreSelection = "all" | readonly string[];

export interface ServerConfigOptions {
  /** Directory relative paths resolve against (default `process.cwd()`). */
  readonly cwd?: string;
  /** Settings the cores declare, parsed with the server's own (see settings.ts). */
  readonly settings?: readonly SettingDeclaration[];
}

/** Flag name (without `--`) → its variable, parseArgs type, value name and help text. */
const SETTINGS = {
  listen: { env: "LANEWAY_LISTEN", type: "string", value: "HOST:PORT", help: `loopback address to serve on (default ${SERVER_DEFAULTS.listen})` },
  "data-dir": { env: "LANEWAY_DATA_DIR", type: "string", value: "DIR", help: `NATS store, SQLite files and demo files (default ${SERVER_DEFAULTS.dataDir})` },
  "nats-url": { env: "LANEWAY_NATS_URL", type: "string", value: "URL", help: "an existing NATS server or cluster (comma-separated); default: start an embedded nats-server" },
  "nats-credentials-env": { env: "LANEWAY_NATS_CREDENTIALS_ENV", type: "string", value: "NAME", help: "variable holding the path of a NATS .creds file (with --nats-url)" },
  replicas: { env: "LANEWAY_REPLICAS", type: "string", value: "N", help: "replicas of every stream and KV bucket, 1 to 5 (above 1 needs --nats-url)" },
  "allow-unsafe-broker": {
    env: "LANEWAY_ALLOW_UNSAFE_BROKER",
    type: "boolean",
    value: "",
    help: "start --replicas above 1 on a nats-server older than 2.9.21 (known to lease twice and lose records), with a warning",
  },
  demo: { env: "LANEWAY_DEMO", type: "boolean", value: "", help: "serve the demo: example configuration and generated tokens in <data dir>/tokens.env" },
  "shutdown-timeout": { env: "LANEWAY_SHUTDOWN_TIMEOUT", type: "string", value: "D", help: `how long in-flight calls may finish on SIGTERM (default ${SERVER_DEFAULTS.shutdownTimeout})` },
  "nats-server-bin": { env: "LANEWAY_NATS_SERVER_BIN", type: "string", value: "PATH", help: `nats-server for the embedded broker (default ${SERVER_DEFAULTS.natsServerBin})` },
  "max-request-bytes": { env: "LANEWAY_MAX_REQUEST_BYTES", type: "string", value: "N", help: `largest request message, after decompression (default ${SERVER_DEFAULTS.maxRequestBytes})` },
  "max-connections": { env: "LANEWAY_MAX_CONNECTIONS", type: "string", value: "N", help: `open connections at most (default ${SERVER_DEFAULTS.maxConnections})` },
  "headers-timeout": { env: "LANEWAY_HEADERS_TIMEOUT", type: "string", value: "D", help: `time to send the request headers (default ${SERVER_DEFAULTS.headersTimeout})` },
  "request-timeout": { env: "LANEWAY_REQUEST_TIMEOUT", type: "string", value: "D", help: `time to send a whole request (default ${SERVER_DEFAULTS.requestTimeout})` },
  "idle-timeout": { env: "LANEWAY_IDLE_TIMEOUT", type: "string", value: "D", help: `idle HTTP/2 session, or a response the peer stops reading (default ${SERVER_DEFAULTS.idleTimeout})` },
  cores: {
    env: "LANEWAY_CORES",
    type: "string",
    value: "all|NAME[,NAME…]",
    help: "cores to serve: all (default), or the named cores only, for a replica beside one full instance (needs --nats-url)",
  },
} as const;

/**
 * The server's settings read only from a variable: the operator token and
 * the metrics token are secrets (command lines are visible in ps), and the
 * log and metrics settings are read with them.
 */
const VARIABLES = {
  adminToken: { env: ADMIN_TOKEN_ENV, type: "string", value: "", help: "the operator token (32 to 4,096 bytes); unset: operator RPCs refuse every caller" },
  logLevel: { env: "LANEWAY_LOG_LEVEL", type: "string", value: "", help: "debug, info (default), warn or error" },
  logFormat: { env: "LANEWAY_LOG_FORMAT", type: "string", value: "", help: "json (default), or text for a person at a terminal" },
  logCallsSample: { env: "LANEWAY_LOG_CALLS_SAMPLE", type: "string", value: "", help: `log every n-th successful call at info, 0 to ${OBSERVE_RANGES.callsSample.max} (default 0: successes only at debug)` },
  metricsToken: { env: "LANEWAY_METRICS_TOKEN", type: "string", value: "", help: `a bearer token /metrics then requires (1 to ${METRICS_TOKEN_MAX_BYTES} bytes; default: /metrics is open)` },
  metricsRefreshMs: {
    env: "LANEWAY_METRICS_REFRESH_MS",
    type: "string",
    value: "",
    help: `how often a scrape may read again what /metrics reads from the broker, in ms, 0 to ${OBSERVE_RANGES.metricsRefreshMs.max} (default ${SERVER_DEFAULTS.metricsRefreshMs})`,
  },
} as const satisfies Record<string, SettingDeclaration>;

/** The server's own settings, as declarations (for help and the operations table): its flags, then its variables. */
export const SERVER_SETTINGS: readonly SettingDeclaration[] = [...Object.entries(SETTINGS).map(([flag, s]) => ({ flag, ...s })), ...Object.values(VARIABLES)];

/** `laneway serve --help`: every flag with its variable and meaning, aligned: the server's, then each core's section. */
export function serveHelp(cores: readonly SettingsSection[] = []): string {
  return [
    "usage: laneway serve [flags]",
    "",
    "Serves every Laneway service on one port until SIGTERM or SIGINT. Each flag",
    "can also be set by its environment variable; the flag wins. Durations are Go",
    "durations (10s, 1m30s). The operator token is read only from",
    `${ADMIN_TOKEN_ENV} (command lines are visible in ps).`,
    "",
    ...settingsHelp([{ title: "", settings: SERVER_SETTINGS }, ...cores]),
    "",
    "Exit codes: 0 clean shutdown; 1 startup, runtime or shutdown failure; 2 configuration error.",
    "",
  ].join("\n");
}

type SettingName = keyof typeof SETTINGS;
type StringSetting = { [K in SettingName]: (typeof SETTINGS)[K]["type"] extends "string" ? K : never }[SettingName];

type Raw = RawSetting;

/**
 * Resolve the settings of `laneway serve` from `argv` (the arguments after
 * `serve`) and `env`. Touches the file system only to check the NATS
 * credentials file and the nats-server binary.
 */
export function loadServerConfig(argv: readonly string[], env: Env, options: ServerConfigOptions = {}): ServerConfig {
  const cwd = options.cwd ?? process.cwd();
  const declarations = options.settings ?? [];
  const flags = parseFlags(argv, declarations);

  const pick = (name: StringSetting): Raw | undefined => {
    const flag = flags[name];
    if (typeof flag === "string") {
      if (flag === "") throw new ServerConfigError(`--${name} must not be empty`, `--${name}`);
      return { value: flag, source: `--${name}` };
    }
    const variable = SETTINGS[name].env;
    const value = envValue(env, variable);
    return value === undefined ? undefined : { value, source: variable };
  };

  const listen = parseListen(pick("listen") ?? { value: SERVER_DEFAULTS.listen, source: "--listen" });
  const dataDir = resolve(cwd, (pick("data-dir") ?? { value: SERVER_DEFAULTS.dataDir }).value);

  const natsUrl = pick("nats-url");
  let natsServers: readonly string[] | undefined;
  if (natsUrl !== undefined) {
    const parsed = parseNatsServers(natsUrl.value);
    if (!parsed.ok) {
      const hint = parsed.reason.startsWith("must not contain credentials") ? "; use --nats-credentials-env" : "";
      throw new ServerConfigError(`${natsUrl.source} ${parsed.reason}${hint}`, natsUrl.source);
    }
    natsServers = Object.freeze([...parsed.servers]);
  }

  const credentialsEnv = pick("nats-credentials-env");
  let natsCredentialsFile: string | undefined;
  if (credentialsEnv !== undefined) {
    if (!isEnvName(credentialsEnv.value)) {
      throw new ServerConfigError(
        `${credentialsEnv.source} must be an environment variable name matching ${ENV_NAME_RULE}`,
        credentialsEnv.source,
      );
    }
    if (natsServers === undefined) {
      throw new ServerConfigError(
        `${credentialsEnv.source} requires --nats-url (or LANEWAY_NATS_URL): the embedded nats-server admits only the credential Laneway generates for it`,
        credentialsEnv.source,
      );
    }
    const resolved = resolveCredentialsFile(credentialsEnv.value, env, cwd);
    if (!resolved.ok) throw new ServerConfigError(`${credentialsEnv.source}: ${resolved.reason}`, credentialsEnv.source);
    natsCredentialsFile = resolved.path;
  }

  const replicasRaw = pick("replicas");
  const replicas = parseReplicas(replicasRaw);
  if (replicasRaw !== undefined && replicas > 1 && natsServers === undefined) {
    throw new ServerConfigError(
      `${replicasRaw.source} above 1 requires --nats-url (or LANEWAY_NATS_URL): the embedded nats-server is a single node`,
      replicasRaw.source,
    );
  }

  const demo = flags.demo === true || parseBooleanEnv(env, SETTINGS.demo.env);
  const allowUnsafeBroker = flags["allow-unsafe-broker"] === true || parseBooleanEnv(env, SETTINGS["allow-unsafe-broker"].env);
  const shutdownTimeoutMs = parseShutdownTimeout(pick("shutdown-timeout"));
  const natsServerBin = resolveServerBin(
    pick("nats-server-bin") ?? { value: SERVER_DEFAULTS.natsServerBin, source: "--nats-server-bin" },
    cwd,
    natsServers === undefined,
  );
  const adminToken = readAdminToken(env);
  const observe = readObserveSettings(env);
  const wire: WireLimits = Object.freeze({
    maxRequestBytes: parseCount(pick("max-request-bytes"), SERVER_DEFAULTS.maxRequestBytes, WIRE_RANGES.maxRequestBytes),
    maxConnections: parseCount(pick("max-connections"), SERVER_DEFAULTS.maxConnections, WIRE_RANGES.maxConnections),
    headersTimeoutMs: parseTimeout(pick("headers-timeout"), SERVER_DEFAULTS.headersTimeout),
    requestTimeoutMs: parseTimeout(pick("request-timeout"), SERVER_DEFAULTS.requestTimeout),
    idleTimeoutMs: parseTimeout(pick("idle-timeout"), SERVER_DEFAULTS.idleTimeout),
  });
  if (wire.headersTimeoutMs > wire.requestTimeoutMs) {
    throw new ServerConfigError("--headers-timeout must be at most --request-timeout", "--headers-timeout");
  }
  const declared = new Map<string, Raw>();
  for (const setting of declarations) {
    const flag = setting.flag === undefined ? undefined : flags[setting.flag];
    if (typeof flag === "string" && flag === "") throw new ServerConfigError(`--${setting.flag} must not be empty`, `--${setting.flag}`);
    if (flag !== undefined) declared.set(settingKey(setting), { value: String(flag), source: `--${setting.flag}` });
    else {
      const value = envValue(env, setting.env);
      if (value !== undefined) declared.set(settingKey(setting), { value, source: setting.env });
    }
  }
  const cores = parseCores(pick("cores"), natsServers !== undefined);

  return Object.freeze({
    listen,
    dataDir,
    natsServers,
    natsCredentialsEnv: credentialsEnv?.value,
    natsCredentialsFile,
    natsServerBin,
    replicas,
    allowUnsafeBroker,
    demo,
    shutdownTimeoutMs,
    adminToken,
    wire,
    observe,
    declared,
    cores,
  });
}

/** The log and metrics settings, from their variables; a bad value is a configuration error naming its variable. */
function readObserveSettings(env: Env): ObserveSettings {
  const raw = (setting: { env: string }): Raw | undefined => {
    const value = envValue(env, setting.env);
    return value === undefined ? undefined : { value, source: setting.env };
  };
  const level = raw(VARIABLES.logLevel);
  if (level !== undefined && !LOG_LEVELS.includes(level.value as LogLevel)) {
    throw new ServerConfigError(`${level.source} must be debug, info, warn or error`, level.source);
  }
  const format = raw(VARIABLES.logFormat);
  if (format !== undefined && format.value !== "json" && format.value !== "text") {
    throw new ServerConfigError(`${format.source} must be json or text`, format.source);
  }
  const token = raw(VARIABLES.metricsToken);
  if (token !== undefined && Buffer.byteLength(token.value) > METRICS_TOKEN_MAX_BYTES) {
    throw new ServerConfigError(`${token.source} must be at most ${METRICS_TOKEN_MAX_BYTES} bytes`, token.source);
  }
  return Object.freeze({
    logLevel: (level?.value ?? "info") as LogLevel,
    logFormat: (format?.value ?? "json") as LogFormat,
    callsSample: parseCount(raw(VARIABLES.logCallsSample), 0, OBSERVE_RANGES.callsSample),
    metricsToken: token === undefined ? undefined : new Secret(token.value),
    metricsRefreshMs: parseCount(raw(VARIABLES.metricsRefreshMs), SERVER_DEFAULTS.metricsRefreshMs, OBSERVE_RANGES.metricsRefreshMs),
  });
}

function parseCores(raw: Raw | undefined, externalNats: boolean): CoreSelection {
  if (raw === undefined || raw.value === "all") return "all";
  const names = raw.value.split(",");
  if (names.some((name) => !/^[a-z][a-z0-9-]{0,31}$/.test(name)) || new Set(names).size !== names.length) {
    throw new ServerConfigError(`${raw.source} must be all or a comma-separated list of distinct core names`, raw.source);
  }
  if (!externalNats) {
    throw new ServerConfigError(`${raw.source} ${raw.value} requires --nats-url (or LANEWAY_NATS_URL): a replica serves the full instance's broker`, raw.source);
  }
  return Object.freeze(names);
}

type Flags = Partial<Record<string, string | boolean>>;

function parseFlags(argv: readonly string[], declarations: readonly SettingDeclaration[]): Flags {
  const options: Record<string, { type: "string" | "boolean" }> = {};
  for (const [name, setting] of Object.entries(SETTINGS)) options[name] = { type: setting.type };
  for (const setting of declarations) if (setting.flag !== undefined) options[setting.flag] = { type: setting.type };
  try {
    const { values } = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false });
    return values as Flags;
  } catch {
    // parseArgs messages quote the offending argument, which may be a
    // secret or a URL; explain the problem without it.
    throw new ServerConfigError(diagnoseArgs(argv, options));
  }
}

/** A message for an argument list parseArgs rejected, quoting flag names only, never values. */
function diagnoseArgs(argv: readonly string[], known: Readonly<Record<string, { type: "string" | "boolean" }>>): string {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "--") return "laneway serve takes no positional arguments (found some after --)";
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      const name = arg.slice(2, eq === -1 ? undefined : eq);
      if (!Object.hasOwn(known, name)) {
        if (/token|secret|password/i.test(name)) {
          return `unknown flag --${clipName(name)}: the operator token is read only from the ${ADMIN_TOKEN_ENV} environment variable (command lines are visible in ps)`;
        }
        return `unknown flag --${clipName(name)}`;
      }
      if (known[name]!.type === "boolean") {
        const variable = Object.hasOwn(SETTINGS, name) ? SETTINGS[name as SettingName].env : `its variable`;
        if (eq !== -1) return `--${name} takes no value (use --${name}, or ${variable}=1)`;
        continue;
      }
      if (eq === -1) {
        const next = argv[i + 1];
        if (next === undefined) return `--${name} needs a value`;
        if (next.startsWith("-")) return `--${name} needs a value (write --${name}=VALUE for a value starting with "-")`;
        i++;
      }
      continue;
    }
    if (arg.startsWith("-") && arg.length > 1) return `unknown flag -${clipName(arg.slice(1, 2))} (laneway serve has long flags only)`;
    return `unexpected argument at position ${i + 1}: laneway serve takes flags only`;
  }
  return "invalid arguments for laneway serve";
}

function clipName(name: string): string {
  return name.length <= 40 ? name : `${name.slice(0, 40)}…`;
}

function parseListen(raw: Raw): ListenAddress {
  const { value, source } = raw;
  const shape = `${source} must be host:port, such as 127.0.0.1:7600 or [::1]:7600`;
  let host: string;
  let portText: string;
  if (value.startsWith("[")) {
    const close = value.indexOf("]");
    if (close === -1 || value[close + 1] !== ":") throw new ServerConfigError(shape, source);
    host = value.slice(1, close);
    portText = value.slice(close + 2);
    if (!isIPv6(host)) throw new ServerConfigError(shape, source);
  } else {
    const colon = value.lastIndexOf(":");
    if (colon <= 0) throw new ServerConfigError(shape, source);
    host = value.slice(0, colon);
    portText = value.slice(colon + 1);
    if (host.includes(":")) throw new ServerConfigError(`${shape} (bracket IPv6 addresses)`, source);
    if (!isIPv4(host) && !/^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$/.test(host)) {
      throw new ServerConfigError(shape, source);
    }
  }
  if (!/^[0-9]{1,5}$/.test(portText) || Number(portText) > 65_535) {
    throw new ServerConfigError(`${source} port must be a number from 0 to 65535`, source);
  }
  const loopback =
    host.toLowerCase() === "localhost" ||
    (isIPv4(host) && host.startsWith("127.")) ||
    (isIPv6(host) && isIPv6Loopback(host));
  if (!loopback) {
    throw new ServerConfigError(
      `${source} must be a loopback address (127.0.0.0/8, [::1] or localhost): Laneway serves plain HTTP; put a TLS proxy in front of it for remote access`,
      source,
    );
  }
  return Object.freeze({ host, port: Number(portText) });
}

function isIPv6Loopback(host: string): boolean {
  // ::1 in any spelling (0:0:0:0:0:0:0:1, ::0:1, …).
  const parts = host.split("::");
  const groups = (part: string | undefined): string[] => (part === undefined || part === "" ? [] : part.split(":"));
  const head = groups(parts[0]);
  const tail = groups(parts[1]);
  const all = parts.length === 2 ? [...head, ...Array<string>(8 - head.length - tail.length).fill("0"), ...tail] : head;
  return all.length === 8 && all.slice(0, 7).every((g) => /^0{1,4}$/.test(g)) && /^0{0,3}1$/.test(all[7] ?? "");
}

function parseReplicas(raw: Raw | undefined): number {
  if (raw === undefined) return SERVER_DEFAULTS.replicas;
  if (!/^[0-9]+$/.test(raw.value)) {
    throw new ServerConfigError(`${raw.source} must be an integer from ${MIN_REPLICAS} to ${MAX_REPLICAS}`, raw.source);
  }
  const n = Number(raw.value);
  if (n < MIN_REPLICAS) throw new ServerConfigError(`${raw.source} must be at least ${MIN_REPLICAS}, got ${n}`, raw.source);
  if (n > MAX_REPLICAS) {
    throw new ServerConfigError(
      `${raw.source} must be at most ${MAX_REPLICAS}, got ${raw.value.length > 6 ? "more" : n}`,
      raw.source,
    );
  }
  return n;
}

function parseBooleanEnv(env: Env, variable: string): boolean {
  const value = envValue(env, variable);
  if (value === undefined) return false;
  switch (value.toLowerCase()) {
    case "1":
    case "true":
      return true;
    case "0":
    case "false":
      return false;
    default:
      throw new ServerConfigError(`${variable} must be 1 or 0`, variable);
  }
}

function parseShutdownTimeout(raw: Raw | undefined): number {
  if (raw === undefined) return nanosToMillis(parseGoDuration(SERVER_DEFAULTS.shutdownTimeout));
  let ns: bigint;
  try {
    ns = parseGoDuration(raw.value);
  } catch {
    throw new ServerConfigError(`${raw.source} must be a Go duration such as "10s" or "1m30s"`, raw.source);
  }
  if (ns < 0n) throw new ServerConfigError(`${raw.source} must be at least 0s, got ${formatGoDuration(ns)}`, raw.source);
  if (ns > MAX_SHUTDOWN_TIMEOUT) {
    throw new ServerConfigError(
      `${raw.source} must be at most ${formatGoDuration(MAX_SHUTDOWN_TIMEOUT)}, got ${formatGoDuration(ns)}`,
      raw.source,
    );
  }
  return nanosToMillis(ns);
}

function parseTimeout(raw: Raw | undefined, fallback: string): number {
  if (raw === undefined) return nanosToMillis(parseGoDuration(fallback));
  let ns: bigint;
  try {
    ns = parseGoDuration(raw.value);
  } catch {
    throw new ServerConfigError(`${raw.source} must be a Go duration such as "10s" or "1m30s"`, raw.source);
  }
  const { min, max } = WIRE_RANGES.timeout;
  if (ns < min || ns > max) {
    throw new ServerConfigError(`${raw.source} must be from ${formatGoDuration(min)} to ${formatGoDuration(max)}, got ${formatGoDuration(ns)}`, raw.source);
  }
  return nanosToMillis(ns);
}

function resolveServerBin(raw: Raw, cwd: string, embedded: boolean): string {
  if (!raw.value.includes("/")) return raw.value; // looked up on PATH when spawned
  const path = resolve(cwd, raw.value);
  if (embedded) {
    let ok = false;
    try {
      ok = statSync(path).isFile();
      accessSync(path, constants.X_OK);
    } catch {
      ok = false;
    }
    if (!ok) {
      throw new ServerConfigError(
        `${raw.source} does not name an executable file: install nats-server with apt-get install -y nats-server, or use --nats-url for an existing server`,
        raw.source,
      );
    }
  }
  return path;
}

function readAdminToken(env: Env): Secret | undefined {
  const value = envValue(env, ADMIN_TOKEN_ENV);
  if (value === undefined) return undefined;
  const token = new Secret(value);
  const problem = tokenProblem(token);
  if (problem !== undefined) throw new ServerConfigError(`${ADMIN_TOKEN_ENV} ${problem}`, ADMIN_TOKEN_ENV);
  return token;
}
