/**
 * What a project may do on each lane.
 *
 * Every capability is granted explicitly by its own list: publishers may
 * publish, subscribers may replay events, group members may claim work in
 * that group (membership does not grant event subscription), and
 * recoverers may run explicit gap recovery on that group. Ownership alone
 * grants nothing; it is reported so the registry can show it.
 */
import type { LaneDefinition, LanesConfig } from "./types.js";

export interface LaneCapabilities {
  readonly lane: string;
  /** Informational: the project is the lane's owner. Grants no capability by itself. */
  readonly owner: boolean;
  readonly publish: boolean;
  readonly subscribe: boolean;
  /** Groups the project is a member of (may claim, ack, nack, renew), in configuration order. */
  readonly groups: readonly string[];
  /** Groups the project may recover, in configuration order. */
  readonly recoverGroups: readonly string[];
}

/** The project's capabilities on one lane (all false/empty for a stranger). */
export function laneCapabilities(lane: LaneDefinition, project: string): LaneCapabilities {
  const groups: string[] = [];
  for (const [group, members] of lane.groups) if (members.includes(project)) groups.push(group);
  const recoverGroups: string[] = [];
  for (const [group, recoverers] of lane.recoverers) if (recoverers.includes(project)) recoverGroups.push(group);
  return Object.freeze({
    lane: lane.id,
    owner: lane.owner === project,
    publish: lane.publishers.includes(project),
    subscribe: lane.subscribers.includes(project),
    groups: Object.freeze(groups),
    recoverGroups: Object.freeze(recoverGroups),
  });
}

/**
 * The project's capabilities on every lane where it has any role
 * (including owner-only lanes, reported with no capability), in
 * configuration order. Lanes the project has no part in are left out, so
 * the registry answer does not enumerate other projects' lanes.
 */
export function projectCapabilities(config: Pick<LanesConfig, "lanes">, project: string): readonly LaneCapabilities[] {
  const result: LaneCapabilities[] = [];
  for (const lane of config.lanes) {
    const caps = laneCapabilities(lane, project);
    if (caps.owner || caps.publish || caps.subscribe || caps.groups.length > 0 || caps.recoverGroups.length > 0) {
      result.push(caps);
    }
  }
  return Object.freeze(result);
}
