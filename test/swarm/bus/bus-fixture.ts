/**
 * A hive for the scoped bus tests: `hive init` in a temporary data
 * directory, a nats-server of the test's own in operator mode with the
 * hive's accounts (decentralized JWT auth), the hub's service credential
 * (the hive account's privileged user, what the hub provisions and
 * migrates with), and members holding credentials minted exactly as
 * `hive join` mints them (credential-minter.ts with the grant of
 * member-grant.ts, signed by the signer record's key). Nothing here
 * grants a member more than its minted credential.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import {
  hiveBrokerSetup,
  hiveDirOf,
  initHive,
  loadHiveTrust,
  mintMemberCredential,
  openSignerStore,
  renderMemberGrant,
  type HiveTrust,
} from "../../../src/swarm/index.js";
import { openBus, type Bus } from "../../../src/swarm-bus/index.js";
import { signingKeyPair } from "../../../src/swarm/signer-record.js";
import { startNatsServer, type NatsServerHandle } from "../../helpers/nats-server.js";

export interface BusHive {
  readonly nats: NatsServerHandle;
  readonly trust: HiveTrust;
  readonly dataDir: string;
  /** The hub's bus: its service credential, provisioning (not bind). */
  hubBus(options?: { scoped?: boolean; bind?: boolean }): Promise<Bus>;
  /** Mints a member credential (scoped to `swarms`, or unscoped) and opens a bus with it, bind mode by default. */
  memberBus(memberId: string, swarms: readonly string[] | "unscoped", options?: { bind?: boolean; scoped?: boolean }): Promise<MemberBus>;
  /** A raw connection with the hub's credential, for setting up legacy state the way old processes left it. */
  admin(): Promise<{ nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager }>;
  /** The minted credentials' texts (secrets a log must never show). */
  readonly secrets: string[];
  stop(): Promise<void>;
}

export interface MemberBus {
  readonly bus: Bus;
  readonly credentialsPath: string;
  /** A raw connection with the same minted credential (to show what the server itself refuses). */
  raw(): Promise<NatsConnection>;
}

export async function startBusHive(): Promise<BusHive> {
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-bus-test-"));
  await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  const setup = (await hiveBrokerSetup(dataDir))!;
  const nats = await startNatsServer({ extraConfig: await setup.config(join(dataDir, "nats-jwt")) });
  const trust = (await loadHiveTrust(dataDir))!;
  const signingKey = signingKeyPair(await openSignerStore(undefined, hiveDirOf(dataDir)).read());
  const buses: Bus[] = [];
  const connections: NatsConnection[] = [];
  const secrets: string[] = [];
  const track = <T extends Bus>(bus: T) => (buses.push(bus), bus);
  return {
    nats,
    trust,
    dataDir,
    secrets,
    async hubBus(options = {}) {
      return track(await openBus({ backend: "nats", url: nats.url, credentials: trust.credsPaths.hub, scoped: options.scoped ?? true, bind: options.bind ?? false }));
    },
    async memberBus(memberId, swarms, options = {}) {
      const decision = swarms === "unscoped" ? ({ kind: "unscoped" } as const) : ({ kind: "scoped", swarms } as const);
      const minted = await mintMemberCredential({
        memberId,
        grant: renderMemberGrant(memberId, decision),
        signingKey,
        hiveAccount: trust.hiveAccount.getPublicKey(),
        now: Date.now(),
        lifetimeMs: 3_600_000,
      });
      secrets.push(minted.creds);
      const credentialsPath = join(dataDir, `${memberId}.creds`);
      await writeFile(credentialsPath, minted.creds, { mode: 0o600 });
      const bus = track(
        await openBus({ backend: "nats", url: nats.url, credentials: credentialsPath, scoped: options.scoped ?? swarms !== "unscoped", bind: options.bind ?? true }),
      );
      return {
        bus,
        credentialsPath,
        async raw() {
          const nc = await connect({
            servers: nats.url,
            authenticator: credsAuthenticator(new TextEncoder().encode(minted.creds)),
            inboxPrefix: `_INBOX.${memberId}`,
            reconnect: false,
          });
          connections.push(nc);
          return nc;
        },
      };
    },
    async admin() {
      const { readFile } = await import("node:fs/promises");
      const nc = await connect({ servers: nats.url, authenticator: credsAuthenticator(await readFile(trust.credsPaths.hub)), reconnect: false });
      connections.push(nc);
      return { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
    },
    async stop() {
      for (const bus of buses) await bus.close().catch(() => undefined);
      for (const nc of connections) await nc.close().catch(() => undefined);
      await nats.remove();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export const text = (data: Uint8Array) => new TextDecoder().decode(data);

/** The refusal a call ends in (fails the test when it succeeds). */
export async function refusal(attempt: Promise<unknown> | (() => unknown)): Promise<Error & { reason?: string }> {
  try {
    await (typeof attempt === "function" ? attempt() : attempt);
  } catch (error) {
    return error as Error & { reason?: string };
  }
  throw new Error("expected a refusal, but the call succeeded");
}
