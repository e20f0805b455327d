/**
 * What a swarm name and a hive member id may be.
 *
 * A swarm name becomes a NATS subject token (`swarm.<swarm>.…`), so it must
 * be one: 1 to 64 bytes of UTF-8 without `.`, `*`, `>`, whitespace or
 * control characters. A member id names a NATS user, an inbox prefix
 * (`_INBOX.<member>`), a slot subject token and a Redis ACL user, so it is
 * an identifier of the lanes specification: a lowercase letter, then
 * lowercase letters, digits, `_` or `-`, at most 64 characters.
 */

/** The longest swarm name, in UTF-8 bytes. */
export const MAX_SWARM_NAME_BYTES = 64;

const MEMBER_ID = /^[a-z][a-z0-9_-]{0,63}$/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Whether `id` is a valid hive member id. */
export function isMemberId(id: string): boolean {
  return MEMBER_ID.test(id);
}

/**
 * Why `name` is not a valid swarm name, or undefined when it is. The reason
 * quotes the name (clipped, control characters escaped) so that an operator
 * can find it in the record.
 */
export function swarmNameProblem(name: string): string | undefined {
  if (name === "") return "a swarm name is empty";
  const shown = `'${displayName(name)}'`;
  if (Buffer.byteLength(name, "utf8") > MAX_SWARM_NAME_BYTES) return `${shown} is longer than ${MAX_SWARM_NAME_BYTES} bytes`;
  for (const forbidden of [".", "*", ">"]) {
    if (name.includes(forbidden)) return `${shown} contains '${forbidden}'`;
  }
  if (/\s/u.test(name)) return `${shown} contains whitespace`;
  if (/[\u0000-\u001f\u007f]/.test(name)) return `${shown} contains a control character`;
  if (LONE_SURROGATE.test(name)) return `${shown} is not valid UTF-8`;
  return undefined;
}

/** Whether `name` is a valid swarm name. */
export function isSwarmName(name: string): boolean {
  return swarmNameProblem(name) === undefined;
}

/** A name as it may appear in a message: at most 64 characters, control characters escaped. */
function displayName(name: string): string {
  const clipped = [...name].length > 64 ? `${[...name].slice(0, 64).join("")}…` : name;
  return clipped.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
