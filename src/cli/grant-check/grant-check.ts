/**
 * The grant check: the NATS grants Laneway renders must equal the users of
 * an antoncore checkout.
 *
 * | Laneway renders | antoncore user | outcome |
 * | --- | --- | --- |
 * | the unscoped member grant, its `_INBOX.<user>.>` read as `_INBOX.>` (and its `slots.*.<hive>` as `slots.*.*`) | `swarm-hive` | compared while the user exists; skipped with a notice once it is gone |
 * | the controller grant | `swarm-controller` | always compared; a missing user fails the check |
 *
 * A subject granted on one side only prints one `::error::` line naming
 * the side (and its file) that grants it, and the check fails. The missing
 * hive user is accepted only in operator mode (no accounts block in the
 * values file); a values file whose SWARM account lacks `swarm-hive` fails
 * with `::error::The swarm NATS grants cannot be read (ValueError: the
 * SWARM account has no swarm-hive user)`.
 *
 * The no-shared-hive-user rule (antoncore's
 * `test_no_shared_hive_user_remains`) fails when a user named `swarm-hive`
 * returns, or when any user may publish on the spoke execution subject
 * `swarm.*.execution.>`.
 */
import { CONTROLLER_USER, controllerGrant, covers, HIVE_USER, renderMemberGrant, SPOKE_EXECUTION_SUBJECT } from "../../swarm/index.js";
import { GrantsUnreadableError, readAntoncoreNats, type AntoncoreNats, type AntoncoreUser } from "./antoncore-users.js";
/** Where Laneway's grants are rendered, named in one-sided lines. */
const LANEWAY_SOURCE = "src/swarm/member-grant.ts";

export interface GrantCheckResult {
  /** The lines to print, in order. */
  readonly lines: readonly string[];
  /** Exit 0 when true, 1 otherwise. */
  readonly ok: boolean;
}

/** Runs the grant check (and, with `noSharedHiveUser`, the rule) against a checkout. */
export async function checkGrants(checkout: string, options: { noSharedHiveUser?: boolean } = {}): Promise<GrantCheckResult> {
  let nats: AntoncoreNats;
  try {
    nats = await readAntoncoreNats(checkout);
  } catch (error) {
    if (error instanceof GrantsUnreadableError) return { ok: false, lines: [unreadable(error.message)] };
    throw error;
  }
  const lines: string[] = [];
  let ok = true;

  const hive = nats.users.get(HIVE_USER);
  if (hive === undefined) {
    if (nats.mode === "accounts") return { ok: false, lines: [unreadable(`the SWARM account has no ${HIVE_USER} user`)] };
    lines.push(`The antoncore ${HIVE_USER} user is retired, so hives connect only with minted member credentials.`);
  } else {
    const member = renderMemberGrant("hive", { kind: "unscoped" });
    const shared = (subjects: readonly string[]) => subjects.map((s) => (s === "_INBOX.hive.>" ? "_INBOX.>" : s === "slots.*.hive" ? "slots.*.*" : s));
    const result = compare({ publish: shared(member.publishAllow), subscribe: shared(member.subscribeAllow) }, hive, "hive member grant");
    lines.push(...result.errors);
    if (result.errors.length === 0) lines.push(`The hive member NATS grants match antoncore: ${result.publish} publish and ${result.subscribe} subscribe subjects.`);
    else ok = false;
  }

  const controller = nats.users.get(CONTROLLER_USER);
  if (controller === undefined) return { ok: false, lines: [...lines, unreadable(`the SWARM account has no ${CONTROLLER_USER} user`)] };
  const rendered = controllerGrant();
  const result = compare({ publish: rendered.publishAllow, subscribe: rendered.subscribeAllow }, controller, "controller grant");
  lines.push(...result.errors);
  if (result.errors.length === 0) lines.push(`The controller NATS grants match antoncore: ${result.publish} publish and ${result.subscribe} subscribe subjects.`);
  else ok = false;

  if (options.noSharedHiveUser) {
    const rule = noSharedHiveUser(nats);
    lines.push(...rule.lines);
    ok &&= rule.ok;
  }
  return { ok, lines };
}

/** antoncore's `test_no_shared_hive_user_remains`, on the users read. */
export function noSharedHiveUser(nats: AntoncoreNats): GrantCheckResult {
  const errors: string[] = [];
  const hive = nats.users.get(HIVE_USER);
  if (hive !== undefined) errors.push(`::error::The shared ${HIVE_USER} user is defined in ${hive.file}: hives connect only with minted member credentials.`);
  for (const user of nats.users.values()) {
    const granting = user.publishAllow.filter((subject) => covers(subject, SPOKE_EXECUTION_SUBJECT));
    for (const subject of granting) {
      errors.push(`::error::The ${user.name} user (${user.file}) may publish on the spoke execution subject ${SPOKE_EXECUTION_SUBJECT} (publish allow ${subject}).`);
    }
  }
  if (errors.length > 0) return { ok: false, lines: errors };
  return { ok: true, lines: [`No shared hive user remains: no antoncore user is ${HIVE_USER} or may publish on ${SPOKE_EXECUTION_SUBJECT}.`] };
}

function compare(
  laneway: { readonly publish: readonly string[]; readonly subscribe: readonly string[] },
  user: AntoncoreUser,
  grantName: string,
): { errors: string[]; publish: number; subscribe: number } {
  const errors: string[] = [];
  const sides = [
    ["publish", new Set(laneway.publish), new Set(user.publishAllow)],
    ["subscribe", new Set(laneway.subscribe), new Set(user.subscribeAllow)],
  ] as const;
  for (const [direction, ours, theirs] of sides) {
    for (const subject of [...theirs].sort()) {
      if (!ours.has(subject)) errors.push(`::error::${direction} allow ${subject} is granted only by the antoncore ${user.name} user (${user.file}).`);
    }
    for (const subject of [...ours].sort()) {
      if (!theirs.has(subject)) errors.push(`::error::${direction} allow ${subject} is granted only by Laneway's ${grantName} (${LANEWAY_SOURCE}).`);
    }
  }
  return { errors, publish: new Set(laneway.publish).size, subscribe: new Set(laneway.subscribe).size };
}

function unreadable(message: string): string {
  return `::error::The swarm NATS grants cannot be read (ValueError: ${message})`;
}
