/**
 * The harness of the hub migration crash tests (hub-migration-crash*.test.ts):
 * a hive whose hub runs in Laneway with AGENTIHOOKS_BUS_SCOPED=1, the legacy
 * (unscoped) bus beside it, and the three steps every case takes — kill
 * `laneway serve` at a migration pause point, start Laneway again on the
 * same data directory, read a migration mark.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { expect } from "vitest";
import { HiveHubService, type MigrateRequestSchema } from "../../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { GLOBAL_STREAMS, openBus, type Bus } from "../../../src/swarm-bus/index.js";
import { readMark } from "../../../src/swarm-bus/internal.js";
import { startHubHive, type HubHive } from "./hub-fixture.js";

export interface CrashHarness {
  readonly hive: HubHive;
  /** The legacy (unscoped) processes; their queue consumers hold a delivered item for 2 s. */
  readonly legacy: Bus;
  /** Starts Laneway with the pause point, runs the migration until it pauses there, and kills Laneway. Returns the pause. */
  killDuring(migration: MessageInitShape<typeof MigrateRequestSchema>["migration"], pauseAt: string): Promise<{ point: string; id: string }>;
  /** Laneway started again on the same data directory; runs `body` with its hub client. */
  afterRestart<T>(body: (hub: Client<typeof HiveHubService>) => Promise<T>): Promise<T>;
  /** The status of the migration mark on `subject` of `stream`. */
  markOf(stream: string, subject: string): Promise<string | undefined>;
  stop(): Promise<void>;
}

export async function startCrashHarness(): Promise<CrashHarness> {
  const hive = await startHubHive();
  // Legacy names stay selected while present: the hubs use this underscore-named dead-letter stream.
  await (await hive.admin()).jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
  const legacy = await openBus({ backend: "nats", url: hive.nats.url, credentials: hive.trust.credsPaths.hub, scoped: false, bind: false, queuePolicy: { ackWaitMs: 2_000 } });
  return {
    hive,
    legacy,
    async killDuring(migration, pauseAt) {
      const child = await hive.startChild({ AGENTIHOOKS_BUS_SCOPED: "1", LANEWAY_PAUSE_AT: pauseAt });
      const call = (async () => {
        for await (const _ of child.hub().migrate({ migration }));
      })();
      call.catch(() => undefined);
      const paused = await child.paused();
      await child.kill("SIGKILL");
      await expect(call).rejects.toThrow();
      return paused;
    },
    async afterRestart(body) {
      const laneway = await hive.startInProcess({ AGENTIHOOKS_BUS_SCOPED: "1" });
      try {
        return await body(laneway.clients.client(HiveHubService, { token: hive.tokens.admin }));
      } finally {
        await laneway.stop();
      }
    },
    async markOf(stream, subject) {
      return (await readMark((await hive.admin()).jsm, stream, subject))?.mark.status;
    },
    async stop() {
      await legacy.close();
      await hive.stop();
    },
  };
}
