/**
 * The hub's side of account slots: it subscribes to `slots.*.*` in the
 * `hub-slots` queue group (so several hubs share the requests) on its own
 * connection in the hive account, and answers each request from the slot
 * ledger.
 *
 * The subject is the member's identity: the NATS server lets a member
 * publish only on `slots.<swarm>.<its own id>` (scoped: for each of its
 * swarms; unscoped: any swarm). A body that names another hive than the
 * subject is refused with `slot_forbidden` and logged — the line names the
 * swarm, the subject's hive, the hive the body named and the operation,
 * never a credential. A subject hive that is not a member of this hub (it
 * was retired) is refused the same way.
 *
 * The responder follows the hub's connection: after a reconnect it
 * subscribes again on the new connection.
 */
import type { Msg, Subscription } from "@nats-io/transport-node";
import { safeErrorFields, type Logger } from "../../log/logger.js";
import type { BrokerConnection } from "../../nats/index.js";
import { SlotError } from "../../swarm-bus/index.js";
import {
  encodeSlotAnswer,
  HUB_SLOTS_QUEUE_GROUP,
  isMemberId,
  isSwarmName,
  loggableHive,
  namedInRequest,
  parseSlotRequest,
  parseSlotSubject,
  type SlotAnswer,
  type SlotOperation,
  type SlotRequest,
} from "../../swarm-bus/internal.js";
import { SlotLedger } from "./slot-ledger.js";
import type { SlotPolicy } from "./slot-policy.js";
import { SlotStore } from "./slot-store.js";

/** The subject the hub subscribes to: every swarm, every hive. */
export const SLOT_REQUESTS_SUBJECT = "slots.*.*";

export interface SlotResponderOptions {
  /** The hub's own connection (hive account). */
  readonly broker: BrokerConnection;
  readonly policy: SlotPolicy;
  /** Whether a hive (member id) is a current member of this hub. */
  readonly isMember: (hive: string) => boolean;
  readonly log: Logger;
  readonly replicas?: number;
  /** Unix milliseconds; tests may pin it. */
  readonly clock?: () => number;
}

export class SlotResponder {
  readonly #o: SlotResponderOptions;
  readonly #ledger: SlotLedger;
  readonly #store: SlotStore;
  readonly #inFlight = new Set<Promise<void>>();
  #subscription: { generation: number; sub: Subscription } | undefined;
  #unsubscribe: (() => void) | undefined;
  #closed = false;

  private constructor(options: SlotResponderOptions) {
    this.#o = options;
    this.#store = new SlotStore({ broker: options.broker, ...(options.replicas === undefined ? {} : { replicas: options.replicas }) });
    this.#ledger = new SlotLedger({ store: this.#store, policy: options.policy, ...(options.clock ? { clock: options.clock } : {}) });
  }

  /** Starts answering (now if the hub is connected, otherwise once it connects). */
  static start(options: SlotResponderOptions): SlotResponder {
    const responder = new SlotResponder(options);
    responder.#unsubscribe = options.broker.onStateChange((change) => {
      if (change.state === "connected") responder.#subscribe();
    });
    if (options.broker.state === "connected") responder.#subscribe();
    return responder;
  }

  /** Whether a subscription is live on the current connection. */
  get listening(): boolean {
    return this.#subscription !== undefined && this.#subscription.generation === this.#o.broker.generation && !this.#subscription.sub.isClosed();
  }

  /** Stops answering: unsubscribes, then waits for the requests being answered. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#unsubscribe?.();
    const current = this.#subscription;
    this.#subscription = undefined;
    if (current && !current.sub.isClosed()) current.sub.unsubscribe();
    await Promise.allSettled([...this.#inFlight]);
  }

  #subscribe(): void {
    if (this.#closed) return;
    const broker = this.#o.broker;
    if (this.listening) return;
    let nc;
    try {
      nc = broker.connection();
    } catch {
      return; // the next "connected" subscribes
    }
    const sub = nc.subscribe(SLOT_REQUESTS_SUBJECT, {
      queue: HUB_SLOTS_QUEUE_GROUP,
      callback: (error, msg) => {
        if (error) {
          this.#o.log.warn("the slot request subscription failed; it is renewed on the next connection", safeErrorFields(error));
          return;
        }
        const answering = this.#answer(msg).finally(() => this.#inFlight.delete(answering));
        this.#inFlight.add(answering);
      },
    });
    this.#subscription = { generation: broker.generation, sub };
    // Create the buckets now, so the first request does not pay for it.
    this.#store.ensureBuckets().catch((error: unknown) =>
      this.#o.log.warn("the account slot buckets cannot be created yet; slot requests answer slot_unavailable until they can", safeErrorFields(error)),
    );
    this.#o.log.debug("answering account slot requests", { subject: SLOT_REQUESTS_SUBJECT, queue: HUB_SLOTS_QUEUE_GROUP });
  }

  async #answer(msg: Msg): Promise<void> {
    const answer = await this.#decide(msg);
    if (!msg.reply) return; // a publish without a reply subject: nothing to answer
    try {
      msg.respond(encodeSlotAnswer(answer));
    } catch (error) {
      this.#o.log.warn("a slot answer could not be sent", safeErrorFields(error));
    }
  }

  async #decide(msg: Msg): Promise<SlotAnswer> {
    let op: SlotOperation | undefined;
    try {
      const subject = parseSlotSubject(msg.subject);
      if (subject === undefined || !isSwarmName(subject.swarm) || !isMemberId(subject.hive)) {
        throw new SlotError("slot_invalid", "slot requests go to slots.<swarm>.<hive>");
      }
      // Another hive named is refused (and logged) first, however malformed the rest of the body.
      const named = namedInRequest(msg.data);
      op = named.op;
      if (named.hive !== undefined && named.hive !== subject.hive) {
        this.#o.log.warn("slot request refused: its body names another hive than the credential's", {
          swarm: subject.swarm,
          hive: subject.hive,
          namedHive: loggableHive(named.hive),
          op: op ?? "(not an operation)",
        });
        throw new SlotError("slot_forbidden", `the request came from hive ${subject.hive} and names another hive; a hive takes, renews and returns only its own slots`);
      }
      const request: SlotRequest = parseSlotRequest(msg.data);
      op = request.op;
      if (!this.#o.isMember(subject.hive)) {
        this.#o.log.warn("slot request refused: the hive is not a member of this hub", { swarm: subject.swarm, hive: subject.hive, op });
        throw new SlotError("slot_forbidden", `hive ${subject.hive} is not a member of this hub`);
      }
      switch (request.op) {
        case "take": {
          const slot = await this.#ledger.take({ ...request, swarm: subject.swarm });
          this.#o.log.debug("account slot taken", { swarm: subject.swarm, hive: subject.hive, slot: slot.id });
          return { ok: true, op: "take", slot };
        }
        case "renew":
          return { ok: true, op: "renew", slot: await this.#ledger.renew(request) };
        case "return": {
          const returned = await this.#ledger.return(request);
          this.#o.log.debug("account slot returned", { swarm: subject.swarm, hive: subject.hive, returned });
          return { ok: true, op: "return", returned };
        }
        case "list":
          return { ok: true, op: "list", slots: await this.#ledger.list(request.hive) };
      }
    } catch (error) {
      if (error instanceof SlotError) {
        if (error.reason === "slot_unavailable") this.#o.log.warn("a slot request could not be answered", safeErrorFields(error));
        return { ok: false, op, error: { reason: error.reason, message: error.message } };
      }
      this.#o.log.error("a slot request failed unexpectedly", safeErrorFields(error));
      return { ok: false, op, error: { reason: "slot_unavailable", message: "the hub could not answer the slot request; retry" } };
    }
  }
}
