/**
 * The specification's example lanes configuration ("Example
 * administrator-owned lanes.json"): projects atlas and beacon, the lane
 * `measurements` that both publish to and subscribe to, and the group
 * `summarizers` whose only member (and recoverer) is beacon.
 *
 * Without `url` and `credentials_env`, so that it runs on Laneway's own NATS
 * connection. The demo (`laneway serve --demo`) writes it with namespace
 * `demo`; the tests and docs use it as the one fixture of a lanes
 * configuration.
 */
export const EXAMPLE_LANES_CONFIG = Object.freeze({
  namespace: "commons",
  principals: [
    { project: "atlas", token_env: "ATLAS_LANE_TOKEN" },
    { project: "beacon", token_env: "BEACON_LANE_TOKEN" },
  ],
  lanes: [
    {
      id: "measurements",
      owner: "atlas",
      publishers: ["atlas", "beacon"],
      subscribers: ["atlas", "beacon"],
      groups: { summarizers: ["beacon"] },
      recoverers: { summarizers: ["beacon"] },
    },
  ],
});

/** A fresh, mutable copy of the example (namespace `commons`) with top-level fields replaced. */
export function exampleLanesConfig(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...(JSON.parse(JSON.stringify(EXAMPLE_LANES_CONFIG)) as Record<string, unknown>), ...overrides };
}
