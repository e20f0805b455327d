/**
 * What a credential may do on the NATS server: the grants the hub renders
 * into member credentials, and the controller grant the grant check
 * compares with antoncore's `swarm-controller` user.
 *
 * The signer record decides a member's grant (the specification's table):
 *
 * | member_swarms | grant |
 * | --- | --- |
 * | no field | the unscoped member grant: legacy execution subjects, the shared dead letter stream, the shared `KV_<bucket>` store of every hive state bucket |
 * | lists swarms | publish and subscribe only under each listed swarm's prefix, the swarm's legacy subjects denied |
 * | empty list | publish denied on `>`; subscribe only on the member's own `_INBOX.<user>.>` |
 * | field present, member absent | none: the hub refuses (403) before any side effect |
 *
 * NATS reads an empty allow list as "everything", so every grant here
 * names its subjects explicitly, and the empty-list grant denies `>`.
 * Nothing grants stream or consumer creation, the legacy
 * `AGENTIHOOKS_EVENTS`/`AGENTIHOOKS_DEAD` streams to a scoped member, the
 * hub's slot buckets, or another swarm's names.
 *
 * `swarm.<swarm>.>` also covers subjects of the legacy (unscoped) resources
 * that a legacy stream captures: `swarm.<swarm>.execution.>` is stored in
 * `AGENTIHOOKS_EVENTS`, `swarm.<swarm>.ready.<lane>` in the legacy lane
 * queue. A scoped grant therefore denies, for each of its swarms, the
 * legacy subjects of that swarm ({@link legacySubjectsOfSwarm}: events,
 * ready queues, dead letters), the shared legacy `$KV.<bucket>.>` stores,
 * and the mark subjects of earlier versions (`swarm.<swarm>.….$migration`).
 * NATS applies a deny over any allow, so the grant keeps its shape and the
 * member's own scoped resources (`events`, `dead`, `queue`, `state` under
 * its prefix) keep working.
 */
import { SwarmError } from "../swarm-bus/index.js";
import { SWARM_TEXTS } from "./signer-record.js";
import { GLOBAL_STREAMS, SWARM_STATE_BUCKETS, swarmStreams } from "../swarm-bus/index.js";
import { LEGACY_EVENT_SUBJECTS, legacyKvStream, legacyMarkSubjectPatterns, slotRequestSubject, swarmSubjectPrefix } from "../swarm-bus/internal.js";

/** The hub record's member_swarms field exists and omits the member: 403, decided before any side effect. */
export function noMemberSwarmsError(memberId: string): SwarmError {
  return new SwarmError("swarm_forbidden", SWARM_TEXTS.noMemberSwarms(memberId));
}

/** How the signer record shapes a member's credential. */
export type GrantDecision = { readonly kind: "unscoped" } | { readonly kind: "scoped"; readonly swarms: readonly string[] };

/** NATS permissions of one credential. */
export interface NatsGrant {
  readonly scoped: boolean;
  /** The member's swarms, when scoped (sorted, distinct). */
  readonly swarms: readonly string[];
  readonly publishAllow: readonly string[];
  readonly publishDeny: readonly string[];
  readonly subscribeAllow: readonly string[];
  readonly subscribeDeny: readonly string[];
  /** The inbox prefix the member connects with: `_INBOX.<member>`. */
  readonly inboxPrefix: string;
}

/**
 * The grant decision for `memberId` under a record's member_swarms field
 * (undefined: the record has no field). Throws the specification's 403
 * when the field exists and omits the member.
 */
export function decideGrant(memberSwarms: ReadonlyMap<string, readonly string[]> | undefined, memberId: string): GrantDecision {
  if (memberSwarms === undefined) return { kind: "unscoped" };
  const swarms = memberSwarms.get(memberId);
  if (swarms === undefined) throw noMemberSwarmsError(memberId);
  return { kind: "scoped", swarms: [...new Set(swarms)].sort() };
}

/** The inbox prefix of a member (`_INBOX.<member>`); it subscribes to replies under it only. */
export function inboxPrefixOf(memberId: string): string {
  return `_INBOX.${memberId}`;
}

/**
 * The JetStream API subjects that cannot carry the swarm prefix, granted
 * for one stream name: info, message get, consumer info, pull next, acks.
 */
export function streamApiSubjects(stream: string): readonly string[] {
  return [
    `$JS.API.STREAM.INFO.${stream}`,
    `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.CONSUMER.INFO.${stream}.*`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
    `$JS.ACK.${stream}.>`,
  ];
}

/**
 * The legacy (unscoped) subjects of one swarm a scoped member is denied:
 * its execution events (`AGENTIHOOKS_EVENTS`, original and prefixed), its
 * legacy ready queues (`AGENTIHOOKS_QUEUE_swarm_<swarm>_ready_<lane>`) and
 * its legacy dead letters (`dead.<swarm>` in `AGENTIHOOKS_DEAD`).
 */
export function legacySubjectsOfSwarm(swarm: string): readonly string[] {
  return [`swarm.${swarm}.execution.>`, `legacy.swarm.${swarm}.>`, `swarm.${swarm}.ready.>`, `dead.${swarm}`, `dead.${swarm}.>`];
}

/** What a scoped grant denies for its swarms: their legacy subjects, the shared legacy state stores, the old mark subjects. */
export function scopedPublishDeny(swarms: readonly string[]): readonly string[] {
  return [
    ...swarms.flatMap((swarm) => [...legacySubjectsOfSwarm(swarm), ...legacyMarkSubjectPatterns(swarm)]),
    ...SWARM_STATE_BUCKETS.map((bucket) => `$KV.${bucket}.>`),
  ];
}

/** The grant a member's credential carries under `decision`. */
export function renderMemberGrant(memberId: string, decision: GrantDecision): NatsGrant {
  const inboxPrefix = inboxPrefixOf(memberId);
  const inbox = `${inboxPrefix}.>`;
  if (decision.kind === "unscoped") {
    const sharedStreams = [GLOBAL_STREAMS.legacyDead, GLOBAL_STREAMS.dead, ...SWARM_STATE_BUCKETS.map(legacyKvStream)];
    return grant({
      scoped: false,
      swarms: [],
      publishAllow: [
        ...LEGACY_EVENT_SUBJECTS,
        "dead.>",
        ...SWARM_STATE_BUCKETS.map((bucket) => `$KV.${bucket}.>`),
        ...sharedStreams.flatMap(streamApiSubjects),
        ...SWARM_STATE_BUCKETS.map((bucket) => `$JS.API.DIRECT.GET.${legacyKvStream(bucket)}.>`),
        slotRequestSubject("*", memberId),
      ],
      publishDeny: [],
      subscribeAllow: [...LEGACY_EVENT_SUBJECTS, inbox],
      subscribeDeny: [],
      inboxPrefix,
    });
  }
  const swarms = [...new Set(decision.swarms)].sort();
  if (swarms.length === 0) {
    return grant({ scoped: true, swarms, publishAllow: [], publishDeny: [">"], subscribeAllow: [inbox], subscribeDeny: [], inboxPrefix });
  }
  return grant({
    scoped: true,
    swarms,
    publishAllow: swarms.flatMap((swarm) => [
      `${swarmSubjectPrefix(swarm)}.>`,
      ...swarmStreams(swarm).flatMap((stream) => [...streamApiSubjects(stream.name), ...streamApiSubjects(stream.legacyName)]),
      slotRequestSubject(swarm, memberId),
    ]),
    publishDeny: scopedPublishDeny(swarms),
    subscribeAllow: [...swarms.map((swarm) => `${swarmSubjectPrefix(swarm)}.>`), inbox],
    subscribeDeny: [],
    inboxPrefix,
  });
}

/**
 * The hub's controller grant (antoncore's `swarm-controller` user): it
 * provisions and reads every swarm's streams, answers slot requests from
 * the `hub-slots` queue group, and never publishes on the spoke execution
 * subject `swarm.*.execution.>`.
 */
export function controllerGrant(): { readonly publishAllow: readonly string[]; readonly subscribeAllow: readonly string[] } {
  return {
    publishAllow: [
      "$JS.API.>",
      "$JS.ACK.>",
      "$KV.>",
      "swarm.*.events.>",
      "swarm.*.dead.>",
      "swarm.*.queue.>",
      "swarm.*.state.>",
      "dead.>",
      "_INBOX.>",
    ],
    subscribeAllow: ["_INBOX.>", "swarm.>", "legacy.swarm.>", "dead.>", "slots.>", "$KV.>"],
  };
}

function grant(g: NatsGrant): NatsGrant {
  const distinct = (list: readonly string[]) => Object.freeze([...new Set(list)]);
  return Object.freeze({
    ...g,
    swarms: Object.freeze([...g.swarms]),
    publishAllow: distinct(g.publishAllow),
    publishDeny: distinct(g.publishDeny),
    subscribeAllow: distinct(g.subscribeAllow),
    subscribeDeny: distinct(g.subscribeDeny),
  });
}

/** The antoncore user every hive shared before minted member credentials (now retired). */
export const HIVE_USER = "swarm-hive";
/** The antoncore user of the swarm controller, whose grant {@link controllerGrant} renders. */
export const CONTROLLER_USER = "swarm-controller";
/** The spoke execution subject no user may publish on. */
export const SPOKE_EXECUTION_SUBJECT = "swarm.*.execution.>";

/**
 * Whether the permission subject `permission` allows every subject that
 * `subject` matches (token by token; `>` covers the rest, `*` one token).
 */
export function covers(permission: string, subject: string): boolean {
  const p = permission.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return i < s.length;
    if (i >= s.length) return false;
    if (p[i] === "*") {
      if (s[i] === ">") return false;
      continue;
    }
    if (p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}
