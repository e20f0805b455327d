/**
 * The hive as a lane participant (the specification's "Hive adapter"): a
 * Connect client of a lane, joined through the participant library, that
 * answers snapshot requests and publishes the hub's mode changes. The swarm
 * binding starts it with the hub and a generated lane client when
 * HIVE_LANES_* are set.
 */
export { HiveLanes, type LaneClient } from "./hive-lanes.js";
export { HIVE_SCHEMAS } from "./hive-lanes-events.js";
export { hiveLanesSettingsFromEnv, type HiveLanesSettings } from "./hive-lanes-settings.js";
