/**
 * The migration marks on the hub's server, as the hive's snapshots report
 * them (src/client/hive-lanes): which scoped resource is being, or was,
 * imported from a legacy stream.
 */
import type { BrokerConnection } from "../nats/index.js";
import { swarmOfStream, type SwarmLane } from "../swarm-bus/index.js";
import { deadMarkSubject, isSwarmName, queueMarkSubject, readMark, stateMarkSubject, SWARM_LANES } from "../swarm-bus/internal.js";

/**
 * One migration mark as a snapshot reports it: which swarm resource is
 * being (or was) imported from a legacy stream, and whether the copy has
 * completed.
 */
export interface MigrationMarkSummary {
  readonly swarm: string;
  /** `queue`, `state` or `dead`. */
  readonly kind: string;
  /** The lane (queue), bucket (state) or `dead`. */
  readonly resource: string;
  readonly status: "pending" | "complete";
}


/** Reads the migration marks a snapshot reports. */
export type MigrationMarksReader = () => Promise<readonly MigrationMarkSummary[]>;

/**
 * The migration marks on the hub's server: for every scoped queue, state
 * and dead-letter stream (`AGENTIHOOKS-<hex>-…`), the latest mark of its
 * import (src/swarm-bus/migration-mark.ts), read with the hub's own connection. A
 * stream without a mark was never migrated into and is not reported; a
 * mark that cannot be parsed reads as pending. Only reads: stream listings
 * and one message get per stream.
 */
export function hubMigrationMarks(broker: BrokerConnection): MigrationMarksReader {
  return async () => {
    const jsm = broker.jetstreamManager();
    const marks: MigrationMarkSummary[] = [];
    for await (const info of jsm.streams.list()) {
      const name = info.config.name;
      if (!name.startsWith("AGENTIHOOKS-")) continue; // legacy names hold no marks
      const swarm = swarmOfStream(name);
      if (swarm === undefined || !isSwarmName(swarm)) continue;
      const target = markTargetOf(swarm, info.config.subjects ?? []);
      if (target === undefined) continue;
      const stored = await readMark(jsm, name, target.subject);
      if (stored !== undefined) marks.push({ swarm, kind: target.kind, resource: target.resource, status: stored.mark.status });
    }
    return marks;
  };
}

/** Which import a scoped stream's subjects say it receives, and where its mark lives; undefined for events streams. */
function markTargetOf(swarm: string, subjects: readonly string[]): { kind: "queue" | "state" | "dead"; resource: string; subject: string } | undefined {
  const prefix = `swarm.${swarm}.`;
  for (const subject of subjects) {
    if (!subject.startsWith(prefix) || !subject.endsWith(".>")) continue;
    const middle = subject.slice(prefix.length, -2).split(".");
    if (middle.length === 1 && middle[0] === "dead") return { kind: "dead", resource: "dead", subject: deadMarkSubject(swarm) };
    if (middle.length === 2 && middle[0] === "queue" && (SWARM_LANES as readonly string[]).includes(middle[1]!)) {
      return { kind: "queue", resource: middle[1]!, subject: queueMarkSubject(swarm, middle[1] as SwarmLane) };
    }
    if (middle.length === 2 && middle[0] === "state" && middle[1] !== "") return { kind: "state", resource: middle[1]!, subject: stateMarkSubject(swarm, middle[1]!) };
  }
  return undefined;
}
