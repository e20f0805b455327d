import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import {
  CommandSchema,
  CreateNodeSchema,
  UpdateNodeSchema,
  type Command,
} from "../../../gen/laneway/kmap/v1/command_pb.js";
import type { ApplyOutcome, KwebManager } from "../../../src/kmap/kweb-manager.js";
import { EmbeddedKwebManager, KwebReader, type KwebNode, type KwebWorkerData } from "../../../src/kmap/kweb/index.js";

/**
 * Shared helpers for the embedded Kweb tests: real Kweb files in temporary
 * directories, command builders, and a manager whose worker can be made to
 * die on cue.
 */

export interface KwebPaths {
  readonly dir: string;
  readonly databasePath: string;
  readonly signingKeyPath: string;
  remove(): void;
}

export function kwebPaths(): KwebPaths {
  const dir = mkdtempSync(join(tmpdir(), "laneway-kweb-"));
  return {
    dir,
    databasePath: join(dir, "kmap", "kweb.sqlite"),
    signingKeyPath: join(dir, "kmap", "signing-key.pem"),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A fresh idempotency id. */
export function newIdempotencyId(): string {
  return randomBytes(16).toString("hex");
}

export const command = {
  createNode(init: Omit<MessageInitShape<typeof CreateNodeSchema>, "$typeName"> = {}): Command {
    return create(CommandSchema, {
      operation: { case: "createNode", value: create(CreateNodeSchema, { kind: "topic", title: "untitled", ...init }) },
    });
  },
  updateNode(nodeId: string, init: Omit<MessageInitShape<typeof UpdateNodeSchema>, "$typeName" | "nodeId">): Command {
    return create(CommandSchema, { operation: { case: "updateNode", value: create(UpdateNodeSchema, { nodeId, ...init }) } });
  },
  deleteNode(nodeId: string): Command {
    return create(CommandSchema, { operation: { case: "deleteNode", value: { nodeId } } });
  },
  linkNodes(fromId: string, toId: string, linkType = "cites"): Command {
    return create(CommandSchema, { operation: { case: "linkNodes", value: { fromId, toId, linkType } } });
  },
  unlinkNodes(fromId: string, toId: string, linkType = "cites"): Command {
    return create(CommandSchema, { operation: { case: "unlinkNodes", value: { fromId, toId, linkType } } });
  },
  moveNode(nodeId: string, newParentId = ""): Command {
    return create(CommandSchema, { operation: { case: "moveNode", value: { nodeId, newParentId } } });
  },
};

/** Applies a command with a fresh idempotency id. */
export function apply(
  manager: KwebManager,
  cmd: Command,
  expectedTransactionIds: Record<string, string> = {},
  idempotencyId = newIdempotencyId(),
): Promise<ApplyOutcome> {
  return manager.apply({ idempotencyId, command: cmd, expectedTransactionIds });
}

/** Applies a command that must commit; returns the outcome. */
export async function commit(
  manager: KwebManager,
  cmd: Command,
  expectedTransactionIds: Record<string, string> = {},
): Promise<Extract<ApplyOutcome, { kind: "committed" }>> {
  const outcome = await apply(manager, cmd, expectedTransactionIds);
  if (outcome.kind !== "committed") throw new Error(`expected a commit, got ${outcome.code}: ${outcome.message}`);
  return outcome;
}

/** Creates a node and returns its id. */
export async function createNode(manager: KwebManager, init: Parameters<typeof command.createNode>[0] = {}): Promise<string> {
  const outcome = await commit(manager, command.createNode(init));
  if (outcome.createdNodeId === undefined) throw new Error("create_node returned no node id");
  return outcome.createdNodeId;
}

/** Every node, read page by page. */
export function allNodes(reader: KwebReader): KwebNode[] {
  const nodes: KwebNode[] = [];
  let afterId: string | undefined;
  do {
    const page = reader.listNodes({ limit: 50, ...(afterId === undefined ? {} : { afterId }) });
    nodes.push(...page.nodes);
    afterId = page.nextAfterId;
  } while (afterId !== undefined);
  return nodes;
}

/** Node id → visible transaction id, for every node. */
export function visibleIds(reader: KwebReader): Map<string, string> {
  return new Map(allNodes(reader).map((node) => [node.id, node.visibleTransactionId]));
}

/** The ids whose visible transaction id differs between two snapshots (present in both). */
export function changedIds(before: Map<string, string>, after: Map<string, string>): string[] {
  return [...after].filter(([id, visible]) => before.has(id) && before.get(id) !== visible).map(([id]) => id).sort();
}

/** How many transactions the Kweb holds. */
export function transactionCount(reader: KwebReader): number {
  let count = 0;
  let afterSequence: number | undefined;
  do {
    const page = reader.listTransactions({ limit: 100, ...(afterSequence === undefined ? {} : { afterSequence }) });
    count += page.transactions.length;
    afterSequence = page.nextAfterSequence;
  } while (afterSequence !== undefined);
  return count;
}

/** The idempotency id on which the dying worker's thread exits before applying. */
export const EXIT_ON = "dead".repeat(8);
/** The idempotency id on which the dying worker's thread throws an uncaught error before applying. */
export const THROW_ON = "beef".repeat(8);
/** The idempotency id on which the dying worker's thread commits, then exits instead of answering. */
export const EXIT_AFTER_COMMIT_ON = "c0de".repeat(8);

/**
 * The real manager and worker, started behind a bootstrap that ends the
 * thread when it receives EXIT_ON, THROW_ON or EXIT_AFTER_COMMIT_ON: a
 * writer dying mid-apply.
 */
export class DyingWorkerManager extends EmbeddedKwebManager {
  protected override spawnWorker(workerData: KwebWorkerData): Worker {
    return new Worker(new URL("./fixtures/dying-kweb-worker-boot.mjs", import.meta.url), { workerData });
  }
}

/** Records whether a promise settled, without awaiting it. */
export function track<T>(promise: Promise<T>): { readonly settled: boolean; readonly promise: Promise<T> } {
  const state = { settled: false, promise };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}
