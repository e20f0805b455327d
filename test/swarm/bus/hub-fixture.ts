/**
 * A hive whose hub runs in Laneway: the bus fixture's hive (operator-mode
 * nats-server of the test's own, the hub's service credential, members
 * with minted credentials), plus Laneway on its data directory — in the
 * test's process, or as a child process that a test can SIGKILL at a
 * migration pause point and start again.
 */
import type { Client } from "@connectrpc/connect";
import { HiveHubService } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { ClientPool, collectLines, generateTokens, spawnLaneway, startLanewayInProcess, type InProcessLaneway, type TestTokens } from "../../helpers/laneway.js";
import { pausedAt, processState } from "../../helpers/pause-points.js";
import { waitFor } from "../../helpers/wait-for.js";
import { startBusHive, type BusHive } from "./bus-fixture.js";

export interface HubHive extends BusHive {
  readonly tokens: TestTokens;
  /** Laneway in the test's process on the hive's data directory (stop it before starting another). */
  startInProcess(env?: Readonly<Record<string, string>>): Promise<InProcessLaneway>;
  /** `laneway serve` as a child process; `pauseAt` sets `LANEWAY_PAUSE_AT`. */
  startChild(env?: Readonly<Record<string, string>>): Promise<ChildHub>;
}

export interface ChildHub {
  readonly pid: number;
  readonly stdout: string[];
  readonly clients: ClientPool;
  hub(): Client<typeof HiveHubService>;
  /** Resolves with the pause line's point and id once the process stopped itself there. */
  paused(): Promise<{ point: string; id: string }>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export async function startHubHive(): Promise<HubHive> {
  const hive = await startBusHive();
  const tokens = generateTokens();
  const running: { stop(): Promise<void> }[] = [];
  const baseArgs = () => ["--listen", "127.0.0.1:0", "--data-dir", hive.dataDir, "--shutdown-timeout", "5s", "--nats-url", hive.nats.url];
  return {
    ...hive,
    tokens,
    async startInProcess(env = {}) {
      const laneway = await startLanewayInProcess({ natsUrl: hive.nats.url, dataDir: hive.dataDir, lanesConfig: false, tokens, env });
      const handle = { stop: async () => void (await laneway.stop()) };
      running.push(handle);
      const stop = laneway.stop.bind(laneway);
      return Object.assign(laneway, {
        stop: async () => {
          running.splice(running.indexOf(handle), 1);
          return stop();
        },
      });
    },
    async startChild(env = {}) {
      const child = spawnLaneway(["serve", ...baseArgs()], { LANEWAY_ADMIN_TOKEN: tokens.admin, ...env });
      const stdout: string[] = [];
      const stderr: string[] = [];
      collectLines(child.stdout!, stdout);
      collectLines(child.stderr!, stderr);
      let done = false;
      const exited = new Promise<void>((resolve) =>
        child.once("exit", () => {
          done = true;
          resolve();
        }),
      );
      const kill = async (signal: NodeJS.Signals = "SIGKILL") => {
        if (!done) child.kill(signal);
        await exited;
      };
      const handle = { stop: () => kill("SIGKILL") };
      running.push(handle);
      let url: string;
      try {
        url = await waitFor(
          () => {
            if (done) throw new Error(`laneway exited before listening: ${stderr.join("\n")}`);
            const line = stdout.find((l) => l.includes(" listening on "));
            return line?.slice(line.indexOf("http://"));
          },
          { timeoutMs: 60_000, what: "laneway to listen" },
        );
      } catch (error) {
        await kill();
        throw error;
      }
      const clients = new ClientPool(() => url);
      return {
        pid: child.pid!,
        stdout,
        clients,
        hub: () => clients.client(HiveHubService, { token: tokens.admin }),
        paused: () =>
          waitFor(
            async () => {
              if (done) throw new Error(`laneway exited without pausing: ${stderr.join("\n")}`);
              const paused = pausedAt({ pid: child.pid!, stdout });
              return paused && (await processState(child.pid!)) === "T" ? paused : undefined;
            },
            { timeoutMs: 60_000, what: "the hub to pause" },
          ),
        async kill(signal = "SIGKILL") {
          clients.closeAll();
          running.splice(running.indexOf(handle), 1);
          await kill(signal);
        },
      };
    },
    async stop() {
      for (const handle of running.splice(0).reverse()) await handle.stop().catch(() => undefined);
      await hive.stop();
    },
  };
}
