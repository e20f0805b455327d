import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger, type Logger } from "../log/logger.js";
import type { Clock } from "./clock.js";
import type { CommandQueue } from "./command-queue.js";
import { DEFAULT_EVENT_RETENTION, type LaneRuntime } from "./command-runtime.js";
import { DEFAULT_LANE_BUSY_TIMEOUT_MS } from "./command-store.js";
import { EmbeddedKwebManager, KwebReader } from "./kweb/index.js";
import { DEFAULT_MAX_PENDING } from "./open-command-queue.js";
import { WorkerLane } from "./worker-lane.js";
import type { ApplyFaults } from "./worker-seams.js";
import type { PausePoints } from "../fault-injection/pause-points.js";

/**
 * The Kmap core as the server runs it: the embedded Kweb manager (a worker
 * thread writing `kweb.sqlite`, signing with `signing-key.pem`), a reader
 * for the Kmap and its history, and the command queue (`commands.sqlite`),
 * all in one directory.
 *
 * The command lane runs in the Kweb worker thread (WorkerLane): its
 * runtime, its SQLite writes and its Kweb applies never touch the caller's
 * event loop. The seams for tests (`clock`, `applyFaults`) keep that
 * topology: the runtime in the worker, with its own in-thread manager and
 * group apply, takes its time from the given clock and asks the given
 * faults before each apply and after each commit, both answered on the
 * caller's thread (worker-seams.ts), so tests that use them run the
 * production path. (A library user with their own KwebManager runs the
 * runtime on their thread with openCommandQueue.)
 */
export interface KmapCoreOptions {
  /** The directory of the Kmap's files; created with mode 0700. */
  readonly directory: string;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
  /** The runtime's clock (tests): the runtime in the worker asks it for the time and sleeps on it. */
  readonly clock?: Clock;
  /** Faults at the boundary between the lane and the Kweb writer (tests inject writer outages and manager failures here; see ApplyFaults). */
  readonly applyFaults?: ApplyFaults;
  /** The most unfinished commands (`--kmap-max-pending`); default 10,000. */
  readonly maxPending?: number;
  /** How many change-log entries to keep; default 1,000,000. */
  readonly eventRetention?: number;
}

export interface KmapCore {
  readonly queue: CommandQueue;
  /** Supervise `runtime.run()`. */
  readonly runtime: LaneRuntime;
  readonly reader: KwebReader;
  /** Stops the runtime after the command in progress, then closes the reader, the lane's database and the manager; the same promise on every call. */
  close(): Promise<void>;
}

export async function openKmapCore(options: KmapCoreOptions): Promise<KmapCore> {
  const log = options.logger ?? silentLogger;
  await mkdir(options.directory, { recursive: true, mode: 0o700 });
  const kwebPath = join(options.directory, "kweb.sqlite");
  const commandsPath = join(options.directory, "commands.sqlite");
  const manager = new EmbeddedKwebManager({ databasePath: kwebPath, signingKeyPath: join(options.directory, "signing-key.pem") });
  try {
    await manager.ready();
  } catch (error) {
    await manager.close().catch(() => {});
    throw error;
  }
  // The writer created the file and its schema; the reader may open it now.
  // Reads on the caller's thread never wait for a lock (KmapBusyError instead).
  let reader: KwebReader;
  try {
    reader = KwebReader.open(kwebPath, { busyTimeoutMs: 0 });
  } catch (error) {
    await manager.close().catch(() => {});
    throw error;
  }
  const maxPending = options.maxPending ?? DEFAULT_MAX_PENDING;
  const eventRetention = options.eventRetention ?? DEFAULT_EVENT_RETENTION;

  let queue: CommandQueue;
  let runtime: LaneRuntime;
  let recovered: number;
  let closeLane: () => Promise<void>;
  try {
    const lane = await WorkerLane.open(manager, {
      commandsPath,
      maxPending,
      eventRetention,
      busyTimeoutMs: DEFAULT_LANE_BUSY_TIMEOUT_MS,
      logger: log,
      ...(options.pausePoints ? { pausePoints: options.pausePoints } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(options.applyFaults ? { applyFaults: options.applyFaults } : {}),
    });
    ({ queue } = lane);
    runtime = lane;
    recovered = lane.recovered.length;
    closeLane = () => lane.close();
  } catch (error) {
    reader.close();
    await manager.close().catch(() => {});
    throw error;
  }
  if (recovered > 0) {
    log.info("recovered commands a previous process left applying", { count: recovered });
  }
  let closing: Promise<void> | undefined;
  return {
    queue,
    runtime,
    reader,
    close() {
      closing ??= (async () => {
        await runtime.stop();
        // The read-only reader cannot checkpoint; closing it before the
        // writer lets the writer's close fold the WAL back into the file.
        reader.close();
        await closeLane();
        await manager.close();
      })();
      return closing;
    },
  };
}
