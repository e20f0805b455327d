/**
 * A hive under test: a data directory where `hive init` ran, a nats-server
 * of the test's own in operator mode with the hive's accounts (the
 * operator-provisioned server of `--nats-url`), Laneway in-process on it,
 * and optionally a redis-server of the test's own on a free port (never
 * the machine's 6379). Clients are the generated ones; members connect to
 * NATS with the credential they were minted.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createAccount } from "@nats-io/nkeys";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { Client } from "@connectrpc/connect";
import type { WireProtocol } from "../../src/client/transport.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { hiveBrokerSetup, initHive, loadHiveTrust, type HiveTrust } from "../../src/swarm/index.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

export { redisAuthWorks, startRedis, type TestRedis } from "../helpers/redis.js";

/** A `file:` signer folder the test edits (member_swarms), with its own signing key. */
export interface FileSigner {
  readonly folder: string;
  readonly signingKeySeed: string;
  /** Writes the member_swarms file (`undefined` removes the field, `"raw:<text>"` writes text as is). */
  setMemberSwarms(value: Record<string, unknown> | undefined | string): Promise<void>;
}

export async function createFileSigner(parent: string): Promise<FileSigner> {
  const folder = join(parent, "signer");
  await mkdir(folder, { recursive: true });
  const signingKeySeed = new TextDecoder().decode(createAccount().getSeed());
  await writeFile(join(folder, "signing_key"), `${signingKeySeed}\n`, { mode: 0o600 });
  return {
    folder,
    signingKeySeed,
    async setMemberSwarms(value) {
      const path = join(folder, "member_swarms");
      if (value === undefined) await rm(path, { force: true });
      else await writeFile(path, typeof value === "string" ? value : JSON.stringify({ member_swarms: value }));
    },
  };
}

export interface HiveUnderTest {
  readonly dataDir: string;
  readonly trust: HiveTrust;
  readonly nats: NatsServerHandle;
  readonly laneway: InProcessLaneway;
  readonly adminToken: string;
  hub(protocol?: WireProtocol): Client<typeof HiveHubService>;
  member(secret: string, protocol?: WireProtocol): Client<typeof HiveMemberService>;
  /** A connection with the hub's own service credential (hive account, all permissions). */
  hubConnection(): Promise<NatsConnection>;
  stop(): Promise<void>;
}

export interface HiveOptions {
  readonly env?: Readonly<Record<string, string>>;
  /** Runs before Laneway starts (for example to write a file: signer). */
  readonly prepare?: (dataDir: string) => Promise<void>;
}

/** Initializes a hive, starts its operator-mode nats-server and Laneway on it. */
export async function startHive(options: HiveOptions = {}): Promise<HiveUnderTest> {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-hive-test-"));
  await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  await options.prepare?.(dataDir);
  const setup = (await hiveBrokerSetup(dataDir))!;
  const nats = await startNatsServer({ extraConfig: await setup.config(join(dataDir, "nats-jwt")) });
  const trust = (await loadHiveTrust(dataDir))!;
  const laneway = await startLanewayInProcess({ natsUrl: nats.url, dataDir, lanesConfig: false, ...(options.env ? { env: options.env } : {}) });
  const connections: NatsConnection[] = [];
  return {
    dataDir,
    trust,
    nats,
    laneway,
    adminToken: laneway.tokens.admin,
    hub: (protocol = "connect-json") => laneway.clients.client(HiveHubService, { token: laneway.tokens.admin, protocol }),
    member: (secret, protocol = "connect-json") => laneway.clients.client(HiveMemberService, { token: secret, protocol }),
    async hubConnection() {
      const nc = await connectWithCreds(nats.url, await readText(trust.credsPaths.hub));
      connections.push(nc);
      return nc;
    },
    async stop() {
      for (const nc of connections) await nc.close().catch(() => {});
      await laneway.stop();
      await nats.remove();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

function readText(path: string): Promise<string> {
  return readFile(path, "utf8");
}

/** Connects to NATS with a `.creds` text; no reconnect, so a revoked credential ends the connection. */
export async function connectWithCreds(servers: string, creds: string, inboxPrefix?: string): Promise<NatsConnection> {
  return connect({
    servers,
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    reconnect: false,
    timeout: 10_000,
    ...(inboxPrefix === undefined ? {} : { inboxPrefix }),
  });
}

/** JetStream handles for a restricted user (no `$JS.API.INFO`). */
export async function jetStreamOf(nc: NatsConnection): Promise<{ js: JetStreamClient; jsm: JetStreamManager }> {
  return { js: jetstream(nc, { timeout: 10_000 }), jsm: await jetstreamManager(nc, { checkAPI: false, timeout: 10_000 }) };
}

/** Every secret a test saw, to prove none reached a log line. */
export class SecretLedger {
  readonly #secrets = new Set<string>();

  add(...values: (string | undefined)[]): void {
    for (const value of values) {
      if (value === undefined || value.length < 12) continue;
      this.#secrets.add(value);
      // A creds file holds a JWT and a seed: each alone is a secret too.
      for (const match of value.matchAll(/(eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)|(S[UAO][A-Z2-7]{56})/g)) this.#secrets.add(match[0]);
      for (const match of value.matchAll(/:([A-Za-z0-9_-]{30,})@/g)) this.#secrets.add(match[1]!);
    }
  }

  /** The secrets that appear in `text`. */
  leaked(text: string): string[] {
    return [...this.#secrets].filter((s) => text.includes(s));
  }
}
