import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { CommandState, createLanewayTransport, KmapCommandService, KmapReadService, verifyTransaction } from "laneway/client";
import { TransactionSchema } from "laneway/gen/laneway/kmap/v1/kmap_read_service_pb.js";

// A Kmap command from submission to its signed transaction: the operator
// submits a createNode command, watches the command's changes until it is
// Committed, reads the transaction it committed and verifies its Ed25519
// signature with the served public key alone.
const { transport, close } = createLanewayTransport({
  baseUrl: process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600",
  token: process.env.LANEWAY_ADMIN_TOKEN,
});
const commands = createClient(KmapCommandService, transport);
const reads = createClient(KmapReadService, transport);

// The idempotency id names the command: submitting it again returns the same record.
const idempotencyId = randomBytes(16).toString("hex");
const submitted = await commands.submitCommand({
  idempotencyId,
  command: { operation: { case: "createNode", value: { kind: "topic", title: "Glaciers", attributes: { region: "alps" } } } },
});
console.log(`submitted: ${CommandState[submitted.record!.state]}`);

// Watch from just before the command's Queued change, only this command.
let record = submitted.record!;
for await (const change of commands.watchCommands({ afterPosition: submitted.position - 1n, idempotencyId })) {
  record = change.record!;
  if (record.state === CommandState.COMMITTED || record.state === CommandState.FAILED) break;
}
console.log(`watched to: ${CommandState[record.state]}`);

const { transaction } = await reads.getTransaction({ transactionId: record.transactionId });
const key = await reads.getSigningKey({});
console.log(`its transaction has the idempotency id as provenance: ${transaction!.provenance === idempotencyId}`);
console.log(`signature: ${verifyTransaction(transaction!, key.publicKey) ?? "verified"}`);

// Any change to what was signed fails verification.
const forged = create(TransactionSchema, { ...transaction!, touchedNodeIds: [...transaction!.touchedNodeIds, "n".repeat(32)] });
console.log(`with a forged field: ${verifyTransaction(forged, key.publicKey) === undefined ? "verified" : "refused"}`);

close();
