/**
 * The lanes configuration: who the lane principals are, which lanes exist,
 * who may do what on them, and the delivery bounds.
 *
 * `laneway serve --lanes-config ./lanes.json` (or `LANEWAY_LANES_CONFIG`)
 * turns lanes on. The file is administrator-owned and holds no secrets:
 * project tokens and the broker credentials file path arrive through the
 * environment variables it names. Everything is validated at startup —
 * the registry and bounds form an immutable namespace generation, so a
 * mistake must stop the service rather than be discovered by a peer.
 *
 * Strictness rules, and why:
 * - Unknown fields are rejected: a misspelled `max_pendng` must not
 *   silently select the default.
 * - `null` is rejected rather than read as "omitted": it is an explicit
 *   value, and it is not one the field accepts.
 * - Omitted or zero bounds select the default (as the specification says);
 *   negative and out-of-range values fail with the field and its range.
 * - Messages never contain a token, a credentials file's contents or
 *   path, or the broker URL. As a last line of defense every message is
 *   scrubbed of the values of the token and credentials variables the file
 *   names, so even a token pasted into the wrong field is not echoed.
 */
import { open } from "node:fs/promises";
import { resolveCredentialsFile } from "../config/credentials-file.js";
import { formatGoDuration, nanosToMillis, parseGoDuration } from "../config/duration.js";
import { ENV_NAME_RULE, envValue, isEnvName, type Env } from "../config/env-name.js";
import { DurationError } from "../config/errors.js";
import { FrozenMap } from "../config/frozen-map.js";
import { parseNatsServers } from "../config/nats-url.js";
import { Secret } from "../config/secret.js";
import { ADMIN_TOKEN_ENV, tokenProblem } from "../config/tokens.js";
import { LanesConfigError } from "./errors.js";
import { IDENTIFIER_PATTERN, IDENTIFIER_RULE, LANE_BOUND_RULES, LANES_LIMITS, type BoundKey, type DurationBound, type IntegerBound } from "./limits.js";
import { serializeRegistry } from "./registry-document.js";
import type { LaneBounds, LaneDefinition, LanePrincipal, LanesBroker, LanesConfig } from "./types.js";

const BOUND_KEYS = Object.keys(LANE_BOUND_RULES) as BoundKey[];
const TOP_LEVEL_FIELDS = new Set<string>(["url", "credentials_env", "namespace", "principals", "lanes", ...BOUND_KEYS]);
const PRINCIPAL_FIELDS = new Set(["project", "token_env"]);
const LANE_FIELDS = new Set(["id", "owner", "publishers", "subscribers", "groups", "recoverers"]);

export interface LanesConfigOptions {
  /** Directory that relative credentials-file paths resolve against (default `process.cwd()`). */
  readonly cwd?: string;
}

/**
 * Read and validate a lanes configuration file. The size is checked on the
 * open file descriptor before anything is read, so an oversized file is
 * refused without being loaded into memory.
 */
export async function loadLanesConfig(path: string, env: Env, options: LanesConfigOptions = {}): Promise<LanesConfig> {
  let text: string;
  let handle;
  try {
    handle = await open(path, "r");
  } catch (error) {
    throw new LanesConfigError(`lanes: cannot open the configuration file (${errorCode(error)})`);
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw new LanesConfigError("lanes: the configuration path is not a regular file");
    if (stats.size > LANES_LIMITS.maxFileBytes) throw fileTooLarge(stats.size);
    // Read at most one byte past the limit: the file may grow after fstat.
    const buffer = Buffer.alloc(LANES_LIMITS.maxFileBytes + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) break;
    }
    if (length > LANES_LIMITS.maxFileBytes) throw fileTooLarge(length);
    text = decodeUtf8(buffer.subarray(0, length));
  } catch (error) {
    if (error instanceof LanesConfigError) throw error;
    throw new LanesConfigError(`lanes: cannot read the configuration file (${errorCode(error)})`);
  } finally {
    await handle.close();
  }
  return parseLanesConfig(text, env, options);
}

/** Validate configuration text (the contents of lanes.json). */
export function parseLanesConfig(text: string, env: Env, options: LanesConfigOptions = {}): LanesConfig {
  let raw: unknown;
  try {
    const size = Buffer.byteLength(text, "utf8");
    if (size > LANES_LIMITS.maxFileBytes) throw fileTooLarge(size);
    raw = parseJson(text);
    return build(raw, env, options.cwd ?? process.cwd());
  } catch (error) {
    if (error instanceof LanesConfigError) {
      const scrubbed = scrub(error.message, sensitiveValues(raw, env));
      if (scrubbed !== error.message) throw new LanesConfigError(scrubbed, error.field);
    }
    throw error;
  }
}

function fileTooLarge(size: number): LanesConfigError {
  return new LanesConfigError(
    `lanes: the configuration file must be at most ${LANES_LIMITS.maxFileBytes} bytes, got ${size}`,
  );
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? "error";
}

function decodeUtf8(bytes: Buffer): string {
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new LanesConfigError("lanes: the configuration file is not valid UTF-8");
  }
}

/**
 * JSON.parse, reporting only the position of a syntax error: V8's message
 * can quote a slice of the text, and the text may contain the broker URL.
 */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const position = /position (\d+)/.exec((error as Error).message)?.[1];
    if (position === undefined) throw new LanesConfigError("lanes: the configuration is not valid JSON");
    const offset = Number(position);
    const before = text.slice(0, offset);
    const line = before.split("\n").length;
    const column = offset - before.lastIndexOf("\n");
    throw new LanesConfigError(`lanes: the configuration is not valid JSON (line ${line}, column ${column})`);
  }
}

// ---------------------------------------------------------------------------
// Building the validated configuration

function build(raw: unknown, env: Env, cwd: string): LanesConfig {
  const root = expectObject(raw, "the configuration", "");
  rejectUnknown(root, TOP_LEVEL_FIELDS, "");

  const broker = readBroker(root, env, cwd);
  const namespace = readIdentifier(required(root, "namespace", "namespace"), "namespace");
  const principals = readPrincipals(root);
  const projects = new Set(principals.map((p) => p.project));
  const lanes = readLanes(root, projects);
  const bounds = readBounds(root);
  const tokens = readTokens(principals, env);

  const config: LanesConfig = Object.freeze({ namespace, broker, principals, lanes, bounds, tokens });
  const size = Buffer.byteLength(serializeRegistry(config), "utf8");
  if (size > LANES_LIMITS.maxRegistryBytes) {
    throw new LanesConfigError(
      `lanes: the serialized registry must be at most ${LANES_LIMITS.maxRegistryBytes} bytes, got ${size}`,
    );
  }
  return config;
}

function readBroker(root: Record<string, unknown>, env: Env, cwd: string): LanesBroker | undefined {
  const url = optional(root, "url");
  const credentialsEnvRaw = optional(root, "credentials_env");

  let servers: readonly string[] | undefined;
  if (url !== undefined) {
    if (typeof url !== "string") throw typeError("url", "a string", url);
    const parsed = parseNatsServers(url);
    if (!parsed.ok) {
      const hint = parsed.reason.startsWith("must not contain credentials") ? "; use credentials_env" : "";
      throw new LanesConfigError(`lanes: url ${parsed.reason}${hint}`, "url");
    }
    servers = Object.freeze([...parsed.servers]);
  }

  let credentialsEnv: string | undefined;
  let credentialsFile: string | undefined;
  if (credentialsEnvRaw !== undefined) {
    if (typeof credentialsEnvRaw !== "string") throw typeError("credentials_env", "a string", credentialsEnvRaw);
    if (!isEnvName(credentialsEnvRaw)) {
      throw new LanesConfigError(
        `lanes: credentials_env must be an environment variable name matching ${ENV_NAME_RULE}, got ${show(credentialsEnvRaw)}`,
        "credentials_env",
      );
    }
    if (servers === undefined) {
      // Without url, lanes share Laneway's own connection, which has its own
      // --nats-credentials-env; a second credentials file would be ignored.
      throw new LanesConfigError(
        "lanes: credentials_env requires url (without url, lanes use Laneway's own NATS connection and its --nats-credentials-env)",
        "credentials_env",
      );
    }
    const resolved = resolveCredentialsFile(credentialsEnvRaw, env, cwd);
    if (!resolved.ok) throw new LanesConfigError(`lanes: credentials_env: ${resolved.reason}`, "credentials_env");
    credentialsEnv = credentialsEnvRaw;
    credentialsFile = resolved.path;
  }

  if (servers === undefined) return undefined;
  return Object.freeze({ servers, credentialsEnv, credentialsFile });
}

function readPrincipals(root: Record<string, unknown>): readonly LanePrincipal[] {
  const list = expectArray(required(root, "principals", "principals"), "principals");
  checkCount(list.length, "principals", 1, LANES_LIMITS.maxPrincipals);
  const seen = new Set<string>();
  const principals: LanePrincipal[] = [];
  list.forEach((entry, index) => {
    const path = `principals[${index}]`;
    const object = expectObject(entry, path, path);
    rejectUnknown(object, PRINCIPAL_FIELDS, path);
    const project = readIdentifier(required(object, "project", `${path}.project`), `${path}.project`);
    if (seen.has(project)) {
      throw new LanesConfigError(`lanes: ${path}.project ${show(project)} is configured more than once`, `${path}.project`);
    }
    seen.add(project);
    const tokenEnv = required(object, "token_env", `${path}.token_env`);
    if (typeof tokenEnv !== "string") throw typeError(`${path}.token_env`, "a string", tokenEnv);
    if (!isEnvName(tokenEnv)) {
      throw new LanesConfigError(
        `lanes: ${path}.token_env must be an environment variable name matching ${ENV_NAME_RULE}, got ${show(tokenEnv)}`,
        `${path}.token_env`,
      );
    }
    principals.push(Object.freeze({ project, tokenEnv }));
  });
  return Object.freeze(principals);
}

function readLanes(root: Record<string, unknown>, projects: ReadonlySet<string>): readonly LaneDefinition[] {
  const list = expectArray(required(root, "lanes", "lanes"), "lanes");
  checkCount(list.length, "lanes", 1, LANES_LIMITS.maxLanes);
  const seen = new Set<string>();
  return Object.freeze(
    list.map((entry, index) => {
      const path = `lanes[${index}]`;
      const object = expectObject(entry, path, path);
      rejectUnknown(object, LANE_FIELDS, path);
      const id = readIdentifier(required(object, "id", `${path}.id`), `${path}.id`);
      if (seen.has(id)) throw new LanesConfigError(`lanes: ${path}.id ${show(id)} is configured more than once`, `${path}.id`);
      seen.add(id);
      const owner = readProjectRef(required(object, "owner", `${path}.owner`), `${path}.owner`, projects);
      const publishers = readProjectList(optional(object, "publishers"), `${path}.publishers`, projects);
      const subscribers = readProjectList(optional(object, "subscribers"), `${path}.subscribers`, projects);
      const groups = readGroups(optional(object, "groups"), path, projects);
      const recoverers = readRecoverers(optional(object, "recoverers"), path, groups);
      return Object.freeze({ id, owner, publishers, subscribers, groups, recoverers });
    }),
  );
}

function readGroups(value: unknown, lanePath: string, projects: ReadonlySet<string>): ReadonlyMap<string, readonly string[]> {
  const path = `${lanePath}.groups`;
  if (value === undefined) return new FrozenMap();
  const object = expectObject(value, path, path);
  const keys = Object.keys(object);
  if (keys.length > LANES_LIMITS.maxGroupsPerLane) {
    throw new LanesConfigError(
      `lanes: ${path} must have at most ${LANES_LIMITS.maxGroupsPerLane} groups, got ${keys.length}`,
      path,
    );
  }
  const entries: Array<[string, readonly string[]]> = [];
  for (const key of keys) {
    const group = readIdentifier(key, `${path} key`);
    entries.push([group, readProjectList(object[key], `${path}.${group}`, projects, "members")]);
  }
  return new FrozenMap(entries);
}

function readRecoverers(
  value: unknown,
  lanePath: string,
  groups: ReadonlyMap<string, readonly string[]>,
): ReadonlyMap<string, readonly string[]> {
  const path = `${lanePath}.recoverers`;
  if (value === undefined) return new FrozenMap();
  const object = expectObject(value, path, path);
  const keys = Object.keys(object);
  if (keys.length > LANES_LIMITS.maxGroupsPerLane) {
    throw new LanesConfigError(
      `lanes: ${path} must have at most ${LANES_LIMITS.maxGroupsPerLane} groups, got ${keys.length}`,
      path,
    );
  }
  const entries: Array<[string, readonly string[]]> = [];
  for (const key of keys) {
    const group = readIdentifier(key, `${path} key`);
    const members = groups.get(group);
    if (members === undefined) {
      throw new LanesConfigError(
        `lanes: ${path}.${group} names a group that is not defined in ${lanePath}.groups`,
        `${path}.${group}`,
      );
    }
    const memberSet = new Set(members);
    // Recoverers are a subset of members, so checking membership also
    // checks that each is a configured project.
    const list = readProjectList(object[key], `${path}.${group}`, memberSet, "recoverers", (ref, at) =>
      new LanesConfigError(`lanes: ${at} ${show(ref)} must be a member of group ${group}`, at),
    );
    entries.push([group, list]);
  }
  return new FrozenMap(entries);
}

function readProjectRef(value: unknown, path: string, projects: ReadonlySet<string>): string {
  if (typeof value !== "string") throw typeError(path, "a string", value);
  if (!projects.has(value)) throw new LanesConfigError(`lanes: ${path} ${show(value)} is not a configured project`, path);
  return value;
}

function readProjectList(
  value: unknown,
  path: string,
  allowed: ReadonlySet<string>,
  noun = "entries",
  notAllowed?: (ref: string, at: string) => LanesConfigError,
): readonly string[] {
  if (value === undefined) return Object.freeze([]);
  const list = expectArray(value, path);
  if (list.length > LANES_LIMITS.maxMembers) {
    throw new LanesConfigError(`lanes: ${path} must have at most ${LANES_LIMITS.maxMembers} ${noun}, got ${list.length}`, path);
  }
  const seen = new Set<string>();
  list.forEach((entry, index) => {
    const at = `${path}[${index}]`;
    if (typeof entry !== "string") throw typeError(at, "a string", entry);
    if (!allowed.has(entry)) {
      throw notAllowed?.(entry, at) ?? new LanesConfigError(`lanes: ${at} ${show(entry)} is not a configured project`, at);
    }
    if (seen.has(entry)) throw new LanesConfigError(`lanes: ${path} lists ${show(entry)} more than once`, at);
    seen.add(entry);
  });
  return Object.freeze([...(list as string[])]);
}

function readBounds(root: Record<string, unknown>): LaneBounds {
  const explicit = new Map<BoundKey, bigint | number>();
  for (const key of BOUND_KEYS) {
    const value = readBound(root, key);
    if (value !== undefined) explicit.set(key, value);
  }
  const duration = (key: BoundKey, fallback?: bigint): bigint =>
    (explicit.get(key) as bigint | undefined) ?? fallback ?? (LANE_BOUND_RULES[key] as DurationBound).fallback;
  const integer = (key: BoundKey, fallback?: number): number =>
    (explicit.get(key) as number | undefined) ?? fallback ?? (LANE_BOUND_RULES[key] as IntegerBound).fallback;

  const maxLedger = integer("max_ledger");
  // An omitted dependent bound takes the default clamped to the configured
  // bound it depends on; only explicit values can conflict.
  const maxPending = integer("max_pending", Math.min(LANE_BOUND_RULES.max_pending.fallback as number, maxLedger));
  if (maxPending > maxLedger) {
    throw new LanesConfigError(`lanes: max_pending must be at most max_ledger (${maxLedger}), got ${maxPending}`, "max_pending");
  }
  const retryDelay = duration("retry_delay");
  const defaultMaxRetry = (LANE_BOUND_RULES.max_retry_delay as DurationBound).fallback;
  const maxRetryDelay = duration("max_retry_delay", retryDelay > defaultMaxRetry ? retryDelay : defaultMaxRetry);
  if (maxRetryDelay < retryDelay) {
    throw new LanesConfigError(
      `lanes: max_retry_delay must be at least retry_delay (${formatGoDuration(retryDelay)}), got ${formatGoDuration(maxRetryDelay)}`,
      "max_retry_delay",
    );
  }
  const retention = duration("retention");
  const defaultWindow = (LANE_BOUND_RULES.duplicate_window as DurationBound).fallback;
  const duplicateWindow = duration("duplicate_window", retention < defaultWindow ? retention : defaultWindow);
  if (duplicateWindow > retention) {
    throw new LanesConfigError(
      `lanes: duplicate_window must be at most retention (${formatGoDuration(retention)}), got ${formatGoDuration(duplicateWindow)}`,
      "duplicate_window",
    );
  }

  return Object.freeze({
    leaseMs: nanosToMillis(duration("lease")),
    maxPending,
    maxLedger,
    retryDelayMs: nanosToMillis(retryDelay),
    maxRetryDelayMs: nanosToMillis(maxRetryDelay),
    ackRetentionMs: nanosToMillis(duration("ack_retention")),
    retentionMs: nanosToMillis(retention),
    duplicateWindowMs: nanosToMillis(duplicateWindow),
    maxRecords: integer("max_records"),
    maxBytes: integer("max_bytes"),
    maxPayload: integer("max_payload"),
    operationTimeoutMs: nanosToMillis(duration("operation_timeout")),
    ledgerBytes: integer("ledger_bytes"),
  });
}

/** One bound: `undefined` when omitted or zero (the default applies), else the range-checked value. */
function readBound(root: Record<string, unknown>, key: BoundKey): bigint | number | undefined {
  const value = optional(root, key);
  if (value === undefined) return undefined;
  const rule = LANE_BOUND_RULES[key];
  if (rule.kind === "integer") {
    if (typeof value !== "number" || !Number.isSafeInteger(value)) {
      throw new LanesConfigError(`lanes: ${key} must be an integer, got ${describe(value)}`, key);
    }
    if (value === 0) return undefined;
    if (value < rule.min) throw new LanesConfigError(`lanes: ${key} must be at least ${rule.min}, got ${value}`, key);
    if (value > rule.max) throw new LanesConfigError(`lanes: ${key} must be at most ${rule.max}, got ${value}`, key);
    return value;
  }
  let ns: bigint;
  if (typeof value === "string") {
    try {
      ns = parseGoDuration(value);
    } catch (error) {
      if (!(error instanceof DurationError)) throw error;
      throw new LanesConfigError(`lanes: ${key} is not a valid duration: ${error.message}`, key);
    }
  } else if (typeof value === "number" && Number.isSafeInteger(value)) {
    ns = BigInt(value);
  } else {
    throw new LanesConfigError(
      `lanes: ${key} must be a duration string such as "30s" or an integer number of nanoseconds, got ${describe(value)}`,
      key,
    );
  }
  if (ns === 0n) return undefined;
  if (ns < rule.min) {
    throw new LanesConfigError(`lanes: ${key} must be at least ${formatGoDuration(rule.min)}, got ${formatGoDuration(ns)}`, key);
  }
  if (ns > rule.max) {
    throw new LanesConfigError(`lanes: ${key} must be at most ${formatGoDuration(rule.max)}, got ${formatGoDuration(ns)}`, key);
  }
  return ns;
}

function readTokens(principals: readonly LanePrincipal[], env: Env): ReadonlyMap<string, Secret> {
  const tokens: Array<[string, Secret]> = [];
  for (const { project, tokenEnv } of principals) {
    const value = Object.hasOwn(env, tokenEnv) ? env[tokenEnv] : undefined;
    if (value === undefined) {
      throw new LanesConfigError(`lanes: the token of project ${project} (${tokenEnv}) is not set`, tokenEnv);
    }
    const secret = new Secret(value);
    const problem = tokenProblem(secret);
    if (problem !== undefined) throw new LanesConfigError(`lanes: the token of project ${project} (${tokenEnv}) ${problem}`, tokenEnv);
    tokens.push([project, secret]);
  }
  // Constant-time comparisons throughout; with at most 64 projects the
  // quadratic pass is about two thousand HMACs at startup.
  for (let i = 0; i < tokens.length; i++) {
    for (let j = i + 1; j < tokens.length; j++) {
      const [a, tokenA] = tokens[i] as [string, Secret];
      const [b, tokenB] = tokens[j] as [string, Secret];
      if (tokenA.equals(tokenB)) {
        throw new LanesConfigError(`lanes: projects ${a} and ${b} have the same token; every project needs its own`);
      }
    }
  }
  const admin = envValue(env, ADMIN_TOKEN_ENV);
  if (admin !== undefined) {
    for (const [project, token] of tokens) {
      if (token.equals(admin)) {
        throw new LanesConfigError(
          `lanes: the token of project ${project} equals ${ADMIN_TOKEN_ENV}; the operator token must differ from every project token`,
        );
      }
    }
  }
  return new FrozenMap(tokens);
}

// ---------------------------------------------------------------------------
// Small validation helpers

function expectObject(value: unknown, what: string, field: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new LanesConfigError(`lanes: ${what} must be a JSON object, got ${describe(value)}`, field || undefined);
  }
  return value as Record<string, unknown>;
}

function expectArray(value: unknown, path: string): readonly unknown[] {
  if (!Array.isArray(value)) throw new LanesConfigError(`lanes: ${path} must be an array, got ${describe(value)}`, path);
  return value;
}

function rejectUnknown(object: Record<string, unknown>, allowed: ReadonlySet<string>, path: string): void {
  for (const key of Object.keys(object)) {
    if (!allowed.has(key)) {
      const field = path === "" ? key : `${path}.${key}`;
      throw new LanesConfigError(`lanes: unknown field ${JSON.stringify(clip(field, 128))}`, field);
    }
  }
}

/** A field's value; `undefined` only when the key is absent (own properties only). */
function optional(object: Record<string, unknown>, key: string): unknown {
  return Object.hasOwn(object, key) ? object[key] : undefined;
}

function required(object: Record<string, unknown>, key: string, path: string): unknown {
  if (!Object.hasOwn(object, key)) throw new LanesConfigError(`lanes: ${path} is required`, path);
  return object[key];
}

function readIdentifier(value: unknown, path: string): string {
  if (typeof value !== "string") throw typeError(path, "a string", value);
  if (value.length > LANES_LIMITS.maxIdentifierLength) {
    throw new LanesConfigError(
      `lanes: ${path} must be at most ${LANES_LIMITS.maxIdentifierLength} characters, got ${value.length}`,
      path,
    );
  }
  if (!IDENTIFIER_PATTERN.test(value)) {
    throw new LanesConfigError(`lanes: ${path} must match ${IDENTIFIER_RULE}, got ${show(value)}`, path);
  }
  return value;
}

function checkCount(count: number, path: string, min: number, max: number): void {
  if (count < min) throw new LanesConfigError(`lanes: ${path} must have at least ${min} ${min === 1 ? "entry" : "entries"}, got ${count}`, path);
  if (count > max) throw new LanesConfigError(`lanes: ${path} must have at most ${max} entries, got ${count}`, path);
}

function typeError(path: string, expected: string, value: unknown): LanesConfigError {
  return new LanesConfigError(`lanes: ${path} must be ${expected}, got ${describe(value)}`, path);
}

/** The JSON type of a value, never the value itself (it may be a misplaced secret). */
function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  switch (typeof value) {
    case "string":
      return "a string";
    case "boolean":
      return "a boolean";
    case "number":
      return Number.isInteger(value) ? `${value}` : "a fractional number";
    case "object":
      return "an object";
    default:
      return typeof value;
  }
}

/** A configuration string quoted for a message, clipped so a long paste is not echoed whole. */
function show(value: string): string {
  return JSON.stringify(clip(value, 64));
}

function clip(value: string, max: number): string {
  return value.length <= max ? value : `${value.slice(0, max)}…`;
}

/**
 * Values that must never appear in a message: the tokens and credentials
 * path of every variable the (possibly invalid) file names, and the
 * operator token. Collected from the raw JSON so it works even when
 * validation stopped before the principals were read.
 */
function sensitiveValues(raw: unknown, env: Env): string[] {
  const names = new Set<string>([ADMIN_TOKEN_ENV]);
  if (typeof raw === "object" && raw !== null && !Array.isArray(raw)) {
    const root = raw as Record<string, unknown>;
    const credentialsEnv = optional(root, "credentials_env");
    if (typeof credentialsEnv === "string") names.add(credentialsEnv);
    const principals = optional(root, "principals");
    if (Array.isArray(principals)) {
      for (const entry of principals) {
        if (typeof entry === "object" && entry !== null) {
          const tokenEnv = optional(entry as Record<string, unknown>, "token_env");
          if (typeof tokenEnv === "string") names.add(tokenEnv);
        }
      }
    }
    const url = optional(root, "url");
    const values = [...names].map((name) => envValue(env, name)).filter((v): v is string => v !== undefined);
    if (typeof url === "string") values.push(url);
    return values;
  }
  return [...names].map((name) => envValue(env, name)).filter((v): v is string => v !== undefined);
}

function scrub(message: string, values: readonly string[]): string {
  // Short values (under 8 characters) are not scrubbed: they cannot be valid
  // tokens, and replacing common short substrings would garble messages.
  const candidates = values.filter((v) => v.length >= 8).sort((a, b) => b.length - a.length);
  let result = message;
  for (const value of candidates) result = result.split(value).join("[redacted]");
  return result;
}
