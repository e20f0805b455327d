/**
 * A small model of the Kmap commands a fault test submits, with the outcome
 * each must end with.
 *
 * The model predicts outcomes from submission order alone: an update that
 * quotes a node's transaction id commits only when no command submitted
 * before it (and predicted to commit) touched that node since. Transaction
 * and node ids are random, so the model only quotes ids it has observed in
 * committed records.
 */
import { randomBytes } from "node:crypto";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { CommandSchema, CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import {
  SubmitCommandRequestSchema,
  type SubmitCommandRequest,
  type SubmitCommandResponse,
} from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import type { KmapClients } from "./kmap-clients.js";
/** How a planned command must end. */
export type ExpectedOutcome = "committed" | "missing_node" | "stale_revision";

export interface PlannedCommand {
  readonly id: string;
  /** What the command is, for failure messages. */
  readonly label: string;
  readonly request: SubmitCommandRequest;
  readonly expected: ExpectedOutcome;
}

/**
 * Which transaction id an update quotes for a node: none, the newest one
 * the test has observed (valid unless a command submitted earlier and still
 * unapplied will change the node), or the node's creation (stale once the
 * node changed).
 */
export type Quote = "none" | "latest-observed" | "creation";

export class KmapModel {
  /** Every command, in the order it is (to be) submitted. */
  readonly planned: PlannedCommand[] = [];
  readonly #byId = new Map<string, PlannedCommand>();
  /** Node id → ids of the commands predicted to commit that touch it, oldest first (its creation first). */
  readonly #history = new Map<string, string[]>();
  /** Command id → its transaction id, once observed committed. */
  readonly #transactions = new Map<string, string>();
  #counter = 0;

  constructor(private readonly newId: () => string = () => randomBytes(16).toString("hex")) {}

  /** Nodes whose creation the test has observed. */
  get nodes(): string[] {
    return [...this.#history.keys()];
  }

  /** The last command predicted to commit that touches `nodeId` (its creation at first). */
  lastCommandTouching(nodeId: string): string {
    const history = this.#history.get(nodeId);
    if (!history) throw new Error(`the model does not know node ${nodeId}`);
    return history.at(-1)!;
  }

  get(id: string): PlannedCommand {
    const planned = this.#byId.get(id);
    if (!planned) throw new Error(`no planned command ${id}`);
    return planned;
  }

  create(label = "create"): PlannedCommand {
    const n = ++this.#counter;
    return this.#plan(label, { operation: { case: "createNode", value: { kind: "topic", title: `node ${n}`, attributes: { n: String(n) } } } }, {}, "committed");
  }

  update(nodeId: string, quote: Quote = "none", label = `update (${quote})`): PlannedCommand {
    const { expectations, stale } = this.#quote([nodeId], quote);
    const n = ++this.#counter;
    const planned = this.#plan(
      label,
      { operation: { case: "updateNode", value: { nodeId, title: `title ${n}`, setAttributes: { rev: String(n) } } } },
      expectations,
      stale ? "stale_revision" : "committed",
    );
    if (!stale) this.#touch([nodeId], planned.id);
    return planned;
  }

  /** A link with a link type never used before (so it can never be a duplicate). */
  link(fromId: string, toId: string, quote: Quote = "none", label = `link (${quote})`): PlannedCommand {
    if (fromId === toId) throw new Error("the model links distinct nodes only");
    const { expectations, stale } = this.#quote([fromId, toId], quote);
    const n = ++this.#counter;
    const planned = this.#plan(
      label,
      { operation: { case: "linkNodes", value: { fromId, toId, linkType: `rel${n}` } } },
      expectations,
      stale ? "stale_revision" : "committed",
    );
    if (!stale) this.#touch([fromId, toId], planned.id);
    return planned;
  }

  /** An update of a node that never existed: fails with missing_node. */
  updateMissing(label = "update of a missing node"): PlannedCommand {
    const n = ++this.#counter;
    return this.#plan(label, { operation: { case: "updateNode", value: { nodeId: this.newId(), title: `title ${n}` } } }, {}, "missing_node");
  }

  /** Learns transaction ids and created nodes from records (any state). */
  observe(records: Iterable<CommandRecord>): void {
    for (const record of records) {
      if (record.state !== CommandState.COMMITTED) continue;
      const id = record.submission?.idempotencyId ?? "";
      const planned = this.#byId.get(id);
      if (!planned) continue;
      this.#transactions.set(id, record.transactionId);
      if (planned.request.command?.operation.case === "createNode" && record.createdNodeId && !this.#history.has(record.createdNodeId)) {
        this.#history.set(record.createdNodeId, [id]);
      }
    }
  }

  #plan(label: string, command: MessageInitShape<typeof CommandSchema>, expectations: Record<string, string>, expected: ExpectedOutcome): PlannedCommand {
    const id = this.newId();
    const request = create(SubmitCommandRequestSchema, { idempotencyId: id, command, expectedTransactionIds: expectations });
    const planned = { id, label, request, expected };
    this.planned.push(planned);
    this.#byId.set(id, planned);
    return planned;
  }

  #quote(nodeIds: readonly string[], quote: Quote): { expectations: Record<string, string>; stale: boolean } {
    const expectations: Record<string, string> = {};
    let stale = false;
    if (quote === "none") {
      for (const nodeId of nodeIds) if (!this.#history.has(nodeId)) throw new Error(`the model does not know node ${nodeId}`);
      return { expectations, stale };
    }
    for (const nodeId of nodeIds) {
      const history = this.#history.get(nodeId);
      if (!history) throw new Error(`the model does not know node ${nodeId}`);
      const version = quote === "creation" ? history[0]! : history.findLast((id) => this.#transactions.has(id))!;
      expectations[nodeId] = this.#transactions.get(version)!;
      if (history.at(-1) !== version) stale = true;
    }
    return { expectations, stale };
  }

  #touch(nodeIds: readonly string[], commandId: string): void {
    for (const nodeId of nodeIds) this.#history.get(nodeId)!.push(commandId);
  }
}

/** Submits a planned command (optionally abortable). */
export function submitPlanned(clients: KmapClients, planned: PlannedCommand, signal?: AbortSignal): Promise<SubmitCommandResponse> {
  return clients.commands.submitCommand(planned.request, { ...(signal ? { signal } : {}), timeoutMs: 30_000 });
}
