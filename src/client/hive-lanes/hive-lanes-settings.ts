/**
 * The hive lane adapter's settings, read by `laneway serve` when the hive
 * is enabled (the specification's "Hive adapter"):
 *
 * | variable | meaning |
 * | --- | --- |
 * | `HIVE_LANES_ADDRESS` | the Laneway serving the lane (`http://` or `https://`, possibly this server's own address) |
 * | `HIVE_LANES_TOKEN` | the hive's project token there (32 to 4,096 visible ASCII bytes); a bearer secret |
 * | `HIVE_LANES_LANE` | the lane the hive publishes its events to and claims requests from |
 * | `HIVE_LANES_GROUP` | the work group of that lane the hive claims in |
 * | `HIVE_LANES_SNAPSHOT_PROJECTS` | optional: the projects (comma-separated) whose `hive-governor-snapshot-request-v1` work is answered; without it no snapshot handler is registered |
 *
 * The four are set together or not at all; the allowlist needs them.
 * Nothing here is ever printed: the address may name an internal host and
 * the token is a secret, so messages name only the variables.
 */
import { envValue, Secret, tokenProblem, type Env } from "../../config/index.js";
import { SwarmError } from "../../swarm/index.js";

export const HIVE_LANES_ENV = Object.freeze({
  address: "HIVE_LANES_ADDRESS",
  token: "HIVE_LANES_TOKEN",
  lane: "HIVE_LANES_LANE",
  group: "HIVE_LANES_GROUP",
  snapshotProjects: "HIVE_LANES_SNAPSHOT_PROJECTS",
});

/** The most projects the snapshot allowlist names (a lanes configuration has at most 64 principals). */
export const MAX_SNAPSHOT_PROJECTS = 64;

export interface HiveLanesSettings {
  /** The Laneway base URL. Never logged. */
  readonly address: string;
  readonly token: Secret;
  readonly lane: string;
  readonly group: string;
  /** Publishers whose snapshot requests are answered; empty: no snapshot handler. */
  readonly snapshotProjects: readonly string[];
}

const IDENTIFIER = /^[a-z][a-z0-9_-]{0,63}$/;
const IDENTIFIER_RULE = "an identifier: a lowercase letter, then lowercase letters, digits, '_' or '-', at most 64 characters";

/**
 * The settings of the environment; undefined when none of the variables is
 * set. Throws `swarm_invalid` naming the variable that is missing or wrong.
 */
export function hiveLanesSettingsFromEnv(env: Env): HiveLanesSettings | undefined {
  const names = Object.values(HIVE_LANES_ENV);
  const present = names.filter((name) => envValue(env, name) !== undefined);
  if (present.length === 0) return undefined;
  const required = [HIVE_LANES_ENV.address, HIVE_LANES_ENV.token, HIVE_LANES_ENV.lane, HIVE_LANES_ENV.group];
  const missing = required.filter((name) => envValue(env, name) === undefined);
  if (missing.length > 0) {
    throw new SwarmError("swarm_invalid", `the hive lane adapter needs ${required.join(", ")} together; ${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} not set`);
  }
  const address = envValue(env, HIVE_LANES_ENV.address)!;
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.address} must be an http:// or https:// URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.address} must be an http:// or https:// URL`);
  if (url.username !== "" || url.password !== "") throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.address} must not hold credentials: the token goes in ${HIVE_LANES_ENV.token}`);
  const token = new Secret(envValue(env, HIVE_LANES_ENV.token)!);
  const problem = tokenProblem(token);
  if (problem !== undefined) throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.token} ${problem}`);
  const lane = identifier(env, HIVE_LANES_ENV.lane);
  const group = identifier(env, HIVE_LANES_ENV.group);
  const listed = envValue(env, HIVE_LANES_ENV.snapshotProjects);
  const snapshotProjects = listed === undefined ? [] : parseProjects(listed);
  return { address: address.replace(/\/+$/, ""), token, lane, group, snapshotProjects };
}

function identifier(env: Env, name: string): string {
  const value = envValue(env, name)!.trim();
  if (!IDENTIFIER.test(value)) throw new SwarmError("swarm_invalid", `${name} must be ${IDENTIFIER_RULE}`);
  return value;
}

function parseProjects(text: string): string[] {
  const projects = text.split(",").map((p) => p.trim());
  if (projects.some((p) => !IDENTIFIER.test(p))) {
    throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.snapshotProjects} must list project ids separated by commas, each ${IDENTIFIER_RULE}`);
  }
  const distinct = [...new Set(projects)];
  if (distinct.length > MAX_SNAPSHOT_PROJECTS) throw new SwarmError("swarm_invalid", `${HIVE_LANES_ENV.snapshotProjects} lists at most ${MAX_SNAPSHOT_PROJECTS} projects`);
  return distinct;
}
