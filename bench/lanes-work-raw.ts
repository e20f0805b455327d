/**
 * The raw JetStream baseline of `npm run bench lanes-work`, run as its own
 * process: a durable pull consumer (explicit acks) on a stream configured
 * like the lane's stream, holding exactly `items` new messages (stream
 * sequences `from`..`to`) that the orchestrator published before starting
 * it. It works until every one is acknowledged; every ack is a confirmed
 * one (`ackAck`: it waits for the server's answer, as Laneway's Ack waits
 * for its ledger write and BullMQ's completion for its Redis script).
 *
 * - `single` (the equivalent of Laneway's Claim + Ack loops):
 *   `concurrency` loops, each fetching one message (`consumer.next`) and
 *   acknowledging it.
 * - `batch` (the equivalent of the participant library): one loop fetches
 *   as many messages as there are free handler slots (`consumer.fetch`, at
 *   most `concurrency`), and each message's handler (which does nothing)
 *   acknowledges it on its own, `concurrency` at a time.
 *
 * Checked here: every sequence from..to was delivered exactly once, and
 * every ack was confirmed. The orchestrator then checks the consumer has
 * nothing pending, unacknowledged or redelivered.
 *
 * Usage (argv[2] is JSON): {mode, url, stream, consumer, from, to, concurrency}
 * Prints {items, seconds, cpuMicros, pulls, errors}.
 */
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

interface Spec {
  mode: "single" | "batch";
  url: string;
  stream: string;
  consumer: string;
  from: number;
  to: number;
  concurrency: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const items = spec.to - spec.from + 1;
const nc = await connect({ servers: spec.url, name: "bench-raw-consumer" });
const consumer = await jetstream(nc).consumers.get(spec.stream, spec.consumer);
const handled = new Uint8Array(items);
let duplicates = 0;
let outOfRange = 0;
let errors = 0;
let firstError: string | undefined;
let pulls = 0;
let received = 0;
let acked = 0;

function mark(message: JsMsg): void {
  const index = message.seq - spec.from;
  if (index < 0 || index >= items) outOfRange += 1;
  else if (handled[index]!++ > 0) duplicates += 1;
}

function failed(error: unknown): void {
  errors += 1;
  firstError ??= error instanceof Error ? error.message : String(error);
}

const cpuAtStart = process.cpuUsage();
const startedAt = performance.now();
let endedAt = startedAt;
const finished = () => {
  acked += 1;
  if (acked === items) endedAt = performance.now();
};

async function ack(message: JsMsg): Promise<void> {
  try {
    if (await message.ackAck()) finished();
    else failed(new Error(`the ack of ${message.seq} was not confirmed`));
  } catch (error) {
    failed(error);
  }
}

if (spec.mode === "single") {
  const loop = async () => {
    while (received < items && errors === 0) {
      pulls += 1;
      const message = await consumer.next({ expires: 1_000 });
      if (message === null) continue;
      received += 1;
      mark(message);
      await ack(message);
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, loop));
} else {
  let inFlight = 0;
  let slotFreed: (() => void) | undefined;
  const settled = new Set<Promise<void>>();
  while (received < items && errors === 0) {
    const free = spec.concurrency - inFlight;
    if (free <= 0) {
      await new Promise<void>((resolve) => (slotFreed = resolve));
      continue;
    }
    pulls += 1;
    const batch = await consumer.fetch({ max_messages: Math.min(free, items - received), expires: 1_000 });
    for await (const message of batch) {
      received += 1;
      mark(message);
      inFlight += 1;
      const handler = (async () => {
        await ack(message);
        inFlight -= 1;
        const wake = slotFreed;
        slotFreed = undefined;
        wake?.();
      })();
      settled.add(handler);
      void handler.then(() => settled.delete(handler));
    }
  }
  await Promise.all(settled);
}

const cpu = process.cpuUsage(cpuAtStart);
await nc.close();
const missing = handled.reduce((n, h) => n + (h === 0 ? 1 : 0), 0);
if (duplicates > 0 || outOfRange > 0 || missing > 0 || acked !== items) {
  errors += 1;
  firstError ??= `${missing} of ${items} messages never delivered, ${duplicates} delivered twice, ${outOfRange} outside ${spec.from}..${spec.to}, ${acked} acks confirmed`;
}
process.stdout.write(JSON.stringify({ items: acked, seconds: (endedAt - startedAt) / 1000, cpuMicros: cpu.user + cpu.system, pulls, errors, firstError }) + "\n");
