import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../log/logger.js";
import { BrokerConnection } from "./broker-connection.js";
import { adoptGlobalAccountStore } from "./jetstream-store.js";
import type { NatsConfig } from "./nats-config.js";
import { loadOrCreateServiceCredential, serviceAuthorization } from "./service-credentials.js";
import { SupervisedNatsServer, type SupervisedNatsServerOptions } from "./supervised-server.js";

/**
 * How Laneway reaches its broker: an embedded nats-server it starts and
 * supervises (the default), or an existing server or cluster.
 *
 * A core may prepare the broker before Laneway connects (the swarm core
 * runs the embedded server in operator mode with its accounts); what it
 * needs is a `BrokerPreparation`. Without one, the embedded server admits
 * one nkey user, whose seed Laneway keeps in the data directory (mode 0600),
 * so only Laneway may reach it.
 */

/** What a core asks of the broker before Laneway connects. */
export interface BrokerPreparation {
  /** The `.creds` Laneway connects with (also to an external server, when none is configured). */
  readonly credentialsFile: string;
  /** The account Laneway's JetStream store belongs to (the embedded store moves into it once). */
  readonly account: string;
  /** Where the embedded server listens (a fixed address its other clients keep across restarts). */
  readonly listen: { readonly host: string; readonly port: number };
  /** The embedded server's settings; read again at every restart. `resolverDir` holds account JWTs. */
  config(resolverDir: string): Promise<NatsConfig>;
}

export interface BrokerBootOptions {
  /** The data directory; the embedded store lives in `<dataDir>/nats`. */
  readonly dataDir: string;
  /** External servers; undefined starts the embedded nats-server. */
  readonly servers: readonly string[] | undefined;
  /** The configured credentials file for an external server. */
  readonly credentialsFile: string | undefined;
  /** The nats-server executable of the embedded server. */
  readonly serverBin: string;
  readonly preparation: BrokerPreparation | undefined;
  readonly log: Logger;
}

export interface BootedBroker {
  readonly broker: BrokerConnection;
  /** The embedded server, when Laneway started one. */
  readonly embedded: SupervisedNatsServer | undefined;
}

/**
 * Starts the embedded nats-server (or picks the external one) and opens
 * Laneway's connection. On failure, whatever was started is stopped again.
 */
export async function bootBroker(options: BrokerBootOptions): Promise<BootedBroker> {
  const { log, preparation } = options;
  let servers = options.servers;
  let credentialsFile = options.credentialsFile;
  let embedded: SupervisedNatsServer | undefined;
  if (servers !== undefined && credentialsFile === undefined && preparation) credentialsFile = preparation.credentialsFile;
  if (servers === undefined) {
    const storeDir = join(options.dataDir, "nats");
    await mkdir(storeDir, { recursive: true, mode: 0o700 });
    let supervision: Omit<SupervisedNatsServerOptions, "log">;
    if (preparation) {
      if (await adoptGlobalAccountStore(storeDir, preparation.account)) log.info("the JetStream store moved into Laneway's own account for the broker's operator mode");
      credentialsFile = preparation.credentialsFile;
      const resolverDir = join(storeDir, "jwt");
      supervision = {
        server: {
          storeDir,
          binary: options.serverBin,
          host: preparation.listen.host,
          port: preparation.listen.port,
          extraConfig: await preparation.config(resolverDir),
        },
        // A restart preloads the accounts as they are then (revocations included).
        refresh: async () => ({ extraConfig: await preparation.config(resolverDir) }),
      };
    } else {
      const credential = await loadOrCreateServiceCredential(join(storeDir, "laneway-service.nk"));
      credentialsFile = credential.seedPath;
      supervision = { server: { storeDir, binary: options.serverBin, extraConfig: { authorization: serviceAuthorization(credential) } } };
    }
    // Both modes: restarted on the same store and port if it exits.
    embedded = await SupervisedNatsServer.start({ ...supervision, log: log.child({ component: "embedded-nats" }) });
    servers = [embedded.url];
    if (!embedded.syncAlways) {
      log.warn("the installed nats-server acknowledges JetStream writes before fsync; a power failure can lose acknowledged records", {
        natsServerVersion: embedded.serverVersion,
      });
    }
  }
  try {
    const started = embedded;
    const broker = await BrokerConnection.open({
      servers,
      ...(credentialsFile ? { credentialsFile } : {}),
      name: "laneway",
      // The embedded server is ours and already up; an external one may
      // come later, and health reports it meanwhile.
      initialConnect: started ? "fail" : "retry",
      ...(started ? { explainDisconnect: (clientId: number | undefined) => started.disconnectReason(clientId) } : {}),
    });
    return { broker, embedded };
  } catch (error) {
    await embedded?.stop().catch(() => {});
    throw error;
  }
}
