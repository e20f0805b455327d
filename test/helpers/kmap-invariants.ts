/**
 * The invariants every Kmap fault scenario must leave behind, verified
 * through the generated clients only:
 *
 * - every submitted command has exactly one record, in submission order,
 *   terminal (COMMITTED or FAILED) with the outcome the model predicts;
 * - in the change log from position 0 each command has exactly one
 *   terminal event, its events follow the lifecycle, and the number of
 *   APPLYING events is its attempt count;
 * - Kweb history holds exactly one transaction per committed command (its
 *   provenance the idempotency id, its id the record's transaction id) and
 *   none for failed ones, in submission order, each verifying with the
 *   served public key, chained by previous_digest;
 * - every node is at the transaction of the last command that touched it.
 */
import { createHash } from "node:crypto";
import { equals } from "@bufbuild/protobuf";
import { CommandSchema, CommandState, type CommandRecord } from "../../gen/laneway/kmap/v1/command_pb.js";
import { CommandEventKind, type WatchCommandsResponse } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import type { Transaction } from "../../gen/laneway/kmap/v1/kmap_read_service_pb.js";
import { verifyTransaction } from "../../src/client/verify-transaction.js";
import { isTerminalEvent, listAllRecords, listAllTransactions, readChangeLog, waitUntilTerminal, type KmapClients } from "./kmap-clients.js";
import { submitPlanned, type KmapModel } from "./kmap-model.js";
export interface CommandReport {
  /** Final records by idempotency id. */
  readonly records: Map<string, CommandRecord>;
  /** Change-log events by idempotency id, in position order. */
  readonly events: Map<string, WatchCommandsResponse[]>;
  /** Every change-log event, in position order. */
  readonly log: WatchCommandsResponse[];
  /** Kweb history in commit order. */
  readonly transactions: Transaction[];
  /** The transaction of each committed command. */
  readonly transactionOf: Map<string, Transaction>;
}

const kindName = (kind: CommandEventKind) => CommandEventKind[kind] ?? String(kind);

/**
 * Submits a sentinel (an update of a missing node: it fails and adds no
 * transaction) after everything the model planned, waits until every
 * command is terminal, and checks every invariant listed at the top of this
 * file. Throws an Error naming the first violation; returns what it read.
 */
export async function verifyCommands(clients: KmapClients, model: KmapModel): Promise<CommandReport> {
  const sentinel = model.updateMissing("sentinel");
  const submitted = await submitPlanned(clients, sentinel);
  check(!submitted.existing, "the sentinel was new");
  const ids = model.planned.map((p) => p.id);
  await waitUntilTerminal(clients.commands, ids);
  const allRecords = await listAllRecords(clients.commands);
  const records = new Map(allRecords.map((r) => [r.submission!.idempotencyId, r] as const));

  // Records: exactly the planned commands, in planned order, with the predicted outcomes.
  check(allRecords.length === model.planned.length, `${allRecords.length} records for ${model.planned.length} submitted commands`);
  let previousSequence = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id);
    const what = `${planned.label} ${planned.id}`;
    check(record !== undefined, `no record for ${what}`);
    check(record.sequence > previousSequence, `${what} is out of submission order (sequence ${record.sequence} after ${previousSequence})`);
    previousSequence = record.sequence;
    check(equals(CommandSchema, record.submission!.command!, planned.request.command!), `${what}: the stored command differs from the submitted one`);
    check(sameMap(record.submission!.expectedTransactionIds, planned.request.expectedTransactionIds), `${what}: the stored expectations differ`);
    if (planned.expected === "committed") {
      check(record.state === CommandState.COMMITTED, `${what} should be COMMITTED, is ${CommandState[record.state]} (${record.error?.code}: ${record.error?.message})`);
      check(/^[0-9a-f]{32}$/.test(record.transactionId), `${what} is committed without a transaction id`);
      check(record.error === undefined, `${what} is committed with an error`);
    } else {
      check(record.state === CommandState.FAILED, `${what} should be FAILED (${planned.expected}), is ${CommandState[record.state]}`);
      check(record.error?.code === planned.expected, `${what} failed with ${record.error?.code}, expected ${planned.expected}`);
      check(record.transactionId === "", `${what} is failed but names transaction ${record.transactionId}`);
    }
  }

  // The change log.
  const log = await readChangeLog(clients.commands, sentinel.id);
  const events = new Map<string, WatchCommandsResponse[]>();
  let previousPosition = 0n;
  for (const event of log) {
    check(event.position > previousPosition, `change log positions do not increase (${event.position} after ${previousPosition})`);
    previousPosition = event.position;
    const id = event.record?.submission?.idempotencyId ?? "";
    check(records.has(id), `the change log names an unknown command ${id}`);
    events.set(id, [...(events.get(id) ?? []), event]);
  }
  let previousTerminal = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id)!;
    const own = events.get(planned.id) ?? [];
    const what = `${planned.label} ${planned.id}`;
    const kinds = own.map((e) => kindName(e.kind)).join(" ");
    check(own[0]?.kind === CommandEventKind.QUEUED, `${what}: the change log does not start with QUEUED: ${kinds}`);
    for (let i = 1; i < own.length; i++) {
      const kind = own[i]!.kind;
      const before = own[i - 1]!.kind;
      if (kind === CommandEventKind.APPLYING) {
        check(
          before === CommandEventKind.QUEUED || before === CommandEventKind.RETRY_SCHEDULED || before === CommandEventKind.RECOVERED,
          `${what}: APPLYING follows ${kindName(before)}: ${kinds}`,
        );
      } else {
        check(before === CommandEventKind.APPLYING, `${what}: ${kindName(kind)} follows ${kindName(before)}: ${kinds}`);
        check(kind !== CommandEventKind.QUEUED, `${what}: queued twice: ${kinds}`);
      }
    }
    const terminal = own.filter((e) => isTerminalEvent(e.kind));
    check(terminal.length === 1, `${what} has ${terminal.length} terminal events: ${kinds}`);
    const last = own.at(-1)!;
    check(isTerminalEvent(last.kind), `${what}: the last event is ${kindName(last.kind)}: ${kinds}`);
    check(last.record!.state === record.state && last.record!.transactionId === record.transactionId, `${what}: the terminal event disagrees with the record`);
    check(last.position > previousTerminal, `${what} reached its outcome before an earlier command did`);
    previousTerminal = last.position;
    const applying = own.filter((e) => e.kind === CommandEventKind.APPLYING).length;
    check(applying === record.attempts, `${what}: ${applying} APPLYING events but ${record.attempts} attempts: ${kinds}`);
  }

  // Kweb history.
  const transactions = await listAllTransactions(clients.read);
  const committed = model.planned.filter((p) => records.get(p.id)!.state === CommandState.COMMITTED);
  check(transactions.length === committed.length, `${transactions.length} transactions for ${committed.length} committed commands`);
  const transactionOf = new Map<string, Transaction>();
  transactions.forEach((transaction, index) => {
    check(transaction.sequence === BigInt(index + 1), `transaction ${index + 1} has sequence ${transaction.sequence}`);
    check(!transactionOf.has(transaction.provenance), `two transactions carry provenance ${transaction.provenance}`);
    transactionOf.set(transaction.provenance, transaction);
  });
  let previousTransaction = 0n;
  for (const planned of model.planned) {
    const record = records.get(planned.id)!;
    const transaction = transactionOf.get(planned.id);
    const what = `${planned.label} ${planned.id}`;
    if (record.state !== CommandState.COMMITTED) {
      check(transaction === undefined, `failed ${what} has transaction ${transaction?.id}`);
      continue;
    }
    check(transaction !== undefined, `committed ${what} has no transaction`);
    check(transaction.id === record.transactionId, `${what}: the record names ${record.transactionId}, history ${transaction.id}`);
    check(transaction.createdNodeId === record.createdNodeId, `${what}: created node ${record.createdNodeId} vs ${transaction.createdNodeId}`);
    check(equals(CommandSchema, transaction.command!, planned.request.command!), `${what}: the transaction's command differs from the submitted one`);
    check(transaction.sequence > previousTransaction, `${what} committed out of submission order`);
    previousTransaction = transaction.sequence;
    const byProvenance = await clients.read.listTransactions({ provenance: planned.id });
    check(
      byProvenance.transactions.length === 1 && byProvenance.transactions[0]!.id === transaction.id,
      `${what}: ListTransactions by provenance returns ${byProvenance.transactions.length} transactions`,
    );
  }

  // Signatures and the digest chain.
  const key = await clients.read.getSigningKey({});
  let previousPayload: Uint8Array | undefined;
  for (const transaction of transactions) {
    const problem = verifyTransaction(transaction, key.publicKey);
    check(problem === undefined, `transaction ${transaction.sequence} does not verify: ${problem}`);
    check(transaction.keyId === key.keyId, `transaction ${transaction.sequence} names key ${transaction.keyId}, served ${key.keyId}`);
    const expectedDigest = previousPayload === undefined ? Buffer.alloc(32) : createHash("sha256").update(previousPayload).digest();
    check(Buffer.from(transaction.previousDigest).equals(expectedDigest), `transaction ${transaction.sequence} does not chain to the one before it`);
    previousPayload = transaction.signedPayload;
  }

  return { records, events, log, transactions, transactionOf };
}

function sameMap(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a).sort();
  return keys.join() === Object.keys(b).sort().join() && keys.every((k) => a[k] === b[k]);
}

function check(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`Kmap command invariant violated: ${message}`);
}

/**
 * Checks the Kmap as the nodes show it: every node the model knows has, as
 * its visible transaction, the transaction of the last command predicted
 * to commit that touched it; and there are exactly as many nodes as
 * committed creations.
 */
export async function verifyNodes(clients: KmapClients, model: KmapModel, report: CommandReport): Promise<void> {
  model.observe(report.records.values());
  for (const nodeId of model.nodes) {
    const { node } = await clients.read.getNode({ nodeId });
    const last = model.lastCommandTouching(nodeId);
    const expected = report.records.get(last)!.transactionId;
    check(node?.visibleTransactionId === expected, `node ${nodeId} is at transaction ${node?.visibleTransactionId}, expected ${expected} (${model.get(last).label})`);
  }
  let count = 0;
  let pageToken = "";
  do {
    const page = await clients.read.listNodes({ pageSize: 50, pageToken });
    count += page.nodes.length;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const creations = model.planned.filter((p) => p.request.command?.operation.case === "createNode" && report.records.get(p.id)?.state === CommandState.COMMITTED);
  check(count === creations.length, `${count} nodes for ${creations.length} committed creations`);
  check(count === model.nodes.length, `${count} nodes, the model knows ${model.nodes.length}`);
}
