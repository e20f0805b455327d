/**
 * A real 3-node JetStream cluster for tests: three nats-server processes
 * with routes to each other on loopback, each with its own temporary store,
 * its own `server_name`, and free client, cluster and monitoring ports.
 *
 * Every node is an EmbeddedNatsServer (src/nats/embedded-server.ts) with the
 * cluster given through `extraConfig`, the way test/helpers/nats-server.ts
 * starts a single server, so tests exercise the same start, readiness and
 * stop code that `laneway serve` uses. A test can stop, SIGKILL or restart
 * any node; a restarted node keeps its store, its ports and its name, so it
 * rejoins as the same JetStream peer and catches up from the others.
 *
 * Readiness of the cluster (not just of each process): a JetStream meta
 * leader is elected and every node sees all three peers — asked through
 * each node's own client port and monitoring port.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

import { EmbeddedNatsServer, type EmbeddedNatsServerOptions } from "../../src/nats/embedded-server.js";
import { waitFor } from "./wait-for.js";
import { freePorts } from "./free-port.js";

export interface StartNatsClusterOptions {
  /** Number of nodes (default 3). */
  readonly size?: number;
  /** Extra top-level config keys for every node (a `jetstream` object is merged). */
  readonly extraConfig?: EmbeddedNatsServerOptions["extraConfig"];
  readonly maxPayload?: number;
  /** How long to wait for the cluster (meta leader, peers) to form. Default 60 s. */
  readonly readyTimeoutMs?: number;
}

/** One node of the cluster. */
export interface NatsClusterNode {
  /** Its `server_name` (also its JetStream peer name). */
  readonly name: string;
  /** `nats://127.0.0.1:<port>`; stays valid across restart(). */
  readonly url: string;
  readonly port: number;
  readonly clusterPort: number;
  /** `http://127.0.0.1:<port>`: the node's monitoring endpoint (varz, jsz, routez). */
  readonly monitorUrl: string;
  /** Temporary directory with this node's config and JetStream store. */
  readonly storeDir: string;
  /** Pid of the current process (changes on restart). */
  readonly pid: number;
  readonly running: boolean;
  /** The current embedded server (changes on restart). */
  readonly server: EmbeddedNatsServer;
  /** Graceful stop (SIGTERM, then SIGKILL after a deadline). */
  stop(): Promise<void>;
  /** Sends `signal` (default SIGKILL); for terminating signals waits until the process is gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Stops it if running, then starts it again with the same name, ports and store; waits until its process is ready. */
  restart(): Promise<void>;
  /** The node's local JetStream view (its own copy of every stream), from its monitoring port. */
  jsz(): Promise<NodeJsz>;
}

/** What a node's `/jsz?accounts=true&streams=true` says about its own replicas. */
export interface NodeJsz {
  /** The meta leader this node knows of, when any. */
  readonly metaLeader: string | undefined;
  /** Peers in this node's meta group (itself included). */
  readonly metaClusterSize: number;
  /** This node's local copy of each stream, by name. */
  readonly streams: ReadonlyMap<string, { messages: number; firstSeq: number; lastSeq: number; leader: string | undefined }>;
}

export interface NatsClusterHandle {
  readonly nodes: readonly NatsClusterNode[];
  /** Every node's client URL. */
  readonly urls: readonly string[];
  node(name: string): NatsClusterNode;
  /** Waits until a meta leader is elected and every running node sees all peers. */
  waitReady(timeoutMs?: number): Promise<void>;
  /** Stops every node and deletes every store. Idempotent. */
  remove(): Promise<void>;
}

const clusters = new Set<NatsClusterHandle>();

/** Starts a JetStream cluster on loopback (3 nodes by default) and waits until it has formed. */
export async function startNatsCluster(options: StartNatsClusterOptions = {}): Promise<NatsClusterHandle> {
  // Ports are chosen before the servers start (each node's routes name the
  // others' cluster ports). Another process can take a port in between; a
  // node that cannot bind fails to start, and the whole start is retried.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (error) {
      if (attempt >= 3) throw error;
    }
  }
}

async function startOnce(options: StartNatsClusterOptions): Promise<NatsClusterHandle> {
  const size = options.size ?? 3;
  const id = randomBytes(4).toString("hex");
  const clusterName = `laneway-test-${id}`;
  const specs: { name: string; port: number; clusterPort: number; monitorPort: number; storeDir: string }[] = [];
  const ports = await freePorts(size * 3);
  for (let i = 0; i < size; i++) {
    specs.push({
      name: `n${i + 1}-${id}`,
      port: ports[i * 3]!,
      clusterPort: ports[i * 3 + 1]!,
      monitorPort: ports[i * 3 + 2]!,
      storeDir: await mkdtemp(join(tmpdir(), `laneway-nats-cluster-n${i + 1}-`)),
    });
  }
  const routes = specs.map((s) => `nats-route://127.0.0.1:${s.clusterPort}`);
  const { jetstream: extraJetStream, ...extraTop } = options.extraConfig ?? {};
  const optionsOf = (spec: (typeof specs)[number]): EmbeddedNatsServerOptions => ({
    storeDir: spec.storeDir,
    host: "127.0.0.1",
    port: spec.port,
    serverName: spec.name,
    ...(options.maxPayload === undefined ? {} : { maxPayload: options.maxPayload }),
    extraConfig: {
      http: `127.0.0.1:${spec.monitorPort}`,
      cluster: { name: clusterName, listen: `127.0.0.1:${spec.clusterPort}`, routes },
      ...(extraJetStream === undefined ? {} : { jetstream: extraJetStream }),
      ...extraTop,
    },
  });

  const servers: (EmbeddedNatsServer | undefined)[] = specs.map(() => undefined);
  const removeAll = async () => {
    await Promise.all(servers.map((s) => s?.stop()));
    await Promise.all(specs.map((s) => rm(s.storeDir, { recursive: true, force: true })));
  };
  try {
    const started = await Promise.allSettled(specs.map((spec) => EmbeddedNatsServer.start(optionsOf(spec))));
    started.forEach((r, i) => (servers[i] = r.status === "fulfilled" ? r.value : undefined));
    const failed = started.find((r) => r.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
  } catch (error) {
    await removeAll();
    throw error;
  }

  let removed = false;
  const nodes: NatsClusterNode[] = specs.map((spec, i) => {
    const monitorUrl = `http://127.0.0.1:${spec.monitorPort}`;
    const current = () => servers[i]!;
    return {
      name: spec.name,
      url: `nats://127.0.0.1:${spec.port}`,
      port: spec.port,
      clusterPort: spec.clusterPort,
      monitorUrl,
      storeDir: spec.storeDir,
      get pid() {
        return current().pid;
      },
      get running() {
        return !current().exited;
      },
      get server() {
        return current();
      },
      async stop() {
        await current().stop();
      },
      async kill(signal: NodeJS.Signals = "SIGKILL") {
        current().kill(signal);
        if (terminating.has(signal)) {
          if (signal !== "SIGKILL") current().kill("SIGCONT");
          await current().whenExited();
        }
      },
      async restart() {
        if (removed) throw new Error("the test cluster was removed");
        if (!current().exited) await current().stop();
        servers[i] = await EmbeddedNatsServer.start(current().restartOptions());
      },
      jsz: () => readJsz(monitorUrl),
    };
  });

  const handle: NatsClusterHandle = {
    nodes,
    urls: nodes.map((n) => n.url),
    node(name) {
      const found = nodes.find((n) => n.name === name);
      if (found === undefined) throw new Error(`no node ${name} in this cluster`);
      return found;
    },
    async waitReady(timeoutMs = options.readyTimeoutMs ?? 60_000) {
      const running = nodes.filter((n) => n.running);
      await waitFor(
        async () => {
          for (const node of running) {
            const jsz = await node.jsz();
            if (jsz.metaLeader === undefined || jsz.metaClusterSize < size) return false;
            // The JetStream API answers through this node (the meta leader is reachable from it).
            if (!(await accountInfoThrough(node.url))) return false;
          }
          return true;
        },
        { timeoutMs, intervalMs: 200, what: "the JetStream cluster to elect a meta leader" },
      );
    },
    async remove() {
      if (removed) return;
      removed = true;
      clusters.delete(handle);
      await removeAll();
    },
  };
  clusters.add(handle);
  try {
    await handle.waitReady();
  } catch (error) {
    await handle.remove();
    throw error;
  }
  return handle;
}

/** Removes every cluster started by this worker that is still around (for afterAll). */
export async function removeAllNatsClusters(): Promise<void> {
  await Promise.all([...clusters].map((c) => c.remove()));
}

const terminating = new Set<NodeJS.Signals>(["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"]);

/** Whether `$JS.API.INFO` answers through the node at `url` (JetStream usable there). */
async function accountInfoThrough(url: string): Promise<boolean> {
  let nc;
  try {
    nc = await connect({ servers: url, reconnect: false, timeout: 2_000, noRandomize: true, ignoreClusterUpdates: true });
  } catch {
    return false;
  }
  try {
    const jsm = await jetstreamManager(nc, { timeout: 2_000, checkAPI: false });
    await jsm.getAccountInfo();
    return true;
  } catch {
    return false;
  } finally {
    await nc.close().catch(() => undefined);
  }
}

async function readJsz(monitorUrl: string): Promise<NodeJsz> {
  const response = await fetch(`${monitorUrl}/jsz?accounts=true&streams=true`, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`jsz answered ${response.status}`);
  const body = (await response.json()) as {
    meta_cluster?: { leader?: string; cluster_size?: number };
    account_details?: {
      stream_detail?: { name: string; state: { messages: number; first_seq: number; last_seq: number }; cluster?: { leader?: string } }[];
    }[];
  };
  const streams = new Map<string, { messages: number; firstSeq: number; lastSeq: number; leader: string | undefined }>();
  for (const account of body.account_details ?? []) {
    for (const stream of account.stream_detail ?? []) {
      streams.set(stream.name, {
        messages: stream.state.messages,
        firstSeq: stream.state.first_seq,
        lastSeq: stream.state.last_seq,
        leader: stream.cluster?.leader || undefined,
      });
    }
  }
  const leader = body.meta_cluster?.leader;
  return {
    metaLeader: leader === undefined || leader === "" ? undefined : leader,
    metaClusterSize: body.meta_cluster?.cluster_size ?? 0,
    streams,
  };
}
