/**
 * The latency probe of the kmap-lane benchmark, run as its own process so
 * that its client CPU is not charged to the server: one command at a time,
 * the way `laneway kmap submit --wait` does it on the generated client —
 * SubmitCommand, then WatchCommands for that id from the position of its
 * `queued` change until the record is COMMITTED.
 *
 * Per sample it records two times from the start of the submit call: until
 * the submit answer (the Queued record is durable) and until the COMMITTED
 * change arrived on the watch stream. A FAILED command is a failed sample.
 *
 * One unmeasured sample comes first (connections, JIT). With `startAt`
 * (epoch ms) the probe then waits until that moment, so that its own
 * start-up (a core's worth of CPU for about a second) is over before the
 * measurement and any load started alongside it has settled.
 *
 * Usage (argv[2] is JSON): {url, token, seconds, startAt?, protocol?: WireProtocol, httpVersion?: "1.1"|"2"}
 * Prints {ackMs: number[], committedMs: number[], failed, seconds}.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { createClient } from "@connectrpc/connect";
import { CommandState } from "../gen/laneway/kmap/v1/command_pb.js";
import { KmapCommandService } from "../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { createLanewayTransport, type WireProtocol } from "../src/client/transport.js";
import { benchCreateNode } from "./kmap-bench-command.js";

interface ProbeSpec {
  url: string;
  token: string;
  seconds: number;
  startAt?: number;
  protocol?: WireProtocol;
  httpVersion?: "1.1" | "2";
}

const spec = JSON.parse(process.argv[2]!) as ProbeSpec;
const { transport, close } = createLanewayTransport({
  baseUrl: spec.url,
  token: spec.token,
  protocol: spec.protocol ?? "connect-json",
  httpVersion: spec.httpVersion ?? "1.1",
});
const client = createClient(KmapCommandService, transport);
const command = { operation: { case: "createNode" as const, value: benchCreateNode } };

/** One submit followed to COMMITTED; times in ms from the start of the submit call. */
async function sample(): Promise<{ ackMs: number; committedMs: number } | undefined> {
  const idempotencyId = randomBytes(16).toString("hex");
  const started = performance.now();
  const submitted = await client.submitCommand({ idempotencyId, command });
  const ackMs = performance.now() - started;
  let state = submitted.record!.state;
  if (state !== CommandState.COMMITTED && state !== CommandState.FAILED) {
    for await (const change of client.watchCommands({ afterPosition: submitted.position - 1n, idempotencyId })) {
      state = change.record!.state;
      if (state === CommandState.COMMITTED || state === CommandState.FAILED) break;
    }
  }
  if (state !== CommandState.COMMITTED) return undefined;
  return { ackMs, committedMs: performance.now() - started };
}

const ackMs: number[] = [];
const committedMs: number[] = [];
let failed = 0;
// One unmeasured sample opens the connection and warms this process up.
await sample();
if (spec.startAt !== undefined && spec.startAt > Date.now()) await sleep(spec.startAt - Date.now());
const startedAt = performance.now();
const deadline = startedAt + spec.seconds * 1000;
while (performance.now() < deadline) {
  const result = await sample();
  if (result) {
    ackMs.push(result.ackMs);
    committedMs.push(result.committedMs);
  } else {
    failed++;
  }
}
close();
const round = (values: number[]) => values.map((v) => Math.round(v * 1000) / 1000);
process.stdout.write(
  JSON.stringify({ ackMs: round(ackMs), committedMs: round(committedMs), failed, seconds: (performance.now() - startedAt) / 1000 }) + "\n",
);
