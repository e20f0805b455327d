/**
 * What the cores tell the process's metrics, without knowing of metrics.
 *
 * The cores are libraries that know nothing of HTTP or Prometheus. Where a
 * figure exists only inside a core (a command committed, the state of a
 * work group this process holds in memory), the core emits on a named
 * channel or its binding registers a named reader; the binding's metrics
 * (src/server/cores) read them. This module knows no core: each core names
 * its channels and readers and defines what they carry. Every channel is a
 * no-op until a server installs a sink, so a core used as a library pays a
 * function call and nothing else.
 *
 * The values passed are bounded by construction: counts, durations,
 * identifiers from the configuration, reason codes. Never a token, a
 * receipt, a payload or free text.
 */

/** A named channel from a core to the process's metrics. */
export interface CoreChannel<T> {
  /** Tells the installed sink, if any. */
  emit(value: T): void;
  /** Installs the process's sink (one per process: metrics are per process); returns the uninstaller. */
  install(sink: (value: T) => void): () => void;
}

const channels = new Map<string, CoreChannel<never>>();
const readers = new Map<string, () => unknown>();

/** The channel called `name` (`<core>.<what>`): the core and its binding, asking by the same name, get the same channel. */
export function coreChannel<T>(name: string): CoreChannel<T> {
  const known = channels.get(name);
  if (known !== undefined) return known as unknown as CoreChannel<T>;
  let sink: ((value: T) => void) | undefined;
  const channel: CoreChannel<T> = {
    emit: (value) => sink?.(value),
    install(next) {
      sink = next;
      return () => {
        if (sink === next) sink = undefined;
      };
    },
  };
  channels.set(name, channel as unknown as CoreChannel<never>);
  return channel;
}

/** Registers the reader called `name` (`<core>.<what>`), read at scrape time from memory; returns the function that removes it. */
export function registerCoreReader<T>(name: string, reader: () => T): () => void {
  readers.set(name, reader);
  return () => {
    if (readers.get(name) === reader) readers.delete(name);
  };
}

/** The reader registered under `name` now, if any. */
export function coreReader<T>(name: string): (() => T) | undefined {
  return readers.get(name) as (() => T) | undefined;
}
