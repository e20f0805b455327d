import type {
  Command,
  CreateNode,
  DeleteNode,
  LinkNodes,
  MoveNode,
  UnlinkNodes,
  UpdateNode,
} from "../../../gen/laneway/kmap/v1/command_pb.js";
import { canonicalJson } from "../../encoding/canonical-json.js";
import { KwebRejection, missingNode } from "./kweb-rejection.js";
import type { GraphNode, KwebGraph } from "./kweb-graph.js";
import { newKwebId } from "./kweb-ids.js";

/**
 * What each Kmap operation does to the graph. Each function checks the
 * operation against the current graph, throwing KwebRejection when it
 * cannot apply (the writer rolls back), and otherwise changes the graph and
 * returns the nodes it touched. The writer then stamps every touched node
 * that still exists with the new transaction id.
 *
 * The command lane validates the command's shape (ids, identifiers, sizes)
 * before it gets here; these checks are the ones that depend on the graph,
 * plus the few shape rules a graph invariant relies on.
 */

/** A node keeps at most this many attributes. */
export const MAX_ATTRIBUTES = 64;

/** What an applied operation changed. */
export interface OperationEffect {
  /** Every node it changed, deleted ones included (unsorted, may repeat). */
  readonly touched: readonly string[];
  /** The node a create_node created. */
  readonly createdNodeId?: string;
}

/** Where an operation runs: the graph, the new transaction's id and its time. */
export interface OperationContext {
  readonly graph: KwebGraph;
  readonly transactionId: string;
  readonly at: number;
}

function requireNode(graph: KwebGraph, id: string, role?: string): GraphNode {
  const node = graph.node(id);
  if (node === undefined) throw missingNode(id, role);
  return node;
}

function attributesOf(node: GraphNode): Map<string, string> {
  return new Map(Object.entries(JSON.parse(node.attributes) as Record<string, string>));
}

function attributesText(attributes: ReadonlyMap<string, string>): string {
  return canonicalJson(Object.fromEntries(attributes));
}

function plural(count: number, one: string, many: string): string {
  return `${count} ${count === 1 ? one : many}`;
}

function createNode(context: OperationContext, operation: CreateNode): OperationEffect {
  const { graph } = context;
  if (operation.parentId !== "") requireNode(graph, operation.parentId, "parent node");
  const attributes = new Map(Object.entries(operation.attributes));
  if (attributes.size > MAX_ATTRIBUTES) {
    throw new KwebRejection("invalid_input", `a node keeps at most ${MAX_ATTRIBUTES} attributes; the command sets ${attributes.size}`);
  }
  const id = newKwebId();
  graph.insertNode({
    id,
    kind: operation.kind,
    title: operation.title,
    body: operation.body,
    attributes: attributesText(attributes),
    parentId: operation.parentId === "" ? null : operation.parentId,
    transactionId: context.transactionId,
    at: context.at,
  });
  return { touched: [id], createdNodeId: id };
}

function updateNode(context: OperationContext, operation: UpdateNode): OperationEffect {
  const { graph } = context;
  const node = requireNode(graph, operation.nodeId);
  const removed = new Set(operation.removeAttributes);
  for (const key of Object.keys(operation.setAttributes).sort()) {
    if (removed.has(key)) throw new KwebRejection("invalid_input", `attribute "${key}" cannot be both set and removed`);
  }
  const attributes = attributesOf(node);
  for (const key of removed) attributes.delete(key);
  for (const [key, value] of Object.entries(operation.setAttributes)) attributes.set(key, value);
  if (attributes.size > MAX_ATTRIBUTES) {
    throw new KwebRejection(
      "invalid_input",
      `node ${node.id} would have ${attributes.size} attributes; a node keeps at most ${MAX_ATTRIBUTES}`,
    );
  }
  graph.updateFields(node.id, {
    kind: operation.kind ?? node.kind,
    title: operation.title ?? node.title,
    body: operation.body ?? node.body,
    attributes: attributesText(attributes),
  });
  return { touched: [node.id] };
}

function deleteNode(context: OperationContext, operation: DeleteNode): OperationEffect {
  const { graph } = context;
  const node = requireNode(graph, operation.nodeId);
  const children = graph.childCount(node.id);
  if (children > 0) {
    throw new KwebRejection("invalid_input", `node ${node.id} has ${plural(children, "child", "children")}: move or delete them first`);
  }
  const otherEnds = graph.linksTouching(node.id).map((link) => (link.from_id === node.id ? link.to_id : link.from_id));
  graph.deleteLinksTouching(node.id);
  graph.deleteNode(node.id);
  return { touched: [node.id, ...otherEnds] };
}

function linkNodes(context: OperationContext, operation: LinkNodes): OperationEffect {
  const { graph } = context;
  requireNode(graph, operation.fromId);
  requireNode(graph, operation.toId);
  if (operation.fromId === operation.toId) {
    throw new KwebRejection("invalid_input", `a node cannot link to itself (node ${operation.fromId})`);
  }
  if (graph.hasLink(operation.fromId, operation.linkType, operation.toId)) {
    throw new KwebRejection(
      "invalid_input",
      `node ${operation.fromId} already has a "${operation.linkType}" link to node ${operation.toId}`,
    );
  }
  graph.insertLink(operation.fromId, operation.linkType, operation.toId, context.transactionId);
  return { touched: [operation.fromId, operation.toId] };
}

function unlinkNodes(context: OperationContext, operation: UnlinkNodes): OperationEffect {
  const { graph } = context;
  requireNode(graph, operation.fromId);
  requireNode(graph, operation.toId);
  if (!graph.hasLink(operation.fromId, operation.linkType, operation.toId)) {
    throw new KwebRejection("invalid_input", `node ${operation.fromId} has no "${operation.linkType}" link to node ${operation.toId}`);
  }
  graph.deleteLink(operation.fromId, operation.linkType, operation.toId);
  return { touched: [operation.fromId, operation.toId] };
}

function moveNode(context: OperationContext, operation: MoveNode): OperationEffect {
  const { graph } = context;
  const node = requireNode(graph, operation.nodeId);
  const newParent = operation.newParentId === "" ? null : operation.newParentId;
  if (newParent !== null) {
    requireNode(graph, newParent, "parent node");
    if (newParent === node.id) throw new KwebRejection("invalid_input", `cannot move node ${node.id} under itself`);
    // Walk up from the new parent: meeting the node means it is a descendant.
    const seen = new Set<string>();
    for (let ancestor: string | null | undefined = graph.parentOf(newParent); ancestor; ancestor = graph.parentOf(ancestor)) {
      if (ancestor === node.id) {
        throw new KwebRejection("invalid_input", `cannot move node ${node.id} under its own descendant ${newParent}`);
      }
      if (seen.has(ancestor)) break;
      seen.add(ancestor);
    }
  }
  graph.setParent(node.id, newParent);
  return { touched: [node.id] };
}

/** Applies a command's operation to the graph, or throws KwebRejection. */
export function applyOperation(context: OperationContext, command: Command): OperationEffect {
  const operation = command.operation;
  switch (operation.case) {
    case "createNode":
      return createNode(context, operation.value);
    case "updateNode":
      return updateNode(context, operation.value);
    case "deleteNode":
      return deleteNode(context, operation.value);
    case "linkNodes":
      return linkNodes(context, operation.value);
    case "unlinkNodes":
      return unlinkNodes(context, operation.value);
    case "moveNode":
      return moveNode(context, operation.value);
    case undefined:
      throw new KwebRejection("invalid_input", "the command has no operation");
  }
}
