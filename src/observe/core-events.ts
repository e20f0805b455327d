/**
 * What the cores tell the process's metrics, without knowing of metrics.
 *
 * The cores are libraries that know nothing of HTTP or Prometheus. Where a
 * figure exists only inside a core (a Kmap command committed, the state of
 * a work group this process holds in memory), the core calls one of these
 * small hooks or registers a reader; `src/server/services/observe` turns them into
 * metrics. Every hook is a no-op until a server installs a sink, so a core
 * used as a library pays a function call and nothing else.
 *
 * The values passed are bounded by construction: counts, durations, lane
 * and group identifiers from the configuration, reason codes. Never a
 * token, receipt, payload or free text.
 */

/** One work group's state as this process last saw it (no broker request). */
export interface GroupObservation {
  readonly lane: string;
  readonly group: string;
  /** Deliveries leased and not expired. */
  readonly leases: number;
  /** Deliveries waiting for their retry (nacked, or leases that expired). */
  readonly retriesWaiting: number;
  /** The group's cursor: the last sequence it examined for fresh work. */
  readonly cursor: number;
  /** Unfinished deliveries (leased, expired or waiting for a retry). */
  readonly unfinished: number;
  /** When the stream stored the oldest unfinished delivery this process read (epoch ms), if known. */
  readonly oldestUnfinishedStoredAt: number | undefined;
}

/** The Kmap command lane's backlog as its writer last reported it. */
export interface KmapObservation {
  readonly pending: number;
  readonly maxPending: number;
}

/** Readers the cores register; read at scrape time from memory only. */
export interface CoreReaders {
  groups?: () => readonly GroupObservation[];
  /** The last sequence of each lane, read at most once per call (the collector bounds how often). */
  laneLastSequences?: () => Promise<ReadonlyMap<string, number>>;
  kmap?: () => KmapObservation;
}

/** The sink a server installs. */
export interface CoreEventSink {
  /** Commands committed in one lane transaction, each with its time from submission to commit (ms). */
  kmapCommitted(latenciesMs: readonly number[]): void;
  /** A command that failed for good, with its error code. */
  kmapFailed(code: string, latencyMs: number): void;
}

const noSink: CoreEventSink = { kmapCommitted: () => {}, kmapFailed: () => {} };

let sink: CoreEventSink = noSink;
const readers: CoreReaders = {};

/** The hooks the cores call. */
export const coreEvents: CoreEventSink = {
  kmapCommitted: (latencies) => sink.kmapCommitted(latencies),
  kmapFailed: (code, latency) => sink.kmapFailed(code, latency),
};

/** Installs the process's sink (one per process: metrics are per process); returns the uninstaller. */
export function installCoreEventSink(next: CoreEventSink): () => void {
  sink = next;
  return () => {
    if (sink === next) sink = noSink;
  };
}

/** Registers a core's reader; returns the function that removes it. */
export function registerCoreReader<K extends keyof CoreReaders>(name: K, reader: NonNullable<CoreReaders[K]>): () => void {
  readers[name] = reader;
  return () => {
    if (readers[name] === reader) delete readers[name];
  };
}

/** The readers registered now. */
export function coreReaders(): Readonly<CoreReaders> {
  return readers;
}
