import { CommandSchema, type Command } from "../../gen/laneway/kmap/v1/command_pb.js";
import { contractValidator } from "../validation/contract-validator.js";
import { canonicalCommand } from "./canonical-command.js";
import { KmapError } from "./errors.js";
import { canonicalSubmission, type Submission } from "./stored-submission.js";

export { parseSubmission, type Submission } from "./stored-submission.js";

/**
 * Validation of what an administrator submits (a Submission, see
 * stored-submission.ts).
 *
 * The lane validates canonical durable identifiers itself, with messages
 * that say exactly what is wrong (length, case, non-hex, a pending id), and
 * the rest of the command against the contract's own protovalidate rules,
 * so the library and the RPC edge accept exactly the same commands.
 */

/** The largest canonical command text the lane accepts. */
export const MAX_COMMAND_BYTES = 262_144;
/** The most expectations one submission may carry. */
export const MAX_EXPECTATIONS = 64;

const hex32 = /^[0-9a-f]{32}$/;

/**
 * Pending identifiers name nodes that do not exist yet (a client's
 * placeholder such as `pending:new-topic`, to be replaced by the canonical
 * id Kweb assigns). They are invalid at this administrator boundary: a
 * command names existing nodes only.
 */
const pendingPrefix = /^pending[:_-]/i;

function describeHexProblem(value: string): string | undefined {
  if (value.length !== 32) return `must be 32 characters, got ${value.length}`;
  if (/[A-F]/.test(value) && /^[0-9a-fA-F]{32}$/.test(value)) return "must be lowercase";
  if (!hex32.test(value)) return "must contain only hexadecimal characters 0-9 and a-f";
  return undefined;
}

/** Checks a 32-character lowercase hexadecimal idempotency id. */
export function checkIdempotencyId(value: string): void {
  const problem = describeHexProblem(value);
  if (problem) throw new KmapError("invalid_input", `idempotency_id ${problem}`);
}

/** Checks a canonical node id; pending and malformed ids are refused with distinct messages. */
export function checkNodeId(field: string, value: string): void {
  if (pendingPrefix.test(value)) {
    throw new KmapError("invalid_input", `${field} is a pending identifier; commands must name existing nodes by their canonical id`);
  }
  const problem = describeHexProblem(value);
  if (problem) throw new KmapError("invalid_input", `${field} is not a canonical node id: it ${problem}`);
}

/** The node ids a command names, with the field each came from. */
function nodeIdsOf(command: Command): [string, string][] {
  const op = command.operation;
  switch (op.case) {
    case "createNode":
      return op.value.parentId ? [["create_node.parent_id", op.value.parentId]] : [];
    case "updateNode":
      return [["update_node.node_id", op.value.nodeId]];
    case "deleteNode":
      return [["delete_node.node_id", op.value.nodeId]];
    case "linkNodes":
      return [
        ["link_nodes.from_id", op.value.fromId],
        ["link_nodes.to_id", op.value.toId],
      ];
    case "unlinkNodes":
      return [
        ["unlink_nodes.from_id", op.value.fromId],
        ["unlink_nodes.to_id", op.value.toId],
      ];
    case "moveNode":
      return op.value.newParentId
        ? [
            ["move_node.node_id", op.value.nodeId],
            ["move_node.new_parent_id", op.value.newParentId],
          ]
        : [["move_node.node_id", op.value.nodeId]];
    case undefined:
      return [];
  }
}

/**
 * Validates a submission and returns its canonical text: the bytes the lane
 * stores and compares resubmissions by. Throws KmapError("invalid_input").
 */
export function validateSubmission(submission: Submission): string {
  checkIdempotencyId(submission.idempotencyId);
  if (submission.command.operation.case === undefined) {
    throw new KmapError("invalid_input", "the command is empty: set exactly one operation");
  }
  for (const [field, id] of nodeIdsOf(submission.command)) checkNodeId(field, id);
  const expectations = Object.entries(submission.expectedTransactionIds);
  if (expectations.length > MAX_EXPECTATIONS) {
    throw new KmapError("invalid_input", `at most ${MAX_EXPECTATIONS} expected transaction ids, got ${expectations.length}`);
  }
  for (const [node, transaction] of expectations) {
    checkNodeId(`expected_transaction_ids key ${JSON.stringify(node.slice(0, 64))}`, node);
    const problem = describeHexProblem(transaction);
    if (problem) throw new KmapError("invalid_input", `expected transaction id for node ${node} ${problem}`);
  }
  const result = contractValidator.validate(CommandSchema, submission.command);
  if (result.kind === "invalid") throw new KmapError("invalid_input", `command: ${result.error.message}`);
  if (result.kind === "error") throw new KmapError("invalid_input", "command: it cannot be validated");
  const command = canonicalCommand(submission.command);
  const bytes = Buffer.byteLength(command, "utf8");
  if (bytes > MAX_COMMAND_BYTES) {
    throw new KmapError("invalid_input", `the command is ${bytes} bytes serialized; the limit is ${MAX_COMMAND_BYTES}`);
  }
  return canonicalSubmission(submission.idempotencyId, command, submission.expectedTransactionIds);
}

