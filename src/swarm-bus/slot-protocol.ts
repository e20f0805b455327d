/**
 * The account-slot protocol: what a member sends on `slots.<swarm>.<hive>`
 * and what the hub answers, as JSON. One file holds the wire shapes, their
 * bounds and the parser, so the hub (src/swarm/slots/slot-responder.ts)
 * and the member client (slot-client.ts) cannot disagree.
 *
 * Requests (`hive` is always the hive the credential was minted for; the
 * subject carries the swarm):
 *
 * ```json
 * { "op": "take",   "hive": "hive-a", "account": "claude-a", "lease_seconds": 300, "holder": "worker-7" }
 * { "op": "renew",  "hive": "hive-a", "slot": "claude-a.0.3", "lease_seconds": 300 }
 * { "op": "return", "hive": "hive-a", "slot": "claude-a.0.3" }
 * { "op": "list",   "hive": "hive-a" }
 * ```
 *
 * `account`, `lease_seconds` (1 to 3,600, default 300) and `holder` (an
 * identifier naming the process inside the hive, for operators) are
 * optional. Answers:
 *
 * ```json
 * { "ok": true, "op": "take", "slot": { "id": "claude-a.0.3", "account": "claude-a", "index": 0, "generation": 3, "hive": "hive-a", "swarm": "rig", "holder": "worker-7", "taken_at": "…", "expires_at": "…" } }
 * { "ok": true, "op": "return", "returned": true }
 * { "ok": true, "op": "list", "slots": [ … ] }
 * { "ok": false, "op": "take", "error": { "reason": "slot_exhausted", "message": "…" } }
 * ```
 */
import { SlotError, type SlotReason } from "./errors.js";
import { isMemberId } from "./swarm-names.js";

/** The largest request body the hub reads; bigger ones are `slot_invalid`. */
export const MAX_SLOT_REQUEST_BYTES = 4096;

/** Lease bounds, in seconds. */
export const SLOT_LEASE = Object.freeze({ defaultSeconds: 300, minSeconds: 1, maxSeconds: 3600 });

/** The operations a member may ask for. */
export const SLOT_OPERATIONS = Object.freeze(["take", "renew", "return", "list"] as const);
export type SlotOperation = (typeof SLOT_OPERATIONS)[number];

/** A parsed request. */
export type SlotRequest =
  | { readonly op: "take"; readonly hive: string; readonly account: string | undefined; readonly leaseSeconds: number; readonly holder: string | undefined }
  | { readonly op: "renew"; readonly hive: string; readonly slot: SlotId; readonly leaseSeconds: number }
  | { readonly op: "return"; readonly hive: string; readonly slot: SlotId }
  | { readonly op: "list"; readonly hive: string };

/**
 * A slot id: `<account>.<index>.<generation>`. The account and index name
 * the slot; the generation grows every time the slot is taken, so an id
 * names one tenure, and a holder whose lease ended cannot renew or return
 * the slot's next tenure.
 */
export interface SlotId {
  readonly account: string;
  readonly index: number;
  readonly generation: number;
}

/** One held slot, as answered. */
export interface AccountSlot {
  readonly id: string;
  readonly account: string;
  readonly index: number;
  readonly generation: number;
  readonly hive: string;
  readonly swarm: string;
  readonly holder: string | undefined;
  /** RFC 3339. */
  readonly takenAt: string;
  /** RFC 3339: the lease ends here unless renewed. */
  readonly expiresAt: string;
}

/** The answer to a take or a renewal: the slot with its new lease. */
export interface SlotHeldAnswer {
  readonly ok: true;
  readonly op: "take" | "renew";
  readonly slot: AccountSlot;
}
/** The answer to a return: false when the hive no longer held that tenure. */
export interface SlotReturnedAnswer {
  readonly ok: true;
  readonly op: "return";
  readonly returned: boolean;
}
/** The answer to a list: the hive's live slots. */
export interface SlotListAnswer {
  readonly ok: true;
  readonly op: "list";
  readonly slots: readonly AccountSlot[];
}
/** A refusal. */
export interface SlotRefusal {
  readonly ok: false;
  readonly op: SlotOperation | undefined;
  readonly error: { readonly reason: SlotReason; readonly message: string };
}

/** An answer as the hub sends it. */
export type SlotAnswer = SlotHeldAnswer | SlotReturnedAnswer | SlotListAnswer | SlotRefusal;

/** What a request's subject says: the swarm and the hive the credential was minted for. */
export interface SlotSubject {
  readonly swarm: string;
  readonly hive: string;
}

/** Slot accounts and hive ids: identifiers of the lanes specification. */
const IDENTIFIER = /^[a-z][a-z0-9_-]{0,63}$/;

export function isSlotAccountName(name: string): boolean {
  return IDENTIFIER.test(name);
}

export function formatSlotId(id: SlotId): string {
  return `${id.account}.${id.index}.${id.generation}`;
}

export function parseSlotId(text: unknown): SlotId {
  const match = typeof text === "string" ? /^([a-z][a-z0-9_-]{0,63})\.(0|[1-9][0-9]{0,8})\.([1-9][0-9]{0,14})$/.exec(text) : null;
  if (!match) throw new SlotError("slot_invalid", "a slot id is <account>.<index>.<generation>, as take answered it");
  return { account: match[1]!, index: Number(match[2]), generation: Number(match[3]) };
}

/**
 * Reads a request body. The `hive` field is only checked for presence and
 * type here: whether it is the subject's hive is the responder's decision
 * (it refuses and logs a body naming another hive).
 */
export function parseSlotRequest(body: Uint8Array): SlotRequest {
  if (body.byteLength > MAX_SLOT_REQUEST_BYTES) throw new SlotError("slot_invalid", `a slot request is at most ${MAX_SLOT_REQUEST_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch {
    throw new SlotError("slot_invalid", "a slot request is a JSON object");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new SlotError("slot_invalid", "a slot request is a JSON object");
  const fields = value as Record<string, unknown>;
  const op = fields["op"];
  if (typeof op !== "string" || !(SLOT_OPERATIONS as readonly string[]).includes(op)) {
    throw new SlotError("slot_invalid", `op must be one of ${SLOT_OPERATIONS.join(", ")}`);
  }
  const allowed: Record<SlotOperation, readonly string[]> = {
    take: ["op", "hive", "account", "lease_seconds", "holder"],
    renew: ["op", "hive", "slot", "lease_seconds"],
    return: ["op", "hive", "slot"],
    list: ["op", "hive"],
  };
  for (const key of Object.keys(fields)) {
    if (!allowed[op as SlotOperation].includes(key)) throw new SlotError("slot_invalid", `a ${op} request has no field ${JSON.stringify(key.slice(0, 64))}`);
  }
  const hive = fields["hive"];
  if (typeof hive !== "string" || hive === "") throw new SlotError("slot_invalid", "a slot request names its hive (the member id of the credential)");
  switch (op as SlotOperation) {
    case "take": {
      const account = optionalIdentifier(fields["account"], "account");
      const holder = optionalIdentifier(fields["holder"], "holder");
      return { op: "take", hive, account, holder, leaseSeconds: leaseOf(fields["lease_seconds"]) };
    }
    case "renew":
      return { op: "renew", hive, slot: parseSlotId(fields["slot"]), leaseSeconds: leaseOf(fields["lease_seconds"]) };
    case "return":
      return { op: "return", hive, slot: parseSlotId(fields["slot"]) };
    case "list":
      return { op: "list", hive };
  }
}

/**
 * The hive and operation a body names, read before the body is validated
 * (the responder refuses and logs a body naming another hive even when the
 * rest of it is malformed); undefined fields when the body is no JSON
 * object or does not name them as strings.
 */
export function namedInRequest(body: Uint8Array): { hive: string | undefined; op: SlotOperation | undefined } {
  if (body.byteLength > MAX_SLOT_REQUEST_BYTES) return { hive: undefined, op: undefined };
  try {
    const value: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
    if (typeof value !== "object" || value === null || Array.isArray(value)) return { hive: undefined, op: undefined };
    const fields = value as Record<string, unknown>;
    const hive = typeof fields["hive"] === "string" ? fields["hive"] : undefined;
    const op = typeof fields["op"] === "string" && (SLOT_OPERATIONS as readonly string[]).includes(fields["op"]) ? (fields["op"] as SlotOperation) : undefined;
    return { hive, op };
  } catch {
    return { hive: undefined, op: undefined };
  }
}

/** The swarm and hive of `slots.<swarm>.<hive>`; undefined for any other subject. */
export function parseSlotSubject(subject: string): SlotSubject | undefined {
  const parts = subject.split(".");
  if (parts.length !== 3 || parts[0] !== "slots") return undefined;
  return { swarm: parts[1]!, hive: parts[2]! };
}

/** Whether a body's hive is shown in a log line as is (a valid member id), or only as "another hive". */
export function loggableHive(hive: string): string {
  return isMemberId(hive) ? hive : "(not a hive id)";
}

/** The JSON body of a request (member side). */
export function encodeSlotRequest(request: Record<string, unknown>): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(request));
}

/** The JSON body of an answer (hub side). */
export function encodeSlotAnswer(answer: SlotAnswer): Uint8Array {
  const wire = (slot: AccountSlot) => ({
    id: slot.id,
    account: slot.account,
    index: slot.index,
    generation: slot.generation,
    hive: slot.hive,
    swarm: slot.swarm,
    ...(slot.holder === undefined ? {} : { holder: slot.holder }),
    taken_at: slot.takenAt,
    expires_at: slot.expiresAt,
  });
  let body: unknown;
  if (!answer.ok) body = { ok: false, ...(answer.op ? { op: answer.op } : {}), error: answer.error };
  else if (answer.op === "return") body = { ok: true, op: "return", returned: answer.returned };
  else if (answer.op === "list") body = { ok: true, op: "list", slots: answer.slots.map(wire) };
  else body = { ok: true, op: answer.op, slot: wire(answer.slot) };
  return new TextEncoder().encode(JSON.stringify(body));
}

/** Reads an answer (member side); a body that is not an answer is `slot_unavailable`. */
export function decodeSlotAnswer(body: Uint8Array): SlotAnswer {
  let value: Record<string, unknown>;
  try {
    value = JSON.parse(new TextDecoder().decode(body)) as Record<string, unknown>;
  } catch {
    throw new SlotError("slot_unavailable", "the hub's slot answer is not JSON");
  }
  const slotOf = (raw: unknown): AccountSlot => {
    const s = raw as Record<string, unknown>;
    return {
      id: String(s["id"]),
      account: String(s["account"]),
      index: Number(s["index"]),
      generation: Number(s["generation"]),
      hive: String(s["hive"]),
      swarm: String(s["swarm"]),
      holder: typeof s["holder"] === "string" ? s["holder"] : undefined,
      takenAt: String(s["taken_at"]),
      expiresAt: String(s["expires_at"]),
    };
  };
  if (value?.["ok"] === false) {
    const error = value["error"] as { reason?: unknown; message?: unknown } | undefined;
    const reason = error?.reason;
    const known: readonly string[] = ["slot_invalid", "slot_forbidden", "slot_exhausted", "slot_lost", "slot_unavailable"];
    return {
      ok: false,
      op: value["op"] as SlotOperation | undefined,
      error: { reason: (typeof reason === "string" && known.includes(reason) ? reason : "slot_unavailable") as SlotReason, message: String(error?.message ?? "the hub refused the slot request") },
    };
  }
  switch (value?.["op"]) {
    case "take":
    case "renew":
      return { ok: true, op: value["op"], slot: slotOf(value["slot"]) };
    case "return":
      return { ok: true, op: "return", returned: value["returned"] === true };
    case "list":
      return { ok: true, op: "list", slots: Array.isArray(value["slots"]) ? value["slots"].map(slotOf) : [] };
    default:
      throw new SlotError("slot_unavailable", "the hub's slot answer has an unknown shape");
  }
}

function optionalIdentifier(value: unknown, field: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !IDENTIFIER.test(value)) {
    throw new SlotError("slot_invalid", `${field} must be an identifier: a lowercase letter, then lowercase letters, digits, '_' or '-', at most 64 characters`);
  }
  return value;
}

function leaseOf(value: unknown): number {
  if (value === undefined) return SLOT_LEASE.defaultSeconds;
  if (typeof value !== "number" || !Number.isInteger(value) || value < SLOT_LEASE.minSeconds || value > SLOT_LEASE.maxSeconds) {
    throw new SlotError("slot_invalid", `lease_seconds must be a whole number from ${SLOT_LEASE.minSeconds} to ${SLOT_LEASE.maxSeconds}`);
  }
  return value;
}
