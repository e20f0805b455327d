import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import { afterAll, describe, expect, test } from "vitest";
import { Secret } from "../../src/config/index.js";
import {
  exampleLanesConfig,
  laneCapabilities,
  LanesConfigError,
  loadLanesConfig,
  parseLanesConfig,
  projectCapabilities,
  serializeRegistry,
  type LanesConfig,
} from "../../src/lanes/index.js";
import { DEMO_LANES_CONFIG } from "../../src/server/cores/lanes.js";
import { Authenticator, secretAuthenticator } from "../../src/server/auth.js";

// Distinct, valid tokens (>= 32 bytes). Every failing case runs with these
// present and asserts none of them appears in the message.
const ATLAS = "atlas-secret-0f3c9a7e51b2d4c6a8e0f1b3d5c7a9e1";
const BEACON = "beacon-secret-7d1e3f5a7c9b1d3f5e7a9c1b3d5f7a9c";
const ADMIN = "admin-secret-c0ffee1234567890abcdef1234567890";
const CREDS_PATH_MARKER = "very-private-credentials-location";

const work = mkdtempSync(join(tmpdir(), "laneway-lanes-config-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const credsDir = join(work, CREDS_PATH_MARKER);
mkdirSync(credsDir);
const credsFile = join(credsDir, "service.creds");
writeFileSync(credsFile, "-----BEGIN NATS USER JWT-----\nnot-a-real-jwt\n------END NATS USER JWT------\n", { mode: 0o600 });

const ENV: Record<string, string> = {
  ATLAS_LANE_TOKEN: ATLAS,
  BEACON_LANE_TOKEN: BEACON,
  LANEWAY_ADMIN_TOKEN: ADMIN,
  NATS_CREDS: credsFile,
  NATS_CREDS_DIR: credsDir,
  NATS_CREDS_MISSING: join(credsDir, "missing.creds"),
};
const SECRETS = [ATLAS, BEACON, ADMIN, CREDS_PATH_MARKER, "pw-in-url"];

type Json = Record<string, unknown>;

/** The specification's example, without url/credentials_env. */
const base = (): Json => exampleLanesConfig();

const lane0 = (c: Json): Json => (c.lanes as Json[])[0] as Json;
const principal = (c: Json, i: number): Json => (c.principals as Json[])[i] as Json;
const names = (prefix: string, n: number): string[] => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
const id65 = "a".repeat(65);

interface Case {
  readonly name: string;
  /** Edits a fresh base config; or `text` replaces the whole file. */
  readonly edit?: (c: Json) => void;
  readonly text?: string;
  readonly env?: Record<string, string | undefined>;
  readonly message: string;
}

const bound = (field: string, value: unknown, message: string, extra: Json = {}): Case => ({
  name: `${field} = ${JSON.stringify(value)}`,
  edit: (c) => Object.assign(c, extra, { [field]: value }),
  message,
});

const CASES: Case[] = [
  // --- file syntax and shape
  { name: "not JSON", text: "{", message: "lanes: the configuration is not valid JSON (line 1, column 2)" },
  { name: "JSON error located", text: '{"url":"nats://u:pw-in-url@h",}', message: "lanes: the configuration is not valid JSON (line 1, column 31)" },
  { name: "JSON error near the url is not quoted", text: '{"url":"nats://u:pw-in-url@h"]', message: "lanes: the configuration is not valid JSON (line 1, column 30)" },
  { name: "JSON error on a later line", text: '{\n  "namespace": "x",\n}', message: "lanes: the configuration is not valid JSON (line 3, column 1)" },
  { name: "empty file", text: "", message: "lanes: the configuration is not valid JSON" },
  { name: "root is an array", text: "[]", message: "lanes: the configuration must be a JSON object, got an array" },
  { name: "root is null", text: "null", message: "lanes: the configuration must be a JSON object, got null" },

  // --- unknown fields
  { name: "unknown top-level field", edit: (c) => (c.max_pendng = 3), message: 'lanes: unknown field "max_pendng"' },
  { name: "unknown principal field", edit: (c) => (principal(c, 0).token = ATLAS), message: 'lanes: unknown field "principals[0].token"' },
  { name: "unknown lane field", edit: (c) => (lane0(c).publisher = ["atlas"]), message: 'lanes: unknown field "lanes[0].publisher"' },

  // --- url
  { name: "url wrong type", edit: (c) => (c.url = 4222), message: "lanes: url must be a string, got 4222" },
  { name: "url empty", edit: (c) => (c.url = ""), message: "lanes: url must not be empty" },
  {
    name: "url with user info",
    edit: (c) => (c.url = "tls://svc:pw-in-url@broker.example.net:4222"),
    message: "lanes: url must not contain credentials (user info); use credentials_env",
  },
  {
    name: "url list with user info in second entry",
    edit: (c) => (c.url = "nats://a.example:4222, nats://pw-in-url@b.example:4222"),
    message: "lanes: url must not contain credentials (user info) (entry 2 of 2); use credentials_env",
  },
  { name: "url wrong scheme", edit: (c) => (c.url = "http://broker.example.net:4222"), message: "lanes: url must use the nats:// or tls:// scheme" },
  { name: "url without scheme", edit: (c) => (c.url = "broker.example.net:4222"), message: "lanes: url must use the nats:// or tls:// scheme" },
  { name: "url with path", edit: (c) => (c.url = "nats://broker.example.net:4222/x"), message: "lanes: url must not have a path, query or fragment" },
  { name: "url with query", edit: (c) => (c.url = "nats://broker.example.net:4222?token=pw-in-url"), message: "lanes: url must not have a path, query or fragment" },
  { name: "url without host", edit: (c) => (c.url = "nats://"), message: "lanes: url must name a host" },
  { name: "url bad port", edit: (c) => (c.url = "nats://h:99999"), message: "lanes: url must be a nats:// or tls:// URL with a valid host and port" },
  { name: "url empty list entry", edit: (c) => (c.url = "nats://a:4222,,nats://b:4222"), message: "lanes: url must not be empty (entry 2 of 3)" },

  // --- credentials_env
  { name: "credentials_env wrong type", edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: 1 }), message: "lanes: credentials_env must be a string, got 1" },
  {
    name: "credentials_env invalid name",
    edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: "1BAD-NAME" }),
    message: 'lanes: credentials_env must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$, got "1BAD-NAME"',
  },
  {
    name: "credentials_env without url",
    edit: (c) => (c.credentials_env = "NATS_CREDS"),
    message: "lanes: credentials_env requires url (without url, lanes use Laneway's own NATS connection and its --nats-credentials-env)",
  },
  {
    name: "credentials_env variable unset",
    edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: "NATS_CREDS_UNSET" }),
    message: "lanes: credentials_env: NATS_CREDS_UNSET is not set (it must hold the path of a NATS credentials file)",
  },
  {
    name: "credentials_env variable empty",
    edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: "NATS_CREDS" }),
    env: { NATS_CREDS: "" },
    message: "lanes: credentials_env: NATS_CREDS is not set (it must hold the path of a NATS credentials file)",
  },
  {
    name: "credentials file missing",
    edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: "NATS_CREDS_MISSING" }),
    message: "lanes: credentials_env: the credentials file named by NATS_CREDS_MISSING does not exist",
  },
  {
    name: "credentials file is a directory",
    edit: (c) => Object.assign(c, { url: "nats://h:4222", credentials_env: "NATS_CREDS_DIR" }),
    message: "lanes: credentials_env: the credentials file named by NATS_CREDS_DIR is not a regular file",
  },

  // --- namespace and identifier rules
  { name: "namespace missing", edit: (c) => delete c.namespace, message: "lanes: namespace is required" },
  { name: "namespace wrong type", edit: (c) => (c.namespace = 7), message: "lanes: namespace must be a string, got 7" },
  { name: "namespace empty", edit: (c) => (c.namespace = ""), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got ""' },
  { name: "namespace uppercase", edit: (c) => (c.namespace = "Commons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "Commons"' },
  { name: "namespace leading digit", edit: (c) => (c.namespace = "1commons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "1commons"' },
  { name: "namespace leading dash", edit: (c) => (c.namespace = "-commons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "-commons"' },
  { name: "namespace leading underscore", edit: (c) => (c.namespace = "_commons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "_commons"' },
  { name: "namespace with dot", edit: (c) => (c.namespace = "com.mons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "com.mons"' },
  { name: "namespace with space", edit: (c) => (c.namespace = "com mons"), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "com mons"' },
  { name: "namespace too long", edit: (c) => (c.namespace = id65), message: "lanes: namespace must be at most 64 characters, got 65" },

  // --- principals
  { name: "principals missing", edit: (c) => delete c.principals, message: "lanes: principals is required" },
  { name: "principals not array", edit: (c) => (c.principals = {}), message: "lanes: principals must be an array, got an object" },
  { name: "principals empty", edit: (c) => (c.principals = []), message: "lanes: principals must have at least 1 entry, got 0" },
  {
    name: "65 principals",
    edit: (c) => (c.principals = names("p", 65).map((p) => ({ project: p, token_env: `T_${p}` }))),
    message: "lanes: principals must have at most 64 entries, got 65",
  },
  { name: "principal not object", edit: (c) => ((c.principals as unknown[])[0] = "atlas"), message: "lanes: principals[0] must be a JSON object, got a string" },
  { name: "principal project missing", edit: (c) => delete principal(c, 1).project, message: "lanes: principals[1].project is required" },
  { name: "principal project invalid", edit: (c) => (principal(c, 1).project = "Beacon"), message: 'lanes: principals[1].project must match ^[a-z][a-z0-9_-]*$, got "Beacon"' },
  { name: "principal project too long", edit: (c) => (principal(c, 1).project = id65), message: "lanes: principals[1].project must be at most 64 characters, got 65" },
  {
    name: "duplicate project",
    edit: (c) => (principal(c, 1).project = "atlas"),
    message: 'lanes: principals[1].project "atlas" is configured more than once',
  },
  { name: "token_env missing", edit: (c) => delete principal(c, 0).token_env, message: "lanes: principals[0].token_env is required" },
  { name: "token_env wrong type", edit: (c) => (principal(c, 0).token_env = ["A"]), message: "lanes: principals[0].token_env must be a string, got an array" },
  {
    name: "token_env invalid name",
    edit: (c) => (principal(c, 0).token_env = "ATLAS-LANE-TOKEN"),
    message: 'lanes: principals[0].token_env must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$, got "ATLAS-LANE-TOKEN"',
  },

  // --- lanes
  { name: "lanes missing", edit: (c) => delete c.lanes, message: "lanes: lanes is required" },
  { name: "lanes not array", edit: (c) => (c.lanes = "measurements"), message: "lanes: lanes must be an array, got a string" },
  { name: "lanes empty", edit: (c) => (c.lanes = []), message: "lanes: lanes must have at least 1 entry, got 0" },
  {
    name: "65 lanes",
    edit: (c) => (c.lanes = names("lane", 65).map((id) => ({ id, owner: "atlas" }))),
    message: "lanes: lanes must have at most 64 entries, got 65",
  },
  { name: "lane not object", edit: (c) => ((c.lanes as unknown[])[0] = null), message: "lanes: lanes[0] must be a JSON object, got null" },
  { name: "lane id missing", edit: (c) => delete lane0(c).id, message: "lanes: lanes[0].id is required" },
  { name: "lane id invalid", edit: (c) => (lane0(c).id = "Measurements"), message: 'lanes: lanes[0].id must match ^[a-z][a-z0-9_-]*$, got "Measurements"' },
  { name: "lane id too long", edit: (c) => (lane0(c).id = id65), message: "lanes: lanes[0].id must be at most 64 characters, got 65" },
  {
    name: "duplicate lane id",
    edit: (c) => (c.lanes as Json[]).push({ id: "measurements", owner: "beacon" }),
    message: 'lanes: lanes[1].id "measurements" is configured more than once',
  },
  { name: "owner missing", edit: (c) => delete lane0(c).owner, message: "lanes: lanes[0].owner is required" },
  { name: "owner wrong type", edit: (c) => (lane0(c).owner = ["atlas"]), message: "lanes: lanes[0].owner must be a string, got an array" },
  { name: "owner unknown project", edit: (c) => (lane0(c).owner = "zeta"), message: 'lanes: lanes[0].owner "zeta" is not a configured project' },

  // --- publishers / subscribers
  { name: "publishers not array", edit: (c) => (lane0(c).publishers = "atlas"), message: "lanes: lanes[0].publishers must be an array, got a string" },
  { name: "publisher wrong type", edit: (c) => (lane0(c).publishers = [1]), message: "lanes: lanes[0].publishers[0] must be a string, got 1" },
  { name: "publisher unknown", edit: (c) => (lane0(c).publishers = ["atlas", "zeta"]), message: 'lanes: lanes[0].publishers[1] "zeta" is not a configured project' },
  { name: "publisher duplicate", edit: (c) => (lane0(c).publishers = ["atlas", "beacon", "atlas"]), message: 'lanes: lanes[0].publishers lists "atlas" more than once' },
  {
    name: "65 publishers",
    edit: (c) => (lane0(c).publishers = Array<string>(65).fill("atlas")),
    message: "lanes: lanes[0].publishers must have at most 64 entries, got 65",
  },
  { name: "subscribers not array", edit: (c) => (lane0(c).subscribers = { atlas: true }), message: "lanes: lanes[0].subscribers must be an array, got an object" },
  { name: "subscriber unknown", edit: (c) => (lane0(c).subscribers = ["Atlas"]), message: 'lanes: lanes[0].subscribers[0] "Atlas" is not a configured project' },
  { name: "subscriber duplicate", edit: (c) => (lane0(c).subscribers = ["beacon", "beacon"]), message: 'lanes: lanes[0].subscribers lists "beacon" more than once' },
  {
    name: "65 subscribers",
    edit: (c) => (lane0(c).subscribers = Array<string>(65).fill("beacon")),
    message: "lanes: lanes[0].subscribers must have at most 64 entries, got 65",
  },

  // --- groups
  { name: "groups not object", edit: (c) => (lane0(c).groups = ["summarizers"]), message: "lanes: lanes[0].groups must be a JSON object, got an array" },
  {
    name: "group id invalid",
    edit: (c) => Object.assign(lane0(c), { groups: { Summarizers: ["beacon"] }, recoverers: {} }),
    message: 'lanes: lanes[0].groups key must match ^[a-z][a-z0-9_-]*$, got "Summarizers"',
  },
  {
    name: "group id too long",
    edit: (c) => Object.assign(lane0(c), { groups: { [id65]: ["beacon"] }, recoverers: {} }),
    message: "lanes: lanes[0].groups key must be at most 64 characters, got 65",
  },
  {
    name: "65 groups",
    edit: (c) => (lane0(c).groups = Object.fromEntries(names("g", 65).map((g) => [g, ["beacon"]]))),
    message: "lanes: lanes[0].groups must have at most 64 groups, got 65",
  },
  { name: "group members not array", edit: (c) => (lane0(c).groups = { summarizers: "beacon" }), message: "lanes: lanes[0].groups.summarizers must be an array, got a string" },
  { name: "group member unknown", edit: (c) => (lane0(c).groups = { summarizers: ["zeta"] }), message: 'lanes: lanes[0].groups.summarizers[0] "zeta" is not a configured project' },
  {
    name: "group member duplicate",
    edit: (c) => (lane0(c).groups = { summarizers: ["beacon", "atlas", "beacon"] }),
    message: 'lanes: lanes[0].groups.summarizers lists "beacon" more than once',
  },
  {
    name: "65 group members",
    edit: (c) => (lane0(c).groups = { summarizers: Array<string>(65).fill("beacon") }),
    message: "lanes: lanes[0].groups.summarizers must have at most 64 members, got 65",
  },

  // --- recoverers
  { name: "recoverers not object", edit: (c) => (lane0(c).recoverers = ["beacon"]), message: "lanes: lanes[0].recoverers must be a JSON object, got an array" },
  {
    name: "recoverers of undefined group",
    edit: (c) => (lane0(c).recoverers = { builders: ["beacon"] }),
    message: "lanes: lanes[0].recoverers.builders names a group that is not defined in lanes[0].groups",
  },
  {
    name: "recoverers of group when lane has no groups",
    edit: (c) => delete lane0(c).groups,
    message: "lanes: lanes[0].recoverers.summarizers names a group that is not defined in lanes[0].groups",
  },
  {
    name: "recoverers key invalid",
    edit: (c) => (lane0(c).recoverers = { "sum.marizers": ["beacon"] }),
    message: 'lanes: lanes[0].recoverers key must match ^[a-z][a-z0-9_-]*$, got "sum.marizers"',
  },
  {
    name: "recoverer not a member",
    edit: (c) => (lane0(c).recoverers = { summarizers: ["atlas"] }),
    message: 'lanes: lanes[0].recoverers.summarizers[0] "atlas" must be a member of group summarizers',
  },
  {
    name: "recoverer is the owner but not a member",
    edit: (c) => (lane0(c).recoverers = { summarizers: ["beacon", "atlas"] }),
    message: 'lanes: lanes[0].recoverers.summarizers[1] "atlas" must be a member of group summarizers',
  },
  {
    name: "recoverer unknown project",
    edit: (c) => (lane0(c).recoverers = { summarizers: ["zeta"] }),
    message: 'lanes: lanes[0].recoverers.summarizers[0] "zeta" must be a member of group summarizers',
  },
  {
    name: "recoverer duplicate",
    edit: (c) => (lane0(c).recoverers = { summarizers: ["beacon", "beacon"] }),
    message: 'lanes: lanes[0].recoverers.summarizers lists "beacon" more than once',
  },
  { name: "recoverers not array", edit: (c) => (lane0(c).recoverers = { summarizers: "beacon" }), message: "lanes: lanes[0].recoverers.summarizers must be an array, got a string" },
  {
    name: "65 recoverers",
    edit: (c) => (lane0(c).recoverers = { summarizers: Array<string>(65).fill("beacon") }),
    message: "lanes: lanes[0].recoverers.summarizers must have at most 64 recoverers, got 65",
  },
  {
    name: "recoverers for 65 groups",
    edit: (c) => (lane0(c).recoverers = Object.fromEntries(names("g", 65).map((g) => [g, []]))),
    message: "lanes: lanes[0].recoverers must have at most 64 groups, got 65",
  },

  // --- bounds: below and above every range, and the cross-field rules
  bound("lease", "500ms", "lanes: lease must be at least 1s, got 500ms"),
  bound("lease", "1h0m0.001s", "lanes: lease must be at most 1h0m0s, got 1h0m0.001s"),
  bound("lease", -1, "lanes: lease must be at least 1s, got -1ns"),
  bound("lease", "-30s", "lanes: lease must be at least 1s, got -30s"),
  bound("max_pending", -1, "lanes: max_pending must be at least 1, got -1"),
  bound("max_pending", 513, "lanes: max_pending must be at most 512, got 513"),
  bound("max_pending", 600, "lanes: max_pending must be at most 512, got 600"),
  bound("max_pending", 300, "lanes: max_pending must be at most max_ledger (256), got 300"),
  bound("max_pending", 200, "lanes: max_pending must be at most max_ledger (100), got 200", { max_ledger: 100 }),
  bound("max_ledger", -1, "lanes: max_ledger must be at least 1, got -1"),
  bound("max_ledger", 513, "lanes: max_ledger must be at most 512, got 513"),
  bound("retry_delay", "999us", "lanes: retry_delay must be at least 1ms, got 999µs"),
  bound("retry_delay", "61m", "lanes: retry_delay must be at most 1h0m0s, got 1h1m0s"),
  bound("max_retry_delay", "500us", "lanes: max_retry_delay must be at least 1ms, got 500µs"),
  bound("max_retry_delay", "24h1s", "lanes: max_retry_delay must be at most 24h0m0s, got 24h0m1s"),
  bound("max_retry_delay", "5m", "lanes: max_retry_delay must be at least retry_delay (10m0s), got 5m0s", { retry_delay: "10m" }),
  bound("ack_retention", "999ms", "lanes: ack_retention must be at least 1s, got 999ms"),
  bound("ack_retention", "721h", "lanes: ack_retention must be at most 720h0m0s, got 721h0m0s"),
  bound("retention", "0.5s", "lanes: retention must be at least 1s, got 500ms"),
  bound("retention", "8761h", "lanes: retention must be at most 8760h0m0s, got 8761h0m0s"),
  bound("duplicate_window", "100ms", "lanes: duplicate_window must be at least 1s, got 100ms"),
  bound("duplicate_window", "25h", "lanes: duplicate_window must be at most 24h0m0s, got 25h0m0s"),
  bound("duplicate_window", "2m", "lanes: duplicate_window must be at most retention (1m0s), got 2m0s", { retention: "1m" }),
  bound("max_records", -1, "lanes: max_records must be at least 1, got -1"),
  bound("max_records", 1_000_000_001, "lanes: max_records must be at most 1000000000, got 1000000001"),
  bound("max_bytes", 1_048_575, "lanes: max_bytes must be at least 1048576, got 1048575"),
  bound("max_bytes", 1_099_511_627_777, "lanes: max_bytes must be at most 1099511627776, got 1099511627777"),
  bound("max_payload", -1, "lanes: max_payload must be at least 1, got -1"),
  bound("max_payload", 1_048_577, "lanes: max_payload must be at most 1048576, got 1048577"),
  bound("operation_timeout", "9ms", "lanes: operation_timeout must be at least 10ms, got 9ms"),
  bound("ledger_bytes", 262_143, "lanes: ledger_bytes must be at least 262144, got 262143"),
  bound("ledger_bytes", 1_099_511_627_777, "lanes: ledger_bytes must be at most 1099511627776, got 1099511627777"),
  bound("operation_timeout", "5m0.000000001s", "lanes: operation_timeout must be at most 5m0s, got 5m0.000000001s"),
  bound("operation_timeout", 9_999_999, "lanes: operation_timeout must be at least 10ms, got 9.999999ms"),

  // --- bounds: wrong JSON types and invalid duration strings
  bound("lease", true, 'lanes: lease must be a duration string such as "30s" or an integer number of nanoseconds, got a boolean'),
  bound("lease", null, 'lanes: lease must be a duration string such as "30s" or an integer number of nanoseconds, got null'),
  bound("lease", 1.5, 'lanes: lease must be a duration string such as "30s" or an integer number of nanoseconds, got a fractional number'),
  bound("lease", 2 ** 60, 'lanes: lease must be a duration string such as "30s" or an integer number of nanoseconds, got 1152921504606847000'),
  bound("retention", { hours: 1 }, 'lanes: retention must be a duration string such as "30s" or an integer number of nanoseconds, got an object'),
  bound("lease", "1e3s", 'lanes: lease is not a valid duration: time: unknown unit "e" in duration "1e3s"'),
  bound("lease", "30", 'lanes: lease is not a valid duration: time: missing unit in duration "30"'),
  bound("lease", "", 'lanes: lease is not a valid duration: time: invalid duration ""'),
  bound("lease", "30 s", 'lanes: lease is not a valid duration: time: unknown unit " s" in duration "30 s"'),
  bound("ack_retention", "1d", 'lanes: ack_retention is not a valid duration: time: unknown unit "d" in duration "1d"'),
  bound("operation_timeout", "99999999999h", 'lanes: operation_timeout is not a valid duration: time: invalid duration "99999999999h"'),
  bound("max_pending", "64", "lanes: max_pending must be an integer, got a string"),
  bound("max_pending", 1.5, "lanes: max_pending must be an integer, got a fractional number"),
  bound("max_ledger", null, "lanes: max_ledger must be an integer, got null"),
  bound("max_bytes", 2 ** 53, "lanes: max_bytes must be an integer, got 9007199254740992"),
  bound("max_payload", false, "lanes: max_payload must be an integer, got a boolean"),

  // --- tokens
  { name: "token not set", env: { BEACON_LANE_TOKEN: undefined }, message: "lanes: the token of project beacon (BEACON_LANE_TOKEN) is not set" },
  { name: "token empty", env: { ATLAS_LANE_TOKEN: "" }, message: "lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be 32 to 4096 bytes, got 0" },
  { name: "token too short", env: { ATLAS_LANE_TOKEN: "short-secret" }, message: "lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be 32 to 4096 bytes, got 12" },
  {
    name: "token 31 UTF-8 bytes in 16 characters",
    env: { ATLAS_LANE_TOKEN: `${"é".repeat(15)}x` },
    message: "lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be 32 to 4096 bytes, got 31",
  },
  {
    name: "token with a space",
    env: { ATLAS_LANE_TOKEN: `${"a".repeat(20)} ${"b".repeat(20)}` },
    message: "lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be visible ASCII without spaces",
  },
  {
    name: "token with non-ASCII characters",
    env: { ATLAS_LANE_TOKEN: "é".repeat(20) },
    message: "lanes: the token of project atlas (ATLAS_LANE_TOKEN) must be visible ASCII without spaces",
  },
  { name: "token too long", env: { BEACON_LANE_TOKEN: "b".repeat(4097) }, message: "lanes: the token of project beacon (BEACON_LANE_TOKEN) must be 32 to 4096 bytes, got 4097" },
  { name: "tokens equal", env: { BEACON_LANE_TOKEN: ATLAS }, message: "lanes: projects atlas and beacon have the same token; every project needs its own" },
  {
    name: "two principals share one token variable",
    edit: (c) => (principal(c, 1).token_env = "ATLAS_LANE_TOKEN"),
    message: "lanes: projects atlas and beacon have the same token; every project needs its own",
  },
  {
    name: "token equals the operator token",
    env: { LANEWAY_ADMIN_TOKEN: BEACON },
    message: "lanes: the token of project beacon equals LANEWAY_ADMIN_TOKEN; the operator token must differ from every project token",
  },

  // --- a token pasted into the wrong field is never echoed
  { name: "token pasted as owner", edit: (c) => (lane0(c).owner = ATLAS), message: 'lanes: lanes[0].owner "[redacted]" is not a configured project' },
  { name: "token pasted as namespace", edit: (c) => (c.namespace = `X${BEACON}`), message: 'lanes: namespace must match ^[a-z][a-z0-9_-]*$, got "X[redacted]"' },
  { name: "token pasted as lease", edit: (c) => (c.lease = ATLAS), message: 'lanes: lease is not a valid duration: time: invalid duration "[redacted]"' },
  {
    name: "admin token pasted as publisher",
    edit: (c) => (lane0(c).publishers = [ADMIN]),
    message: 'lanes: lanes[0].publishers[0] "[redacted]" is not a configured project',
  },
  {
    name: "token pasted as token_env",
    edit: (c) => (principal(c, 0).token_env = BEACON),
    message: 'lanes: principals[0].token_env must be an environment variable name matching ^[A-Za-z_][A-Za-z0-9_]*$, got "[redacted]"',
  },
];

function attempt(c: Case): unknown {
  const config = base();
  c.edit?.(config);
  const env: Record<string, string | undefined> = { ...ENV, ...c.env };
  try {
    parseLanesConfig(c.text ?? JSON.stringify(config), env, { cwd: work });
  } catch (error) {
    return error;
  }
  return undefined;
}

describe("parseLanesConfig rejects every bad file with an exact message", () => {
  test.each(CASES.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    const error = attempt(c);
    expect(error).toBeInstanceOf(LanesConfigError);
    const message = (error as LanesConfigError).message;
    expect(message).toBe(c.message);
    expect(message.startsWith("lanes: ")).toBe(true);
    for (const secret of SECRETS) expect(message).not.toContain(secret);
    expect(message).not.toContain("broker.example.net");
  });

  test("bounds failures name the field", () => {
    const error = attempt(bound("max_pending", -1, ""));
    expect((error as LanesConfigError).field).toBe("max_pending");
  });
});

describe("size limits", () => {
  const good = JSON.stringify(base());

  test("a file of exactly 1 MiB loads; one byte more fails before parsing", async () => {
    const exact = join(work, "exact.json");
    writeFileSync(exact, good + " ".repeat(1_048_576 - good.length));
    await expect(loadLanesConfig(exact, ENV, { cwd: work })).resolves.toMatchObject({ namespace: "commons" });

    // Over the limit and not even JSON: the size is checked before parsing.
    const big = join(work, "big.json");
    writeFileSync(big, "x".repeat(1_048_577));
    const error = await loadLanesConfig(big, ENV).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LanesConfigError);
    expect((error as Error).message).toBe("lanes: the configuration file must be at most 1048576 bytes, got 1048577");
  });

  test("parseLanesConfig applies the same 1 MiB limit to text (in UTF-8 bytes)", () => {
    const text = good + " ".repeat(1_048_576 - good.length - 1) + "é";
    expect(() => parseLanesConfig(text, ENV)).toThrow("lanes: the configuration file must be at most 1048576 bytes, got 1048577");
  });

  test("loadLanesConfig reports a missing file without parsing anything", async () => {
    const error = await loadLanesConfig(join(work, "nope.json"), ENV).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LanesConfigError);
    expect((error as Error).message).toBe("lanes: cannot open the configuration file (ENOENT)");
  });

  test("loadLanesConfig rejects invalid UTF-8", async () => {
    const path = join(work, "latin1.json");
    writeFileSync(path, Buffer.concat([Buffer.from('{"namespace":"'), Buffer.from([0xff]), Buffer.from('"}')]));
    await expect(loadLanesConfig(path, ENV)).rejects.toThrow("lanes: the configuration file is not valid UTF-8");
  });

  test("the serialized registry is limited to 512 KiB", () => {
    // 64 projects with 64-character ids; one lane whose 64 groups each list
    // all 64 projects as members and recoverers: about 560 KB of registry
    // from a file well under 1 MiB.
    const projects = names("p", 64).map((p) => p.padEnd(64, "x"));
    const env: Record<string, string> = {};
    const principals = projects.map((project, i) => {
      env[`T${i}`] = `token-${i}-`.padEnd(40, "z");
      return { project, token_env: `T${i}` };
    });
    const groupIds = names("g", 64).map((g) => g.padEnd(64, "y"));
    const groups = Object.fromEntries(groupIds.map((g) => [g, projects]));
    const config = { namespace: "big", principals, lanes: [{ id: "wide", owner: projects[0], groups, recoverers: groups }] };
    const text = JSON.stringify(config);
    expect(Buffer.byteLength(text)).toBeLessThan(1_048_576);

    // The exact size, computed from the same data without the limit.
    const withoutRecoverers = parseLanesConfig(JSON.stringify({ ...config, lanes: [{ ...config.lanes[0], recoverers: {} }] }), env);
    const full: Pick<LanesConfig, "namespace" | "principals" | "lanes" | "bounds"> = {
      ...withoutRecoverers,
      lanes: [{ ...(withoutRecoverers.lanes[0] as LanesConfig["lanes"][number]), recoverers: new Map(Object.entries(groups)) }],
    };
    const size = Buffer.byteLength(serializeRegistry(full));
    expect(size).toBeGreaterThan(524_288);

    expect(() => parseLanesConfig(text, env)).toThrow(
      new LanesConfigError(`lanes: the serialized registry must be at most 524288 bytes, got ${size}`),
    );
  });
});

describe("good configurations", () => {
  test("the specification's example (with url and credentials_env) parses with documented defaults", () => {
    const example = {
      url: "tls://broker.example.net:4222",
      credentials_env: "CRUX_NATS_CREDENTIALS_FILE",
      ...base(),
    };
    const config = parseLanesConfig(JSON.stringify(example), { ...ENV, CRUX_NATS_CREDENTIALS_FILE: credsFile }, { cwd: work });
    expect(config.namespace).toBe("commons");
    expect(config.broker).toEqual({
      servers: ["tls://broker.example.net:4222"],
      credentialsEnv: "CRUX_NATS_CREDENTIALS_FILE",
      credentialsFile: credsFile,
    });
    expect(config.principals).toEqual([
      { project: "atlas", tokenEnv: "ATLAS_LANE_TOKEN" },
      { project: "beacon", tokenEnv: "BEACON_LANE_TOKEN" },
    ]);
    const lane = config.lanes[0];
    expect(lane?.id).toBe("measurements");
    expect(lane?.owner).toBe("atlas");
    expect(lane?.publishers).toEqual(["atlas", "beacon"]);
    expect(lane?.subscribers).toEqual(["atlas", "beacon"]);
    expect([...(lane?.groups ?? [])]).toEqual([["summarizers", ["beacon"]]]);
    expect([...(lane?.recoverers ?? [])]).toEqual([["summarizers", ["beacon"]]]);
    expect(config.bounds).toEqual({
      leaseMs: 30_000,
      maxPending: 64,
      maxLedger: 256,
      retryDelayMs: 1_000,
      maxRetryDelayMs: 300_000,
      ackRetentionMs: 86_400_000,
      retentionMs: 604_800_000,
      duplicateWindowMs: 120_000,
      maxRecords: 1_000_000,
      maxBytes: 1_073_741_824,
      maxPayload: 65_536,
      operationTimeoutMs: 10_000,
      ledgerBytes: 268_435_456,
    });
    expect(config.tokens.get("atlas")?.reveal()).toBe(ATLAS);
    expect(config.tokens.get("beacon")?.equals(BEACON)).toBe(true);
  });

  test("a relative credentials path resolves against cwd", () => {
    const example = { url: "nats://h:4222", credentials_env: "C", ...base() };
    const config = parseLanesConfig(JSON.stringify(example), { ...ENV, C: join(CREDS_PATH_MARKER, "service.creds") }, { cwd: work });
    expect(config.broker?.credentialsFile).toBe(credsFile);
  });

  test("url alone (no credentials) and a server list", () => {
    const config = parseLanesConfig(JSON.stringify({ url: "nats://a:4222, tls://[::1]:4223,nats://b", ...base() }), ENV);
    expect(config.broker).toEqual({ servers: ["nats://a:4222", "tls://[::1]:4223", "nats://b"], credentialsEnv: undefined, credentialsFile: undefined });
  });

  test("the demo file parses; without url the lanes use Laneway's own connection", () => {
    const config = parseLanesConfig(JSON.stringify(DEMO_LANES_CONFIG), ENV);
    expect(config.namespace).toBe("demo");
    expect(config.broker).toBeUndefined();
    expect(config.bounds.leaseMs).toBe(30_000);
  });

  test("omitted capability lists are empty; ownership alone grants nothing", () => {
    const config = parseLanesConfig(
      JSON.stringify({ ...base(), lanes: [{ id: "quiet", owner: "atlas" }] }),
      ENV,
    );
    const lane = config.lanes[0];
    expect(lane?.publishers).toEqual([]);
    expect(lane?.groups.size).toBe(0);
    expect(projectCapabilities(config, "atlas")).toEqual([
      { lane: "quiet", owner: true, publish: false, subscribe: false, groups: [], recoverGroups: [] },
    ]);
  });

  test("zero selects the default; edges of every range are accepted", () => {
    const zeros = parseLanesConfig(JSON.stringify({ ...base(), lease: 0, retention: "0s", duplicate_window: "-0", max_pending: 0, max_bytes: 0 }), ENV);
    expect(zeros.bounds).toMatchObject({ leaseMs: 30_000, retentionMs: 604_800_000, duplicateWindowMs: 120_000, maxPending: 64, maxBytes: 1_073_741_824 });

    const low = parseLanesConfig(
      JSON.stringify({
        ...base(),
        lease: "1s", max_pending: 1, max_ledger: 1, retry_delay: "1ms", max_retry_delay: "1ms", ack_retention: "1s",
        retention: "1s", duplicate_window: "1s", max_records: 1, max_bytes: 1_048_576, max_payload: 1, operation_timeout: "10ms",
        ledger_bytes: 262_144,
      }),
      ENV,
    );
    expect(low.bounds).toEqual({
      leaseMs: 1_000, maxPending: 1, maxLedger: 1, retryDelayMs: 1, maxRetryDelayMs: 1, ackRetentionMs: 1_000,
      retentionMs: 1_000, duplicateWindowMs: 1_000, maxRecords: 1, maxBytes: 1_048_576, maxPayload: 1, operationTimeoutMs: 10,
      ledgerBytes: 262_144,
    });

    const high = parseLanesConfig(
      JSON.stringify({
        ...base(),
        lease: "1h", max_pending: 512, max_ledger: 512, retry_delay: "1h", max_retry_delay: "24h", ack_retention: "720h",
        retention: "8760h", duplicate_window: "24h", max_records: 1_000_000_000, max_bytes: 1_099_511_627_776,
        max_payload: 1_048_576, operation_timeout: "5m", ledger_bytes: 1_099_511_627_776,
      }),
      ENV,
    );
    expect(high.bounds).toEqual({
      leaseMs: 3_600_000, maxPending: 512, maxLedger: 512, retryDelayMs: 3_600_000, maxRetryDelayMs: 86_400_000,
      ackRetentionMs: 2_592_000_000, retentionMs: 31_536_000_000, duplicateWindowMs: 86_400_000, maxRecords: 1_000_000_000,
      maxBytes: 1_099_511_627_776, maxPayload: 1_048_576, operationTimeoutMs: 300_000, ledgerBytes: 1_099_511_627_776,
    });
  });

  test("durations accept integer nanoseconds and Go strings; sub-millisecond parts are truncated", () => {
    const config = parseLanesConfig(
      JSON.stringify({ ...base(), lease: 45_000_000_000, retry_delay: "1500us", max_retry_delay: "1.5h", operation_timeout: "10.9999ms" }),
      ENV,
    );
    expect(config.bounds).toMatchObject({ leaseMs: 45_000, retryDelayMs: 1, maxRetryDelayMs: 5_400_000, operationTimeoutMs: 10 });
  });

  test("omitted dependent bounds follow the bound they depend on", () => {
    const config = parseLanesConfig(JSON.stringify({ ...base(), max_ledger: 10, retention: "1m", retry_delay: "10m" }), ENV);
    expect(config.bounds).toMatchObject({ maxLedger: 10, maxPending: 10, retentionMs: 60_000, duplicateWindowMs: 60_000, retryDelayMs: 600_000, maxRetryDelayMs: 600_000 });
  });

  test("limits are inclusive: 64 principals, 64 lanes, 64 groups, 64 members, 64-character ids", () => {
    const projects = [...names("p", 63), "p".padEnd(64, "x")];
    const env: Record<string, string> = {};
    const principals = projects.map((project, i) => {
      env[`T${i}`] = `token-${i}-`.padEnd(32, "z");
      return { project, token_env: `T${i}` };
    });
    const groups = Object.fromEntries(names("g", 64).map((g) => [g, projects.slice(0, 4)]));
    const lanes = names("l", 64).map((id, i) => ({
      id: id.padEnd(64, "q"),
      owner: projects[i],
      publishers: projects,
      subscribers: projects,
      groups: i === 0 ? { solo: projects } : groups,
      recoverers: i === 0 ? { solo: projects } : {},
    }));
    const config = parseLanesConfig(JSON.stringify({ namespace: "n".repeat(64), principals, lanes }), env);
    expect(config.principals).toHaveLength(64);
    expect(config.lanes).toHaveLength(64);
    expect(config.lanes[1]?.groups.size).toBe(64);
    expect(config.tokens.size).toBe(64);
  });

  test("an empty or unset operator token does not conflict with project tokens", () => {
    expect(() => parseLanesConfig(JSON.stringify(base()), { ...ENV, LANEWAY_ADMIN_TOKEN: "" })).not.toThrow();
    expect(() => parseLanesConfig(JSON.stringify(base()), { ATLAS_LANE_TOKEN: ATLAS, BEACON_LANE_TOKEN: BEACON })).not.toThrow();
  });
});

describe("the loaded configuration", () => {
  const config = parseLanesConfig(JSON.stringify(base()), ENV);

  test("is frozen all the way down, Maps included", () => {
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.bounds)).toBe(true);
    expect(Object.isFrozen(config.lanes)).toBe(true);
    expect(Object.isFrozen(config.lanes[0])).toBe(true);
    expect(Object.isFrozen(config.lanes[0]?.publishers)).toBe(true);
    const groups = config.lanes[0]?.groups as Map<string, readonly string[]>;
    expect(() => groups.set("x", [])).toThrow(TypeError);
    expect(() => groups.delete("summarizers")).toThrow(TypeError);
    expect(Object.isFrozen(groups.get("summarizers"))).toBe(true);
    expect(() => (config.tokens as Map<string, Secret>).clear()).toThrow(TypeError);
  });

  test("never shows a token when printed or serialized", () => {
    for (const text of [JSON.stringify(config), inspect(config, { depth: 10 }), String(config.tokens.get("atlas")), `${config.tokens.get("beacon")}`]) {
      expect(text).not.toContain(ATLAS);
      expect(text).not.toContain(BEACON);
    }
  });

  test("serializeRegistry is canonical JSON without tokens", () => {
    expect(serializeRegistry(config)).toBe(
      '{"bounds":{"ack_retention":"24h0m0s","duplicate_window":"2m0s","lease":"30s","ledger_bytes":268435456,"max_bytes":1073741824,"max_ledger":256,' +
        '"max_payload":65536,"max_pending":64,"max_records":1000000,"max_retry_delay":"5m0s","operation_timeout":"10s",' +
        '"retention":"168h0m0s","retry_delay":"1s"},"lanes":[{"groups":{"summarizers":["beacon"]},"id":"measurements",' +
        '"owner":"atlas","publishers":["atlas","beacon"],"recoverers":{"summarizers":["beacon"]},"subscribers":["atlas","beacon"]}],' +
        '"namespace":"commons","principals":[{"project":"atlas"},{"project":"beacon"}],"version":1}',
    );
  });

  test("reordering the file does not change the registry; renaming a token variable does not either", () => {
    const reordered = base();
    (reordered.principals as Json[]).reverse();
    lane0(reordered).publishers = ["beacon", "atlas"];
    (principal(reordered, 0) as Json).token_env = "B_TOKEN";
    const other = parseLanesConfig(JSON.stringify(reordered), { ...ENV, B_TOKEN: BEACON });
    expect(serializeRegistry(other)).toBe(serializeRegistry(config));
    const changed = parseLanesConfig(JSON.stringify({ ...base(), lease: "31s" }), ENV);
    expect(serializeRegistry(changed)).not.toBe(serializeRegistry(config));
  });

  test("capabilities per project", () => {
    expect(projectCapabilities(config, "atlas")).toEqual([
      { lane: "measurements", owner: true, publish: true, subscribe: true, groups: [], recoverGroups: [] },
    ]);
    expect(projectCapabilities(config, "beacon")).toEqual([
      { lane: "measurements", owner: false, publish: true, subscribe: true, groups: ["summarizers"], recoverGroups: ["summarizers"] },
    ]);
    expect(projectCapabilities(config, "zeta")).toEqual([]);
    expect(laneCapabilities(config.lanes[0] as LanesConfig["lanes"][number], "zeta")).toEqual({
      lane: "measurements", owner: false, publish: false, subscribe: false, groups: [], recoverGroups: [],
    });
  });

  test("the server's authenticator maps a presented token to its project, and nothing else", async () => {
    const authenticator = new Authenticator({ authenticators: [secretAuthenticator("project", config.tokens)] });
    expect(await authenticator.resolveToken(BEACON)).toEqual({ kind: "project", id: "beacon" });
    expect(await authenticator.resolveToken(ATLAS)).toEqual({ kind: "project", id: "atlas" });
    expect(await authenticator.resolveToken(ADMIN)).toBeUndefined();
    expect(await authenticator.resolveToken(ATLAS.slice(0, -1))).toBeUndefined();
    expect(await authenticator.resolveToken("")).toBeUndefined();
  });
});
