/**
 * Mapping a presented bearer token to its project.
 *
 * The configured token alone determines the principal. Every configured
 * token is compared (in constant time) on every call, with no early exit,
 * so the time taken does not reveal which project matched or how many
 * characters of a guess were right.
 */
import type { Secret } from "./secret.js";

/** The project whose token equals `presented`, or `undefined`. Tokens are distinct (validated at load). */
export function findProjectByToken(tokens: ReadonlyMap<string, Secret>, presented: string): string | undefined {
  let match: string | undefined;
  for (const [project, token] of tokens) {
    if (token.equals(presented) && match === undefined) match = project;
  }
  return match;
}
