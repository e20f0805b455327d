/**
 * The bus settings: given as options, or read from the `hive.env`
 * variables a member's processes (and the hub) run with.
 *
 * | variable | effect |
 * | --- | --- |
 * | `AGENTIHOOKS_BUS=nats` | selects the NATS backend (the only one) |
 * | `AGENTIHOOKS_BUS_URL` | the NATS address (a comma-separated list for a cluster) |
 * | `AGENTIHOOKS_BUS_CREDENTIALS` | the path of the minted credential (`hive.creds`); relative paths resolve against `baseDir` |
 * | `AGENTIHOOKS_BUS_SCOPED=1` | routes queues, dead letters and events to each swarm's own streams; state only through `forSwarm` |
 * | `AGENTIHOOKS_BUS_BIND=1` | binds existing streams and consumers, never creates them (members hold no create grant) |
 *
 * The specification also allows `AGENTIHOOKS_BUS_CREDENTIALS` to be an
 * `openbao:` reference. This build reaches no OpenBao (neither does the
 * signer record store), so a reference is refused with a typed
 * {@link BusConfigError} that says so, instead of being read as a path.
 *
 * Messages never repeat a URL or a credential path's contents.
 */
import { isAbsolute, resolve } from "node:path";
import { HIVE_ENV } from "./member-env.js";
import { BusConfigError } from "./errors.js";

/** How a lane queue's durable consumer hands out work. */
export interface QueuePolicy {
  /** How long a taken item is held before it is delivered again. Default 30 000 ms. */
  readonly ackWaitMs?: number;
  /** Deliveries before JetStream stops redelivering an item; -1 (default) is unlimited. */
  readonly maxDeliver?: number;
  /** Stream limits (0 or absent: unlimited). */
  readonly maxMessages?: number;
  readonly maxBytes?: number;
  readonly maxAgeMs?: number;
}

export const DEFAULT_QUEUE_POLICY = Object.freeze({ ackWaitMs: 30_000, maxDeliver: -1, maxMessages: 0, maxBytes: 0, maxAgeMs: 0 } satisfies Required<QueuePolicy>);

/** What {@link openBus} needs. */
export interface BusConfig {
  readonly backend: "nats";
  /** `nats://host:port`, or several for a cluster. A secret of sorts: never shown in messages. */
  readonly url: string | readonly string[];
  /** Path of the `.creds` file (or a bare user nkey seed file). Absent: no credential (a server without auth). */
  readonly credentials?: string;
  /** Route to each swarm's own streams (`AGENTIHOOKS_BUS_SCOPED=1`). */
  readonly scoped: boolean;
  /** Bind existing streams and consumers, never create them (`AGENTIHOOKS_BUS_BIND=1`). */
  readonly bind: boolean;
  /**
   * The inbox prefix (`_INBOX.<member>`). Default: read from the
   * credential's subscribe grant when it allows only one member inbox.
   */
  readonly inboxPrefix?: string;
  /** Connection name shown in the server's monitoring. */
  readonly connectionName?: string;
  /** Replicas of streams the bus creates (provisioning mode). Default 1. */
  readonly replicas?: number;
  /** JetStream request timeout. Default 10 000 ms. */
  readonly requestTimeoutMs?: number;
  /** The policy of lane queues the bus provisions. */
  readonly queuePolicy?: QueuePolicy;
}

/** Whether the bus may create streams and consumers (the hub: not bind). */
export function isProvisioning(config: Pick<BusConfig, "bind">): boolean {
  return !config.bind;
}

/**
 * Reads the bus settings from `env` (the `hive.env` variables). Relative
 * credential paths resolve against `baseDir` (default: the working
 * directory; pass the folder of hive.env when reading that file).
 */
export function busConfigFromEnv(env: Readonly<Record<string, string | undefined>> = process.env, options: { baseDir?: string } = {}): BusConfig {
  const backend = env[HIVE_ENV.bus];
  if (backend === undefined || backend === "") throw new BusConfigError(`${HIVE_ENV.bus} is not set; set ${HIVE_ENV.bus}=nats`);
  if (backend !== "nats") throw new BusConfigError(`${HIVE_ENV.bus} must be nats`);
  const rawUrl = env[HIVE_ENV.busUrl];
  if (rawUrl === undefined || rawUrl.trim() === "") throw new BusConfigError(`${HIVE_ENV.busUrl} is not set`);
  const urls = rawUrl
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
  for (const url of urls) checkNatsUrl(url, HIVE_ENV.busUrl);
  const credentials = credentialsPath(env[HIVE_ENV.busCredentials], options.baseDir ?? process.cwd());
  return {
    backend: "nats",
    url: urls.length === 1 ? urls[0]! : urls,
    ...(credentials === undefined ? {} : { credentials }),
    scoped: flag(env, HIVE_ENV.busScoped),
    bind: flag(env, HIVE_ENV.busBind),
  };
}

/**
 * Only the two mode flags, `AGENTIHOOKS_BUS_SCOPED` and
 * `AGENTIHOOKS_BUS_BIND` (`1`, or `0`/empty/absent): what the hub reads
 * from its own environment (it connects with its own credential, not with
 * `AGENTIHOOKS_BUS_URL` and `AGENTIHOOKS_BUS_CREDENTIALS`).
 */
export function busModeFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): { readonly scoped: boolean; readonly bind: boolean } {
  return { scoped: flag(env, HIVE_ENV.busScoped), bind: flag(env, HIVE_ENV.busBind) };
}

/** Checks a config given as options (the same rules as the variables). */
export function checkBusConfig(config: BusConfig): BusConfig {
  if (config.backend !== "nats") throw new BusConfigError("the bus backend must be nats");
  const urls = typeof config.url === "string" ? [config.url] : config.url;
  if (urls.length === 0) throw new BusConfigError("the bus needs a NATS URL");
  for (const url of urls) checkNatsUrl(url, "the bus URL");
  if (config.credentials !== undefined) credentialsPath(config.credentials, process.cwd());
  if (config.replicas !== undefined && (!Number.isInteger(config.replicas) || config.replicas < 1 || config.replicas > 5)) {
    throw new BusConfigError("bus replicas must be an integer from 1 to 5");
  }
  if (config.inboxPrefix !== undefined && !/^[A-Za-z0-9_.-]+$/.test(config.inboxPrefix)) {
    throw new BusConfigError("the inbox prefix must be a subject without wildcards");
  }
  return config;
}

function flag(env: Readonly<Record<string, string | undefined>>, name: string): boolean {
  const value = env[name];
  if (value === undefined || value === "" || value === "0") return false;
  if (value === "1") return true;
  throw new BusConfigError(`${name} must be 1 or 0`);
}

function credentialsPath(value: string | undefined, baseDir: string): string | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  if (value.startsWith("openbao:")) {
    throw new BusConfigError(
      `${HIVE_ENV.busCredentials} is an openbao: reference, and references are not supported by this build; point it at the credential file hive join saved (hive.creds)`,
    );
  }
  return isAbsolute(value) ? value : resolve(baseDir, value);
}

function checkNatsUrl(url: string, what: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url.includes("://") ? url : `nats://${url}`);
  } catch {
    throw new BusConfigError(`${what} is not a NATS URL`);
  }
  if (!["nats:", "tls:", "ws:", "wss:"].includes(parsed.protocol) || parsed.hostname === "") {
    throw new BusConfigError(`${what} is not a NATS URL`);
  }
}
