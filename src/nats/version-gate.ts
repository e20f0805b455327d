/**
 * The broker versions Laneway will run a replicated namespace on.
 *
 * Before nats-server 2.9.21 a replicated stream checks a write's expected
 * revision before the Raft proposal rather than in the commit (nats-server
 * #4320): two Laneway processes can both win one compare-and-set, so work
 * groups lease a delivery twice and publish reservations fence nothing.
 * On 2.9.10, partitions also left the replicas of a stream with different
 * contents for good (acknowledged records lost and duplicated; measured in
 * docs/operations.md, "Partitions on nats-server 2.9.10"), and the release
 * notes of 2.9.x after it and of 2.10 carry fixes for replicas that
 * discard and skip messages. So `--replicas` above 1 on a server older
 * than {@link SAFE_REPLICATED_VERSION} is refused at startup unless the
 * operator passes `--allow-unsafe-broker`, and then warned about at every
 * start. A single server (`--replicas 1`, the embedded default) is not
 * affected by either defect.
 */

/** The first nats-server release whose replicated compare-and-set is part of the commit. */
export const SAFE_REPLICATED_VERSION = "2.9.21";

/** The flag that lets an operator run replicated lanes on a server with known defects. */
export const ALLOW_UNSAFE_BROKER_FLAG = "--allow-unsafe-broker";

/** A parsed `major.minor.patch` (a pre-release suffix is ignored: 2.10.0-beta.1 counts as 2.10.0). */
export interface ServerVersion {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
}

/** Parses nats-server's version string (`2.9.10`, `v2.10.4`, `2.11.0-RC.1`); undefined when it is not one. */
export function parseServerVersion(text: string | undefined): ServerVersion | undefined {
  const match = /^v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+].*)?$/.exec(text?.trim() ?? "");
  if (match === null) return undefined;
  return { major: Number(match[1]), minor: Number(match[2]), patch: Number(match[3]) };
}

function compare(a: ServerVersion, b: ServerVersion): number {
  return a.major - b.major || a.minor - b.minor || a.patch - b.patch;
}

/**
 * Whether a replicated namespace is known to be unsafe on this server
 * version. An unreadable version counts as unsafe: nothing says the fix
 * is there.
 */
export function isUnsafeForReplicas(version: string | undefined): boolean {
  const parsed = parseServerVersion(version);
  if (parsed === undefined) return true;
  return compare(parsed, parseServerVersion(SAFE_REPLICATED_VERSION)!) < 0;
}

/** The one line startup prints when it refuses (exit code 2). */
export function unsafeBrokerMessage(version: string | undefined, replicas: number): string {
  const shown = parseServerVersion(version) === undefined ? "an unknown version" : `nats-server ${version!.trim()}`;
  return (
    `--replicas ${replicas} refused: the broker runs ${shown}, which before ${SAFE_REPLICATED_VERSION} can lease a delivery twice ` +
    `(nats-server #4320) and can lose acknowledged records after a partition; run nats-server ${SAFE_REPLICATED_VERSION} or later ` +
    `(2.10.x preferred), or pass ${ALLOW_UNSAFE_BROKER_FLAG} to start anyway`
  );
}

/** Refused at startup: a replicated namespace on a server with known defects and no override. */
export class UnsafeBrokerError extends Error {
  override readonly name = "UnsafeBrokerError";

  constructor(
    readonly version: string | undefined,
    readonly replicas: number,
  ) {
    super(unsafeBrokerMessage(version, replicas));
  }
}

export interface VersionGateOptions {
  readonly replicas: number;
  /** `--allow-unsafe-broker`: start anyway, with a warning. */
  readonly allowUnsafe: boolean;
  readonly log: { warn(message: string, fields?: Record<string, unknown>): void };
}

/**
 * Applies the gate to the version of the server Laneway reached. Throws
 * {@link UnsafeBrokerError} when it refuses; logs the warning when the
 * operator allowed it; does nothing for one replica or a safe version.
 */
export function checkBrokerVersion(version: string | undefined, options: VersionGateOptions): void {
  if (options.replicas <= 1 || !isUnsafeForReplicas(version)) return;
  if (!options.allowUnsafe) throw new UnsafeBrokerError(version, options.replicas);
  options.log.warn(
    `${ALLOW_UNSAFE_BROKER_FLAG}: replicated lanes run on a nats-server with known defects; two Laneway processes can lease a delivery twice and a partition can lose or duplicate acknowledged records`,
    { natsServerVersion: parseServerVersion(version) === undefined ? "unknown" : version!.trim(), replicas: options.replicas, safeFrom: SAFE_REPLICATED_VERSION },
  );
}

/** How long startup waits for a first connection to read the server's version. */
export const VERSION_GATE_WAIT_MS = 15_000;

/**
 * Waits (up to `waitMs`) for `broker`'s first connection and applies the
 * gate to its server. A broker still unreachable after the wait is left to
 * the cores, which report it themselves.
 */
export async function enforceBrokerVersion(
  broker: { readonly state: string; readonly serverVersion: string | undefined; onStateChange(listener: (change: { state: string }) => void): () => void },
  options: VersionGateOptions & { waitMs?: number },
): Promise<void> {
  if (options.replicas <= 1) return;
  if (broker.state !== "connected") {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, options.waitMs ?? VERSION_GATE_WAIT_MS);
      const stop = broker.onStateChange((change) => {
        if (change.state === "connected" || change.state === "closed") done();
      });
      function done() {
        clearTimeout(timer);
        stop();
        resolve();
      }
      if (broker.state === "connected") done();
    });
  }
  if (broker.state !== "connected") return;
  checkBrokerVersion(broker.serverVersion, options);
}
