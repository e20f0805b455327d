/**
 * A member's side of account slots: requests on `slots.<swarm>.<hive>`
 * over the member's own NATS connection (the credential `hive join`
 * minted, connected with the inbox prefix `_INBOX.<hive>`), answered by
 * the hub's `hub-slots` queue group.
 *
 * A scoped member may request only on `slots.<swarm>.<hive>` for each of
 * its swarms, an unscoped one on `slots.*.<hive>`: the NATS server refuses
 * any other subject before the hub sees it (`slot_forbidden` here).
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { BrokerPermissionError, BrokerTimeoutError, BrokerUnavailableError, classifyNatsError } from "../nats/index.js";
import { SlotError } from "./errors.js";
import { slotRequestSubject } from "./stream-names.js";
import {
  decodeSlotAnswer,
  encodeSlotRequest,
  type AccountSlot,
  type SlotAnswer,
  type SlotHeldAnswer,
  type SlotListAnswer,
  type SlotReturnedAnswer,
} from "./slot-protocol.js";

export interface SlotClientOptions {
  /** The hive the credential was minted for (the member id). */
  readonly hive: string;
  /** The swarm the request is made from (the subject's swarm). */
  readonly swarm: string;
  /** How long a request waits for the hub (default 10 s). */
  readonly timeoutMs?: number;
}

export interface TakeSlotOptions {
  /** A slot account; default: the hub picks. */
  readonly account?: string;
  /** 1 to 3,600; default 300. */
  readonly leaseSeconds?: number;
  /** Names the process inside the hive that holds the slot (an identifier). */
  readonly holder?: string;
}

/** A renewal of a slot's lease. */
export interface RenewSlotParams {
  /** The slot id the take answered (`<account>.<index>.<generation>`, such as `claude-a.0.3`). */
  readonly slotId: string;
  /** The new lease from now, 1 to 3,600 seconds; default 300. */
  readonly leaseSeconds?: number;
}

/** A raw slot request (tests, diagnostics). */
export interface RequestSlotRawParams {
  /** The member's own connection (its inbox prefix `_INBOX.<hive>`). */
  readonly nc: NatsConnection;
  /** The request subject, normally `slots.<swarm>.<hive>`; the NATS server refuses one the credential does not grant. */
  readonly subject: string;
  /** The request body as sent, valid or not (the hub answers `slot_invalid` to a body it cannot parse, or one over its size limit). */
  readonly body: Uint8Array;
  /** How long the request waits for the hub, in milliseconds; default 10 000. */
  readonly timeoutMs?: number;
}

export class SlotClient {
  readonly #nc: NatsConnection;
  readonly #o: SlotClientOptions;

  constructor(nc: NatsConnection, options: SlotClientOptions) {
    this.#nc = nc;
    this.#o = options;
  }

  /** `slots.<swarm>.<hive>`. */
  get subject(): string {
    return slotRequestSubject(this.#o.swarm, this.#o.hive);
  }

  /** Takes a slot; `slot_exhausted` when none is free. */
  async take(options: TakeSlotOptions = {}): Promise<AccountSlot> {
    const answer = await this.#request({
      op: "take",
      hive: this.#o.hive,
      ...(options.account === undefined ? {} : { account: options.account }),
      ...(options.leaseSeconds === undefined ? {} : { lease_seconds: options.leaseSeconds }),
      ...(options.holder === undefined ? {} : { holder: options.holder }),
    });
    return (answer as SlotHeldAnswer).slot;
  }

  /** Extends the lease of a slot this hive holds; `slot_lost` once it ended. */
  async renew(params: RenewSlotParams): Promise<AccountSlot> {
    const answer = await this.#request({
      op: "renew",
      hive: this.#o.hive,
      slot: params.slotId,
      ...(params.leaseSeconds === undefined ? {} : { lease_seconds: params.leaseSeconds }),
    });
    return (answer as SlotHeldAnswer).slot;
  }

  /** Returns a slot; false when the hive no longer held it (nothing changed). */
  async return(slotId: string): Promise<boolean> {
    const answer = await this.#request({ op: "return", hive: this.#o.hive, slot: slotId });
    return (answer as SlotReturnedAnswer).returned;
  }

  /** The hive's live slots, in every swarm. */
  async list(): Promise<readonly AccountSlot[]> {
    const answer = await this.#request({ op: "list", hive: this.#o.hive });
    return (answer as SlotListAnswer).slots;
  }

  /**
   * Sends any body on this client's subject (the hub refuses a body that
   * names another hive). Throws SlotError for every refusal.
   */
  async #request(body: Record<string, unknown>): Promise<SlotAnswer> {
    let reply;
    try {
      reply = await this.#nc.request(this.subject, encodeSlotRequest(body), { timeout: this.#o.timeoutMs ?? 10_000 });
    } catch (error) {
      const failure = classifyNatsError(error);
      if (failure instanceof BrokerPermissionError) {
        throw new SlotError("slot_forbidden", `the NATS server refused the slot request on ${this.subject}: the credential does not grant it`, { cause: error });
      }
      if (failure instanceof BrokerUnavailableError && failure.reason === "no_responders") {
        throw new SlotError("slot_unavailable", "no hub answers account slot requests", { cause: error });
      }
      if (failure instanceof BrokerTimeoutError) throw new SlotError("slot_unavailable", "the hub did not answer the slot request in time", { cause: error });
      throw new SlotError("slot_unavailable", "the slot request could not be sent", { cause: error });
    }
    const answer = decodeSlotAnswer(reply.data);
    if (!answer.ok) throw new SlotError(answer.error.reason, answer.error.message);
    return answer;
  }
}

/** Sends a raw request body on `slots.<swarm>.<hive>` and returns the hub's answer as is (tests, diagnostics). */
export async function requestSlotRaw(params: RequestSlotRawParams): Promise<SlotAnswer> {
  const { nc, subject, body, timeoutMs = 10_000 } = params;
  const reply = await nc.request(subject, body, { timeout: timeoutMs });
  return decodeSlotAnswer(reply.data);
}
