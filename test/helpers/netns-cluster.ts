/**
 * A 3-node JetStream cluster whose nodes can be partitioned for real.
 *
 * Each node is a nats-server process in its own network namespace, joined
 * to a bridge in the root namespace by a veth pair: the nodes reach each
 * other over the bridge, and processes of the root namespace (Laneway, the
 * test) reach every node at its own address through the bridge's. Names
 * (namespaces, links, bridge) and the /24 the cluster uses derive from the
 * test process's pid and a counter, so parallel test files cannot collide.
 *
 * Faults are iptables rules inside a node's namespace, so nothing of the
 * root namespace's firewall is touched:
 * - `cutFromPeers(node)`: the node drops traffic from and to the other
 *   nodes; the root namespace (Laneway) still reaches it.
 * - `isolate(node)`: the node drops everything on its link.
 * - `heal(node)` / `healAll()`: the rules go.
 *
 * Cleanup is registered before anything is created: `remove()` (and, if
 * the process exits without it, a synchronous exit hook) stops every
 * process, deletes every namespace, link and bridge and every store.
 * `netnsUnavailable()` says why namespaces cannot be used here (not root,
 * no `ip`/`iptables`, `ip netns add` refused), for the one allowed skip.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

import { waitFor } from "./wait-for.js";

const run = promisify(execFile);

/** The nats-server binary (`command -v nats-server`, else Debian's path). */
export function natsServerBinary(): string {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir && existsSync(join(dir, "nats-server"))) return join(dir, "nats-server");
  }
  return "/usr/sbin/nats-server";
}

let probed: string | undefined | null = null;

/** Why network namespaces cannot be used here, or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (probed !== null) return probed;
  const name = `lw${process.pid}probe`;
  try {
    if (process.getuid?.() !== 0) return (probed = "network namespaces need root");
    for (const tool of ["ip", "iptables"]) {
      try {
        execFileSync("sh", ["-c", `command -v ${tool}`], { stdio: "ignore" });
      } catch {
        return (probed = `${tool} is not installed (apt-get install -y iproute2 iptables)`);
      }
    }
    if (!existsSync(natsServerBinary())) return (probed = "nats-server is not installed");
    execFileSync("ip", ["netns", "add", name], { stdio: "ignore" });
    execFileSync("ip", ["netns", "exec", name, "iptables", "-S"], { stdio: "ignore" });
    probed = undefined;
  } catch {
    probed = "`ip netns add` or iptables inside a namespace is not permitted here";
  } finally {
    try {
      execFileSync("ip", ["netns", "del", name], { stdio: "ignore" });
    } catch {
      // Not created.
    }
  }
  return probed;
}

export interface NetnsNode {
  readonly name: string;
  /** The node's network namespace. */
  readonly netns: string;
  /** Its address on the bridge. */
  readonly ip: string;
  /** `nats://<ip>:4222`. */
  readonly url: string;
  /** `http://<ip>:8222`. */
  readonly monitorUrl: string;
  readonly running: boolean;
  /** SIGKILLs the server (waits until it is gone). */
  kill(): Promise<void>;
  /** Starts it again on the same store. */
  start(): Promise<void>;
}

export interface NetnsCluster {
  readonly nodes: readonly NetnsNode[];
  readonly urls: readonly string[];
  node(name: string): NetnsNode;
  /** Drops the node's traffic with the other nodes; the root namespace still reaches it. */
  cutFromPeers(node: NetnsNode): Promise<void>;
  /** Drops all of the node's traffic. */
  isolate(node: NetnsNode): Promise<void>;
  heal(node: NetnsNode): Promise<void>;
  healAll(): Promise<void>;
  /** The node a client connection with this name is on (from each node's connz), if any. */
  nodeOfConnection(connectionName: string): Promise<NetnsNode | undefined>;
  /** The node that leads a stream, as the nodes that can see one say. */
  streamLeader(stream: string): Promise<string | undefined>;
  /** Waits until a meta leader is elected and every node sees all peers. */
  waitReady(timeoutMs?: number): Promise<void>;
  /** Stops every node, deletes namespaces, links, bridge and stores. Idempotent. */
  remove(): Promise<void>;
}

let clusterCounter = 0;
const live = new Set<() => void>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const cleanup of live) cleanup();
  });
}

async function sh(args: string[]): Promise<void> {
  await run(args[0]!, args.slice(1));
}

/** Starts three nodes in namespaces and waits until the cluster has formed. */
export async function startNetnsCluster(options: { readyTimeoutMs?: number } = {}): Promise<NetnsCluster> {
  const index = clusterCounter++;
  const pid = process.pid;
  const tag = `${pid}${String.fromCharCode(97 + (index % 26))}`;
  // 10.<hi>.<lo>.0/24 from the pid and counter: 172.x would clash with Docker's.
  const slot = (pid * 7 + index) % 65_000;
  const prefix = `10.${100 + (slot >> 8) % 150}.${slot & 255}`;
  const bridge = `lwb${tag}`.slice(0, 15);
  const bridgeIp = `${prefix}.1`;
  const root = await mkdtemp(join(tmpdir(), "laneway-netns-"));
  const size = 3;
  const names = Array.from({ length: size }, (_, i) => `n${i + 1}`);
  const nsOf = (i: number) => `lw${tag}${i + 1}`;
  const vethHost = (i: number) => `lwh${tag}${i + 1}`.slice(0, 15);
  const ipOf = (i: number) => `${prefix}.${i + 2}`;
  const processes = new Map<number, ChildProcess>();

  // Cleanup first: everything below is undone by it, in any state.
  const cleanupSync = () => {
    for (const child of processes.values()) child.kill("SIGKILL");
    for (let i = 0; i < size; i++) {
      try {
        execFileSync("ip", ["netns", "del", nsOf(i)], { stdio: "ignore" });
      } catch {
        // Not created, or gone.
      }
      try {
        execFileSync("ip", ["link", "del", vethHost(i)], { stdio: "ignore" });
      } catch {
        // Went with its namespace.
      }
    }
    try {
      execFileSync("ip", ["link", "del", bridge], { stdio: "ignore" });
    } catch {
      // Not created.
    }
  };
  installExitHook();
  live.add(cleanupSync);
  let removed = false;
  const remove = async () => {
    if (removed) return;
    removed = true;
    const exits = [...processes.values()].map((child) => new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", () => r()))));
    for (const child of processes.values()) child.kill("SIGKILL");
    await Promise.all(exits);
    cleanupSync();
    live.delete(cleanupSync);
    await rm(root, { recursive: true, force: true });
  };

  const start = async (i: number) => {
    const config = {
      server_name: names[i],
      listen: `${ipOf(i)}:4222`,
      http: `${ipOf(i)}:8222`,
      jetstream: { store_dir: join(root, names[i]!) },
      cluster: {
        name: "laneway-netns",
        listen: `${ipOf(i)}:6222`,
        routes: names.map((_, j) => j).filter((j) => j !== i).map((j) => `nats-route://${ipOf(j)}:6222`),
      },
    };
    const file = join(root, `${names[i]}.conf`);
    await writeFile(file, JSON.stringify(config));
    const child = spawn("ip", ["netns", "exec", nsOf(i), natsServerBinary(), "-c", file, "-l", join(root, `${names[i]}.log`)], { stdio: "ignore" });
    processes.set(i, child);
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`nats-server ${names[i]} exited with ${child.exitCode}`);
        return fetch(`http://${ipOf(i)}:8222/healthz`, { signal: AbortSignal.timeout(1_000) }).then((r) => r.status > 0, () => false);
      },
      { timeoutMs: 30_000, intervalMs: 100, what: `nats-server ${names[i]} to listen` },
    );
  };

  const nodes: NetnsNode[] = names.map((name, i) => ({
    name,
    netns: nsOf(i),
    ip: ipOf(i),
    url: `nats://${ipOf(i)}:4222`,
    monitorUrl: `http://${ipOf(i)}:8222`,
    get running() {
      const child = processes.get(i);
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    async kill() {
      const child = processes.get(i);
      if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once("exit", () => r()));
      child.kill("SIGKILL");
      await exited;
    },
    async start() {
      await start(i);
    },
  }));
  const indexOf = (node: NetnsNode) => nodes.indexOf(node);
  const inNs = (node: NetnsNode, args: string[]) => sh(["ip", "netns", "exec", node.netns, ...args]);

  const cluster: NetnsCluster = {
    nodes,
    urls: nodes.map((n) => n.url),
    node: (name) => nodes.find((n) => n.name === name)!,
    async cutFromPeers(node) {
      for (const peer of nodes) {
        if (peer === node) continue;
        await inNs(node, ["iptables", "-A", "INPUT", "-s", peer.ip, "-j", "DROP"]);
        await inNs(node, ["iptables", "-A", "OUTPUT", "-d", peer.ip, "-j", "DROP"]);
      }
    },
    async isolate(node) {
      await inNs(node, ["iptables", "-A", "INPUT", "-i", "eth0", "-j", "DROP"]);
      await inNs(node, ["iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "DROP"]);
    },
    async heal(node) {
      await inNs(node, ["iptables", "-F"]);
    },
    async healAll() {
      for (const node of nodes) await inNs(node, ["iptables", "-F"]);
    },
    async nodeOfConnection(connectionName) {
      for (const node of nodes) {
        const body = (await fetch(`${node.monitorUrl}/connz`, { signal: AbortSignal.timeout(2_000) })
          .then((r) => r.json())
          .catch(() => ({}))) as { connections?: { name?: string }[] };
        if (body.connections?.some((c) => c.name === connectionName)) return node;
      }
      return undefined;
    },
    async streamLeader(stream) {
      for (const node of nodes) {
        const body = (await fetch(`${node.monitorUrl}/jsz?accounts=true&streams=true`, { signal: AbortSignal.timeout(2_000) })
          .then((r) => r.json())
          .catch(() => ({}))) as { account_details?: { stream_detail?: { name: string; cluster?: { leader?: string } }[] }[] };
        for (const account of body.account_details ?? []) {
          const leader = account.stream_detail?.find((s) => s.name === stream)?.cluster?.leader;
          if (leader) return leader;
        }
      }
      return undefined;
    },
    async waitReady(timeoutMs = options.readyTimeoutMs ?? 60_000) {
      await waitFor(
        async () => {
          for (const node of nodes) {
            const body = (await fetch(`${node.monitorUrl}/jsz`, { signal: AbortSignal.timeout(2_000) })
              .then((r) => r.json())
              .catch(() => ({}))) as { meta_cluster?: { leader?: string; cluster_size?: number } };
            if (!body.meta_cluster?.leader || (body.meta_cluster.cluster_size ?? 0) < size) return false;
          }
          return true;
        },
        { timeoutMs, intervalMs: 200, what: "the namespaced JetStream cluster to elect a meta leader" },
      );
    },
    remove,
  };

  try {
    await sh(["ip", "link", "add", bridge, "type", "bridge"]);
    await sh(["ip", "addr", "add", `${bridgeIp}/24`, "dev", bridge]);
    await sh(["ip", "link", "set", bridge, "up"]);
    for (let i = 0; i < size; i++) {
      await sh(["ip", "netns", "add", nsOf(i)]);
      await sh(["ip", "link", "add", vethHost(i), "type", "veth", "peer", "name", "eth0", "netns", nsOf(i)]);
      await sh(["ip", "link", "set", vethHost(i), "master", bridge]);
      await sh(["ip", "link", "set", vethHost(i), "up"]);
      await sh(["ip", "netns", "exec", nsOf(i), "ip", "addr", "add", `${ipOf(i)}/24`, "dev", "eth0"]);
      await sh(["ip", "netns", "exec", nsOf(i), "ip", "link", "set", "eth0", "up"]);
      await sh(["ip", "netns", "exec", nsOf(i), "ip", "link", "set", "lo", "up"]);
    }
    for (let i = 0; i < size; i++) await start(i);
    await cluster.waitReady();
  } catch (error) {
    await remove();
    throw error;
  }
  return cluster;
}
