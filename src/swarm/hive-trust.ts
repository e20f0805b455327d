/**
 * The hive's trust material, created by `laneway hive init` in the data
 * directory, and the nats-server configuration of decentralized JWT auth
 * built from it.
 *
 * `<data dir>/hive/` (mode 0700):
 *
 *   hive.json                  public keys and the embedded server's listen address
 *   keys/operator.nk           the operator seed: signs every account JWT
 *   keys/system-account.nk     the system account seed
 *   keys/hive-account.nk       the hive account seed (members and the hub)
 *   keys/laneway-account.nk    Laneway's own account seed (its lanes' streams)
 *   creds/hub.creds            the hub's service user in the hive account
 *   creds/system.creds         the hub's system account user (pushes account updates)
 *   creds/laneway.creds        Laneway's own service user in its own account
 *   records/nats-signer.json   the default signer record (`hub:nats-signer`): the signing key
 *   hub-state.json             members, revocations, retirements (the hub store)
 *   nats-server-auth.conf      the operator-mode settings for a server the operator provisions
 *
 * Every seed and credential file is mode 0600. The hive account's member
 * credentials are signed by the signing key of the signer record, never by
 * the account key itself.
 */
import { createServer } from "node:net";
import { access, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { KeyPair } from "@nats-io/nkeys";
import { encodeUser, fmtCreds } from "@nats-io/jwt";
import { NativeKeyPair, renderNatsConfig, type NatsConfig } from "../nats/index.js";
import {
  encodeHiveAccountJwt,
  encodeLanewayAccountJwt,
  encodeOperatorJwt,
  encodeSystemAccountJwt,
  type HiveAccountState,
  type TrustKeys,
} from "./account-claims.js";
import { SwarmError } from "../swarm-bus/index.js";
import { hiveAccountStateOf, initialHubState, type HubState } from "./hub-state.js";
import { HubStateFile } from "./hub-store.js";
import { errnoCode, writePrivateFile } from "../files/index.js";
import { createHubRecord, DEFAULT_SIGNER, hubRecordPath } from "./signer-store.js";

/** The largest protocol line the server accepts: a member's JWT grows with its swarms (about 14 KB each). */
export const HIVE_MAX_CONTROL_LINE = 4 * 1024 * 1024;

/** The hive folder inside a data directory. */
export function hiveDirOf(dataDir: string): string {
  return join(dataDir, "hive");
}

/** A hive's keys and settings, as loaded from its folder. */
export interface HiveTrust extends TrustKeys {
  readonly dir: string;
  /** Where the embedded nats-server listens when the hive is enabled. */
  readonly natsListen: { readonly host: string; readonly port: number };
  /** The NATS address members reach by default (AGENTIHOOKS_BUS_URL); undefined: the server's own address. */
  readonly busUrl: string | undefined;
  readonly credsPaths: { readonly hub: string; readonly system: string; readonly laneway: string };
  readonly statePath: string;
}

interface HiveJson {
  readonly version: 1;
  readonly operator: string;
  readonly systemAccount: string;
  readonly hiveAccount: string;
  readonly lanewayAccount: string;
  readonly natsListen: string;
  readonly busUrl?: string;
}

export interface InitHiveOptions {
  /** `host:port` of the embedded nats-server; default 127.0.0.1 and a port free now. */
  readonly natsListen?: string;
  /** The NATS address members reach (AGENTIHOOKS_BUS_URL); default the server's own address. */
  readonly busUrl?: string;
}

export interface InitHiveResult {
  /** False when the hive folder existed already (nothing was changed). */
  readonly created: boolean;
  readonly dir: string;
  readonly operator: string;
  readonly systemAccount: string;
  readonly hiveAccount: string;
  readonly lanewayAccount: string;
  readonly signer: string;
  readonly natsListen: string;
  /** The operator-mode settings for a server the operator provisions (`--nats-url`). */
  readonly serverConfigPath: string;
}

const paths = (dir: string) => ({
  json: join(dir, "hive.json"),
  operator: join(dir, "keys", "operator.nk"),
  systemAccount: join(dir, "keys", "system-account.nk"),
  hiveAccount: join(dir, "keys", "hive-account.nk"),
  lanewayAccount: join(dir, "keys", "laneway-account.nk"),
  hubCreds: join(dir, "creds", "hub.creds"),
  systemCreds: join(dir, "creds", "system.creds"),
  lanewayCreds: join(dir, "creds", "laneway.creds"),
  state: join(dir, "hub-state.json"),
  serverConfig: join(dir, "nats-server-auth.conf"),
});

/**
 * Creates the operator, the system, hive and Laneway accounts, the service
 * users, the default signer record and the server configuration. Does
 * nothing when the hive exists already (its keys are never replaced).
 */
export async function initHive(dataDir: string, options: InitHiveOptions = {}): Promise<InitHiveResult> {
  const dir = hiveDirOf(dataDir);
  const p = paths(dir);
  const existing = await loadHiveTrust(dataDir);
  if (existing) return describe(existing, false);

  const natsListen = options.natsListen ?? `127.0.0.1:${await freePort()}`;
  parseListen(natsListen);
  const keys: TrustKeys = {
    operator: NativeKeyPair.create("operator"),
    systemAccount: NativeKeyPair.create("account"),
    hiveAccount: NativeKeyPair.create("account"),
    lanewayAccount: NativeKeyPair.create("account"),
  };
  const signingKey = NativeKeyPair.create("account");
  const seed = (pair: KeyPair) => `${new TextDecoder().decode(pair.getSeed())}\n`;
  await writePrivateFile(p.operator, seed(keys.operator));
  await writePrivateFile(p.systemAccount, seed(keys.systemAccount));
  await writePrivateFile(p.hiveAccount, seed(keys.hiveAccount));
  await writePrivateFile(p.lanewayAccount, seed(keys.lanewayAccount));
  await writePrivateFile(p.hubCreds, await serviceCreds("laneway-hub", keys.hiveAccount));
  await writePrivateFile(p.systemCreds, await serviceCreds("laneway-system", keys.systemAccount));
  await writePrivateFile(p.lanewayCreds, await serviceCreds("laneway", keys.lanewayAccount));
  await createHubRecord(hubRecordPath(dir, "nats-signer"), new TextDecoder().decode(signingKey.getSeed()));
  const state: HubState = { ...initialHubState(), signingKeys: [signingKey.getPublicKey()] };
  await new HubStateFile(p.state).save(state);
  const json: HiveJson = {
    version: 1,
    operator: keys.operator.getPublicKey(),
    systemAccount: keys.systemAccount.getPublicKey(),
    hiveAccount: keys.hiveAccount.getPublicKey(),
    lanewayAccount: keys.lanewayAccount.getPublicKey(),
    natsListen,
    ...(options.busUrl ? { busUrl: options.busUrl } : {}),
  };
  const trust = await loadFrom(dir, json);
  await writePrivateFile(p.serverConfig, renderNatsConfig(await operatorModeConfig(trust, hiveAccountStateOf(state), "./jwt")));
  // Written last: its presence is what makes the hive initialized.
  await writePrivateFile(p.json, `${JSON.stringify(json, null, 2)}\n`);
  return describe(trust, true);
}

/** Loads the hive of a data directory; undefined when `hive init` has not run. */
export async function loadHiveTrust(dataDir: string): Promise<HiveTrust | undefined> {
  const dir = hiveDirOf(dataDir);
  let text: string;
  try {
    text = await readFile(paths(dir).json, "utf8");
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return undefined;
    throw new SwarmError("swarm_unavailable", `the hive settings cannot be read (${errnoCode(error)})`, { cause: error });
  }
  let json: HiveJson;
  try {
    json = JSON.parse(text) as HiveJson;
  } catch {
    throw new SwarmError("swarm_invalid", "the hive settings (hive/hive.json) are not valid JSON");
  }
  return loadFrom(dir, json);
}

/**
 * The nats-server settings of decentralized JWT auth for this hive: the
 * operator, the system account, the `full` resolver storing account JWTs in
 * `resolverDir`, the three accounts preloaded (the hive account with the
 * hub state's signing keys and revocations), and a control line large
 * enough for member JWTs.
 */
export async function operatorModeConfig(trust: HiveTrust, state: HiveAccountState, resolverDir: string): Promise<NatsConfig> {
  return {
    operator: await encodeOperatorJwt(trust),
    system_account: trust.systemAccount.getPublicKey(),
    resolver: { type: "full", dir: resolverDir, allow_delete: false, interval: "2m" },
    resolver_preload: {
      [trust.systemAccount.getPublicKey()]: await encodeSystemAccountJwt(trust),
      [trust.lanewayAccount.getPublicKey()]: await encodeLanewayAccountJwt(trust),
      [trust.hiveAccount.getPublicKey()]: await encodeHiveAccountJwt(trust, state),
    },
    max_control_line: HIVE_MAX_CONTROL_LINE,
  };
}

/** Parses `host:port` (IPv6 in brackets). */
export function parseListen(value: string): { host: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+)):([0-9]{1,5})$/.exec(value);
  const port = Number(match?.[3]);
  if (!match || !Number.isInteger(port) || port > 65_535) {
    throw new SwarmError("swarm_invalid", "the NATS listen address must be host:port, such as 127.0.0.1:4250");
  }
  return { host: match[1] ?? match[2]!, port };
}

async function loadFrom(dir: string, json: HiveJson): Promise<HiveTrust> {
  const p = paths(dir);
  const key = async (path: string, expected: string): Promise<KeyPair> => {
    let pair: KeyPair;
    try {
      pair = NativeKeyPair.fromSeed(await readFile(path, "utf8"));
    } catch (error) {
      throw new SwarmError("swarm_unavailable", `a hive key cannot be read (${errnoCode(error)})`, { cause: error });
    }
    if (pair.getPublicKey() !== expected) throw new SwarmError("swarm_invalid", "a hive key does not match hive/hive.json");
    return pair;
  };
  const trust: HiveTrust = {
    dir,
    operator: await key(p.operator, json.operator),
    systemAccount: await key(p.systemAccount, json.systemAccount),
    hiveAccount: await key(p.hiveAccount, json.hiveAccount),
    lanewayAccount: await key(p.lanewayAccount, json.lanewayAccount),
    natsListen: parseListen(json.natsListen),
    busUrl: json.busUrl,
    credsPaths: { hub: p.hubCreds, system: p.systemCreds, laneway: p.lanewayCreds },
    statePath: p.state,
  };
  for (const path of Object.values(trust.credsPaths)) {
    await access(path).catch((error: unknown) => {
      throw new SwarmError("swarm_unavailable", `a hive credential cannot be read (${errnoCode(error)})`, { cause: error });
    });
  }
  return trust;
}

function describe(trust: HiveTrust, created: boolean): InitHiveResult {
  return {
    created,
    dir: trust.dir,
    operator: trust.operator.getPublicKey(),
    systemAccount: trust.systemAccount.getPublicKey(),
    hiveAccount: trust.hiveAccount.getPublicKey(),
    lanewayAccount: trust.lanewayAccount.getPublicKey(),
    signer: DEFAULT_SIGNER,
    natsListen: `${trust.natsListen.host.includes(":") ? `[${trust.natsListen.host}]` : trust.natsListen.host}:${trust.natsListen.port}`,
    serverConfigPath: paths(trust.dir).serverConfig,
  };
}

/** A service user credential (no expiry, no permission limits) issued by an account key. */
async function serviceCreds(name: string, account: KeyPair): Promise<Uint8Array> {
  const user = NativeKeyPair.create("user");
  return fmtCreds(await encodeUser(name, user, account), user);
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}
