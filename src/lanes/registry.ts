import { laneCapabilities, projectCapabilities, type LaneCapabilities } from "./capabilities.js";
import { LaneError } from "./errors.js";
import type { LaneBounds, LanesConfig } from "./types.js";

/**
 * The lane registry: the reviewed configuration of one namespace
 * generation, answering what a project may do. It is read-only at run time;
 * membership and administration change only through configuration.
 */

/** What one project may do on one lane. */
export interface LaneAccessView {
  readonly lane: string;
  /** The owning project; ownership alone grants nothing. */
  readonly owner: string;
  readonly publish: boolean;
  readonly subscribe: boolean;
  readonly groups: readonly string[];
  readonly recoverGroups: readonly string[];
}

export interface RegistryView {
  readonly project: string;
  readonly namespace: string;
  /** Lanes the project owns or holds a capability on, in configuration order. */
  readonly lanes: readonly LaneAccessView[];
  readonly bounds: LaneBounds;
}

export class LaneRegistry {
  private readonly owners: ReadonlyMap<string, string>;

  constructor(private readonly config: LanesConfig) {
    this.owners = new Map(config.lanes.map((lane) => [lane.id, lane.owner]));
  }

  /**
   * The project's capabilities on a lane, or lane_forbidden when it has
   * none of `needed`. A lane that is not configured is refused the same way,
   * so the answer does not reveal which lanes exist.
   */
  require(project: string, lane: string, needed: "publish" | "subscribe"): LaneCapabilities {
    const definition = this.config.lanes.find((l) => l.id === lane);
    const caps = definition ? laneCapabilities(definition, project) : undefined;
    if (caps === undefined || !caps[needed]) {
      const verb = needed === "publish" ? "publish to" : "read events of";
      throw new LaneError("lane_forbidden", `project ${project} may not ${verb} lane ${lane}`);
    }
    return caps;
  }

  get bounds(): LaneBounds {
    return this.config.bounds;
  }

  get namespace(): string {
    return this.config.namespace;
  }

  /** The project's view; it never contains a credential. */
  viewFor(project: string): RegistryView {
    return {
      project,
      namespace: this.config.namespace,
      lanes: projectCapabilities(this.config, project).map((caps) => ({
        lane: caps.lane,
        owner: this.owners.get(caps.lane) ?? "",
        publish: caps.publish,
        subscribe: caps.subscribe,
        groups: caps.groups,
        recoverGroups: caps.recoverGroups,
      })),
      bounds: this.config.bounds,
    };
  }
}
