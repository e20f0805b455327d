/**
 * Where a logical subject or queue name goes: one table for each mode,
 * and the refusals that keep a scoped bus inside its swarm. Callers keep
 * their logical names (the specification's "Callers keep their logical
 * names"); only this file knows the physical ones.
 *
 * Subjects (publish, read):
 *
 * | logical | scoped | unscoped (legacy) |
 * | --- | --- | --- |
 * | `swarm.<swarm>.execution.<rest>` | `swarm.<swarm>.events.execution.<rest>` | `legacy.swarm.<swarm>.execution.<rest>`, or the subject itself when the credential does not allow `legacy.swarm.>` |
 * | `swarm.*.execution.<rest>` (read) | `swarm.<bus swarm>.events.execution.<rest>` | both `swarm.*.execution.<rest>` and `legacy.swarm.*.execution.<rest>` |
 * | `swarm.<swarm>.events.<rest>` | itself | — |
 * | `legacy.swarm.<swarm>.<rest>` | — | itself |
 * | `dead.<swarm>` | `swarm.<swarm>.dead.event` | itself, in `AGENTIHOOKS_DEAD` |
 * | `swarm.<swarm>.dead.<rest>` | itself | — |
 *
 * Queues: `swarm.<swarm>.ready.<lane>` (lane `eng`, `ci` or `plan`) is, in
 * scoped mode, the swarm's lane queue stream (subjects
 * `swarm.<swarm>.queue.<lane>.>`), offered to on
 * `swarm.<swarm>.queue.<lane>.work` and taken from by the durable consumer
 * `<lane>`. In unscoped mode any queue name is the legacy queue of that
 * name (see names.ts).
 *
 * Scoped refusals, raised before anything reaches the server (exact texts
 * in errors.ts): a subject or queue naming another swarm than the bus's, a
 * lane outside eng/ci/plan, a queue name that is not a lane queue on the
 * root bus, and an event whose `swarm` field differs from the bus swarm.
 */
import { queueStream, queueWorkSubject, SWARM_LANES, type SwarmLane, type SwarmStream } from "./stream-names.js";
import { swarmNameProblem } from "./swarm-names.js";
import { BUS_OWN_TEXTS, BUS_TEXTS, BusRefusedError } from "./errors.js";
import { LEGACY_EVENT_PREFIX, legacyQueueConsumerName, legacyQueueStreamName } from "./names.js";

export type BusMode = "scoped" | "unscoped";
export type SubjectKind = "event" | "dead";
export type SubjectUse = "publish" | "read";

/** Values a pattern captured: `{swarm}`, `{lane}`, `{rest}` (one or more tokens, joined). */
export type Captures = Readonly<Record<string, string>>;

/** One row of the subject table. */
export interface SubjectRule {
  /** Named in tests and messages. */
  readonly name: string;
  /** Tokens; `{x}` captures one token, `{rest}` (last only) one or more. */
  readonly pattern: string;
  readonly kind: SubjectKind;
  /** The physical subject in scoped mode; absent: the rule does not apply there. */
  readonly scoped?: (c: Captures) => string;
  /**
   * The physical subjects in unscoped mode, preferred first: a publish
   * tries them in order (the next one when the server refuses the first),
   * a read reads all of them.
   */
  readonly unscoped?: (c: Captures) => readonly string[];
}

/** The subject table. The first matching rule of the bus's mode wins. */
export const SUBJECT_RULES: readonly SubjectRule[] = Object.freeze([
  {
    name: "execution event",
    pattern: "swarm.{swarm}.execution.{rest}",
    kind: "event",
    scoped: (c) => `swarm.${c.swarm}.events.execution.${c.rest}`,
    unscoped: (c) => [`${LEGACY_EVENT_PREFIX}swarm.${c.swarm}.execution.${c.rest}`, `swarm.${c.swarm}.execution.${c.rest}`],
  },
  {
    name: "scoped event",
    pattern: "swarm.{swarm}.events.{rest}",
    kind: "event",
    scoped: (c) => `swarm.${c.swarm}.events.${c.rest}`,
  },
  {
    name: "legacy event",
    pattern: "legacy.swarm.{swarm}.{rest}",
    kind: "event",
    unscoped: (c) => [`${LEGACY_EVENT_PREFIX}swarm.${c.swarm}.${c.rest}`],
  },
  {
    name: "dead letter",
    pattern: "dead.{swarm}",
    kind: "dead",
    scoped: (c) => `swarm.${c.swarm}.dead.event`,
    unscoped: (c) => [`dead.${c.swarm}`],
  },
  {
    name: "scoped dead letter",
    pattern: "swarm.{swarm}.dead.{rest}",
    kind: "dead",
    scoped: (c) => `swarm.${c.swarm}.dead.${c.rest}`,
  },
] satisfies SubjectRule[]);

/** Physical subjects read back as the logical ones callers use. */
export const LOGICAL_RULES: readonly { readonly pattern: string; readonly logical: (c: Captures) => string }[] = Object.freeze([
  { pattern: "swarm.{swarm}.events.execution.{rest}", logical: (c: Captures) => `swarm.${c.swarm}.execution.${c.rest}` },
  { pattern: "swarm.{swarm}.dead.event", logical: (c: Captures) => `dead.${c.swarm}` },
  { pattern: "legacy.swarm.{swarm}.{rest}", logical: (c: Captures) => `swarm.${c.swarm}.${c.rest}` },
]);

/** The logical lane queue name: `swarm.<swarm>.ready.<lane>`. */
export const QUEUE_PATTERN = "swarm.{swarm}.ready.{lane}";

/** Where a subject goes. */
export interface SubjectRoute {
  readonly kind: SubjectKind;
  readonly rule: string;
  /** The swarm the subject belongs to; `*` for an unscoped read of every swarm. */
  readonly swarm: string;
  /** Physical subjects: a publish tries them in order, a read reads all. */
  readonly subjects: readonly string[];
}

/** Where a queue name goes. */
export type QueueRoute =
  | {
      readonly mode: "scoped";
      readonly name: string;
      readonly swarm: string;
      readonly lane: SwarmLane;
      readonly stream: SwarmStream;
      readonly offerSubject: string;
      readonly consumer: string;
    }
  | {
      readonly mode: "unscoped";
      readonly name: string;
      /** The swarm, when the name is a lane queue name. */
      readonly swarm: string | undefined;
      readonly streamName: string;
      readonly offerSubject: string;
      readonly consumer: string;
    };

/** Matches `subject` against `pattern`; the captures, or undefined. */
export function matchPattern(pattern: string, subject: string): Captures | undefined {
  const want = pattern.split(".");
  const have = subject.split(".");
  const captures: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const token = want[i]!;
    if (token === "{rest}") {
      if (i !== want.length - 1 || have.length <= i) return undefined;
      captures.rest = have.slice(i).join(".");
      return captures;
    }
    const got = have[i];
    if (got === undefined) return undefined;
    if (token.startsWith("{")) captures[token.slice(1, -1)] = got;
    else if (token !== got) return undefined;
  }
  return have.length === want.length ? captures : undefined;
}

/**
 * Routes a subject for a bus in `mode` whose swarm is `busSwarm` (the
 * root bus has none). Throws the specification's refusals.
 */
export function routeSubject(mode: BusMode, busSwarm: string | undefined, subject: string, use: SubjectUse): SubjectRoute {
  checkSubjectSyntax(subject, use);
  for (const rule of SUBJECT_RULES) {
    const map = mode === "scoped" ? rule.scoped : rule.unscoped;
    if (map === undefined) continue;
    const captures = matchPattern(rule.pattern, subject);
    if (captures === undefined) continue;
    let swarm = captures.swarm!;
    if (swarm === "*") {
      if (use === "publish") throw new BusRefusedError(BUS_OWN_TEXTS.invalidSubject(subject));
      if (mode === "scoped") {
        if (busSwarm === undefined) throw new BusRefusedError(BUS_OWN_TEXTS.selectSwarmForEvents);
        swarm = busSwarm;
      }
    } else if (swarm.includes(">")) {
      throw refuseForeign(mode, busSwarm, subject);
    } else if (mode === "scoped") {
      if (busSwarm !== undefined && swarm !== busSwarm) throw new BusRefusedError(BUS_TEXTS.subjectNotOfSwarm(subject, busSwarm));
      const problem = swarmNameProblem(swarm);
      if (problem !== undefined) throw new BusRefusedError(BUS_OWN_TEXTS.invalidSwarm(problem));
    }
    const physical = mode === "scoped" ? [rule.scoped!({ ...captures, swarm })] : rule.unscoped!({ ...captures, swarm });
    return { kind: rule.kind, rule: rule.name, swarm, subjects: physical };
  }
  throw refuseForeign(mode, busSwarm, subject);
}

/** The logical subject of a physical one (what readers are given). */
export function logicalSubject(physical: string): string {
  for (const rule of LOGICAL_RULES) {
    const captures = matchPattern(rule.pattern, physical);
    if (captures !== undefined) return rule.logical(captures);
  }
  return physical;
}

/** Routes a queue name for a bus in `mode` whose swarm is `busSwarm`. Throws the specification's refusals. */
export function routeQueue(mode: BusMode, busSwarm: string | undefined, name: string): QueueRoute {
  const captures = hasWildcardOrBadToken(name) ? undefined : matchPattern(QUEUE_PATTERN, name);
  if (mode === "unscoped") {
    if (hasWildcardOrBadToken(name) || /[/\\]/.test(name)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidQueueName(name));
    return {
      mode,
      name,
      swarm: captures?.swarm,
      streamName: legacyQueueStreamName(name),
      offerSubject: name,
      consumer: legacyQueueConsumerName(name),
    };
  }
  if (captures === undefined) {
    if (busSwarm === undefined) throw new BusRefusedError(BUS_TEXTS.selectSwarmForQueue);
    throw new BusRefusedError(BUS_TEXTS.queueNotOfSwarm(name, busSwarm));
  }
  const swarm = captures.swarm!;
  if (busSwarm !== undefined && swarm !== busSwarm) throw new BusRefusedError(BUS_TEXTS.queueNotOfSwarm(name, busSwarm));
  const problem = swarmNameProblem(swarm);
  if (problem !== undefined) throw new BusRefusedError(BUS_OWN_TEXTS.invalidSwarm(problem));
  const lane = captures.lane!;
  if (!isLane(lane)) throw new BusRefusedError(BUS_TEXTS.queueNotOfSwarm(name, swarm));
  return { mode, name, swarm, lane, stream: queueStream(swarm, lane), offerSubject: queueWorkSubject(swarm, lane), consumer: lane };
}

/**
 * Scoped mode: an event whose `swarm` field differs from the bus swarm is
 * refused on offer and publish. Unscoped buses do not check.
 */
export function checkEventSwarm(mode: BusMode, swarm: string, event: BusEvent): void {
  if (mode !== "scoped" || !("swarm" in event) || event.swarm === undefined) return;
  const eventSwarm = typeof event.swarm === "string" ? event.swarm : JSON.stringify(event.swarm);
  if (eventSwarm !== swarm) throw new BusRefusedError(BUS_TEXTS.eventSwarmMismatch(eventSwarm, swarm));
}

/** An event: a JSON object, usually with the swarm it belongs to. */
export type BusEvent = { readonly swarm?: unknown } & Readonly<Record<string, unknown>>;

/** The bytes of an event (JSON). Refuses anything that is not a JSON object. */
export function encodeEvent(event: BusEvent): Uint8Array {
  if (event === null || typeof event !== "object" || Array.isArray(event)) throw new BusRefusedError(BUS_OWN_TEXTS.notJson);
  return Buffer.from(JSON.stringify(event), "utf8");
}

/** Parses event bytes; undefined when they are not a JSON object. */
export function decodeEvent(data: Uint8Array): BusEvent | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8"));
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as BusEvent) : undefined;
  } catch {
    return undefined;
  }
}

export function isLane(lane: string): lane is SwarmLane {
  return (SWARM_LANES as readonly string[]).includes(lane);
}

function refuseForeign(mode: BusMode, busSwarm: string | undefined, subject: string): BusRefusedError {
  if (mode === "scoped") {
    return new BusRefusedError(busSwarm === undefined ? BUS_OWN_TEXTS.subjectNamesNoSwarm(subject) : BUS_TEXTS.subjectNotOfSwarm(subject, busSwarm));
  }
  return new BusRefusedError(BUS_OWN_TEXTS.invalidSubject(subject));
}

/** Empty tokens, whitespace and control characters are never valid; wildcards only in reads (`>` last). */
function checkSubjectSyntax(subject: string, use: SubjectUse): void {
  const tokens = subject.split(".");
  const bad = tokens.some((t, i) => t === "" || /[\s\u0000-\u001f\u007f]/.test(t) || (t.includes(">") && (t !== ">" || i !== tokens.length - 1)) || (t.includes("*") && t !== "*"));
  const wildcard = tokens.some((t) => t === "*" || t === ">");
  if (bad || (use === "publish" && wildcard)) throw new BusRefusedError(BUS_OWN_TEXTS.invalidSubject(subject));
}

function hasWildcardOrBadToken(name: string): boolean {
  return name.split(".").some((t) => t === "" || /[\s*>\u0000-\u001f\u007f]/.test(t));
}
