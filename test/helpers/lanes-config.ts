/**
 * The one builder of lanes configurations for tests: a namespace, its
 * lanes and any bounds, with the principals written from project names.
 * A project named as a string reads its token from `<PROJECT>_LANE_TOKEN`
 * (atlas and beacon are the tokens every test Laneway gets; give the
 * others in the Laneway's `env`); a project whose token comes from another
 * variable is named as `{ project, token_env }`.
 */

/** A principal of a lanes configuration. */
export interface LanesPrincipal {
  readonly project: string;
  readonly token_env: string;
}

/** The variable a project's token is read from: `<PROJECT>_LANE_TOKEN`, in capitals with `-` as `_`. */
function laneTokenEnv(project: string): string {
  return `${project.toUpperCase().replaceAll("-", "_")}_LANE_TOKEN`;
}

type Fields = { readonly namespace: string; readonly lanes: readonly unknown[] } & Record<string, unknown>;

export function buildLanesConfig<T extends Fields>(
  fields: T & { readonly projects?: readonly (string | LanesPrincipal)[] },
): Omit<T, "projects"> & { principals: LanesPrincipal[] } {
  const { projects = ["atlas", "beacon"], namespace, ...rest } = fields;
  const principals = projects.map((p) => (typeof p === "string" ? { project: p, token_env: laneTokenEnv(p) } : { project: p.project, token_env: p.token_env }));
  return { namespace, principals, ...rest } as unknown as Omit<T, "projects"> & { principals: LanesPrincipal[] };
}
