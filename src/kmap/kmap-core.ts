import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger, type Logger } from "../log/logger.js";
import type { Clock } from "./clock.js";
import type { CommandQueue } from "./command-queue.js";
import type { CommandRuntime } from "./command-runtime.js";
import type { KwebManager } from "./kweb-manager.js";
import { EmbeddedKwebManager, KwebReader } from "./kweb/index.js";
import { openCommandQueue } from "./open-command-queue.js";
import type { PausePoints } from "../fault-injection/pause-points.js";

/**
 * The Kmap core as the server runs it: the embedded Kweb manager (a worker
 * thread writing `kweb.sqlite`, signing with `signing-key.pem`), a reader
 * for the Kmap and its history, and the command queue (`commands.sqlite`),
 * all in one directory.
 */
export interface KmapCoreOptions {
  /** The directory of the Kmap's files; created with mode 0700. */
  readonly directory: string;
  readonly logger?: Logger;
  readonly pausePoints?: PausePoints;
  readonly clock?: Clock;
  /** Wraps the embedded manager (tests inject writer outages at this boundary). */
  readonly wrapManager?: (manager: KwebManager) => KwebManager;
}

export interface KmapCore {
  readonly queue: CommandQueue;
  /** Supervise `runtime.run()`. */
  readonly runtime: CommandRuntime;
  readonly reader: KwebReader;
  /** Stops the runtime after the command in progress, then closes the reader, the manager and the lane database. */
  close(): Promise<void>;
}

export async function openKmapCore(options: KmapCoreOptions): Promise<KmapCore> {
  const log = options.logger ?? silentLogger;
  await mkdir(options.directory, { recursive: true, mode: 0o700 });
  const kwebPath = join(options.directory, "kweb.sqlite");
  const embedded = new EmbeddedKwebManager({ databasePath: kwebPath, signingKeyPath: join(options.directory, "signing-key.pem") });
  const manager = options.wrapManager ? options.wrapManager(embedded) : embedded;
  try {
    await manager.ready();
  } catch (error) {
    await manager.close().catch(() => {});
    throw error;
  }
  // The writer created the file and its schema; the reader may open it now.
  const reader = KwebReader.open(kwebPath);
  let opened;
  try {
    opened = openCommandQueue(join(options.directory, "commands.sqlite"), manager, {
      logger: log,
      ...(options.pausePoints ? { pausePoints: options.pausePoints } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
    });
  } catch (error) {
    reader.close();
    await manager.close().catch(() => {});
    throw error;
  }
  if (opened.recovered.length > 0) {
    log.info("recovered commands a previous process left applying", { count: opened.recovered.length });
  }
  const { queue, runtime } = opened;
  return {
    queue,
    runtime,
    reader,
    async close() {
      await runtime.stop();
      // The read-only reader cannot checkpoint; closing it before the
      // writer lets the writer's close fold the WAL back into the file.
      reader.close();
      await manager.close();
      opened.close();
    },
  };
}
