/**
 * The member process of `npm run bench swarm-bus`: a hive member holding
 * its minted scoped credential, offering work to one lane queue and taking
 * and acknowledging it, for `seconds`.
 *
 * - `bus`: through the scoped bus library in bind mode (the member's
 *   hive.env: AGENTIHOOKS_BUS_SCOPED=1, AGENTIHOOKS_BUS_BIND=1):
 *   `forSwarm(swarm).queue("swarm.<swarm>.ready.<lane>")`, `offer(event)`,
 *   `consume()`, `item.ack()`.
 * - `raw`: the JetStream work-queue equivalent on a stream and durable
 *   consumer configured identically (the hub provisioned both with the same
 *   code): `js.publish` of the same event (JSON-encoded per offer, as the
 *   library does), `consumer.consume()`, `message.ackAck()`.
 *
 * Both: `producers` closed-loop offerers (each waits for the stream's
 * acknowledgement), one consumer with `batch` messages buffered, every ack
 * confirmed by the server. Counted: items acknowledged within the window.
 * After it, the producers stop and the queue is drained (not counted), so
 * the next round starts empty.
 *
 * Usage (argv[2] is JSON): {mode, url, credentials, memberId, swarm, lane, seconds, producers, batch, bodyBytes}
 * Prints {acked, offered, seconds, cpuMicros}.
 */
import { readFile } from "node:fs/promises";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { openBus, queueStream, queueWorkSubject, type SwarmLane, type WorkItem } from "../src/swarm-bus/index.js";

interface Spec {
  mode: "bus" | "raw";
  url: string;
  credentials: string;
  memberId: string;
  swarm: string;
  lane: SwarmLane;
  seconds: number;
  producers: number;
  batch: number;
  bodyBytes: number;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const body = "x".repeat(spec.bodyBytes);
const event = (n: number) => ({ swarm: spec.swarm, kind: "bench-work", job: n, body });

interface Side {
  offer(n: number): Promise<void>;
  /** Starts taking; `onItem` is called per item with its ack. */
  take(onItem: (ack: () => Promise<void>) => void): Promise<() => void>;
  close(): Promise<void>;
}

async function busSide(): Promise<Side> {
  const bus = await openBus({ backend: "nats", url: spec.url, credentials: spec.credentials, scoped: true, bind: true, connectionName: "bench-member-bus" });
  const queue = await bus.forSwarm(spec.swarm).queue(`swarm.${spec.swarm}.ready.${spec.lane}`);
  return {
    offer: async (n) => void (await queue.offer({ event: event(n) })),
    async take(onItem) {
      const items = await queue.consume({ maxMessages: spec.batch });
      void (async () => {
        for await (const item of items) onItem(() => (item as WorkItem).ack());
      })();
      return () => items.stop();
    },
    close: () => bus.close(),
  };
}

async function rawSide(): Promise<Side> {
  const nc = await connect({
    servers: spec.url,
    authenticator: credsAuthenticator(await readFile(spec.credentials)),
    inboxPrefix: `_INBOX.${spec.memberId}`,
    reconnect: false,
    noAsyncTraces: true,
    name: "bench-member-raw",
  });
  const js = jetstream(nc, { timeout: 10_000 });
  const subject = queueWorkSubject(spec.swarm, spec.lane);
  const consumer = await js.consumers.get(queueStream(spec.swarm, spec.lane).name, spec.lane);
  return {
    offer: async (n) => void (await js.publish(subject, JSON.stringify(event(n)))),
    async take(onItem) {
      const messages = await consumer.consume({ max_messages: spec.batch });
      void (async () => {
        for await (const message of messages) {
          onItem(async () => {
            if (!(await (message as JsMsg).ackAck())) throw new Error("ack not confirmed");
          });
        }
      })();
      return () => void messages.stop();
    },
    close: () => nc.close(),
  };
}

const side = spec.mode === "bus" ? await busSide() : await rawSide();
let offered = 0;
let acked = 0;
let ackedInWindow = 0;
let failures = 0;
let measuring = true;
let producing = true;
const stopTaking = await side.take((ack) => {
  ack().then(
    () => {
      acked += 1;
      if (measuring) ackedInWindow += 1;
    },
    () => (failures += 1),
  );
});

const cpuAtStart = process.cpuUsage();
const startedAt = performance.now();
const producers = Array.from({ length: spec.producers }, async () => {
  while (producing) {
    const n = offered++;
    await side.offer(n);
  }
});
await new Promise((r) => setTimeout(r, spec.seconds * 1000));
measuring = false;
const seconds = (performance.now() - startedAt) / 1000;
const cpu = process.cpuUsage(cpuAtStart);
producing = false;
await Promise.all(producers);
// Drain what was offered, so the next round starts with an empty queue.
const deadline = Date.now() + 60_000;
while (acked + failures < offered && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
stopTaking();
await side.close();
process.stdout.write(`${JSON.stringify({ acked: ackedInWindow, offered, drained: acked, failures, seconds, cpuMicros: cpu.user + cpu.system })}\n`);
process.exit(0);
