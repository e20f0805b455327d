/**
 * The one command every kmap-lane measurement submits, in the three forms
 * the benchmark's processes need: the Connect JSON request body (with an id
 * placeholder the load generator fills per request), the typed fields for
 * the generated client, and the text the lane stores for it (the raw
 * SQLite baseline inserts rows of exactly that shape and size).
 *
 * A create_node with a short title and a body sized so that the stored
 * canonical submission is about 300 bytes, as in the raw baseline of
 * /work/shared/FACTS.md.
 */

export const ID_PLACEHOLDER = "{{idempotency_id}}";

const title = "Benchmark node";
const kind = "topic";
const attributes = { bench: "kmap-lane" };
// Sized so that storedSubmission(id) is 300 bytes.
const body = "lorem ipsum dolor sit amet ".repeat(6).slice(0, 104);

/** The Connect JSON body of SubmitCommand, with ID_PLACEHOLDER for the idempotency id. */
export const submitBodyTemplate = JSON.stringify({
  idempotencyId: ID_PLACEHOLDER,
  command: { createNode: { kind, title, body, attributes } },
});

/** The same command for the generated client (`create(CommandSchema, …)` shape). */
export const benchCreateNode = { kind, title, body, attributes } as const;

/**
 * The canonical submission text the lane stores for an idempotency id
 * (sorted keys, proto field names; see src/kmap/submission.ts).
 */
export function storedSubmission(idempotencyId: string): string {
  return JSON.stringify({
    command: { create_node: { attributes, body, kind, title } },
    expected_transaction_ids: {},
    idempotency_id: idempotencyId,
  });
}
