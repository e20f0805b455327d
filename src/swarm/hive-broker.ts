/**
 * What the embedded nats-server needs once the hive is enabled: operator
 * mode with the hive's accounts, on the listen address `hive init` chose
 * (members keep their AGENTIHOOKS_BUS_URL across restarts), and Laneway's
 * own connection as a service user of its own account, so lanes keep
 * working while no hive member can reach their streams.
 */
import type { NatsConfig } from "../nats/index.js";
import { hiveAccountStateOf } from "./hub-state.js";
import { HubStateFile } from "./hub-store.js";
import { initHive, loadHiveTrust, operatorModeConfig } from "./hive-trust.js";

export interface HiveBrokerSetup {
  /** The `.creds` of Laneway's own service user. */
  readonly lanewayCredentialsFile: string;
  /** Laneway's own account (its JetStream store folder). */
  readonly lanewayAccount: string;
  /** Where the embedded server listens. */
  readonly listen: { readonly host: string; readonly port: number };
  /** The server settings of operator mode, with the hub state's revocations; `resolverDir` holds account JWTs. */
  config(resolverDir: string): Promise<NatsConfig>;
}

/**
 * The hive's broker setup of a data directory; undefined when the hive is
 * not initialized. With `initialize` (demo mode) the hive is initialized
 * first when it is not.
 */
export async function hiveBrokerSetup(dataDir: string, options: { initialize?: boolean } = {}): Promise<HiveBrokerSetup | undefined> {
  if (options.initialize) await initHive(dataDir);
  const trust = await loadHiveTrust(dataDir);
  if (trust === undefined) return undefined;
  return {
    lanewayCredentialsFile: trust.credsPaths.laneway,
    lanewayAccount: trust.lanewayAccount.getPublicKey(),
    listen: trust.natsListen,
    async config(resolverDir) {
      const state = await new HubStateFile(trust.statePath).load();
      return operatorModeConfig(trust, hiveAccountStateOf(state), resolverDir);
    },
  };
}
