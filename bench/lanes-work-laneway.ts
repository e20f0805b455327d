/**
 * The Laneway workers of `npm run bench lanes-work`, run as their own
 * process so that no client CPU is charged to the server under test. The
 * orchestrator has published exactly `items` work records (sequences
 * `from`..`to`) to the lane before starting it; it works until every one is
 * acknowledged.
 *
 * - `single`: `concurrency` loops on the generated client, each doing
 *   Claim (one record, waiting up to 1 s) then Ack, one call each.
 * - `participant`: the participant library (src/participant) with
 *   `concurrency` handlers; it claims with ClaimBatch (up to the free
 *   handler slots, at most 64) and combines the acks of finished handlers
 *   into AckBatch calls or into the ClaimBatch for the slots they freed.
 *   The handler does nothing. Its ClaimBatch and AckBatch calls (and the
 *   acks its claims carried) are counted by wrapping the client it is given.
 *
 * Both talk Connect binary over HTTP/1.1. A claim refused for capacity
 * (`resource_exhausted`) is counted; the single loops then wait 50 ms (the
 * participant waits its own 200 ms).
 *
 * Checked here: every sequence from..to was handled exactly once, every ack
 * succeeded and was not a duplicate, nothing was nacked.
 *
 * `shared`: the participant is one of several helpers working the same
 * records through different Laneway processes. It runs until `doneFile`
 * exists (the orchestrator writes it once the group's stored state shows
 * every record completed: cursor at `to`, nothing unfinished), checks nothing about the records it did not handle, and
 * prints what it handled as `handled` (base64, one byte per record of
 * from..to: how many times it ran) for the orchestrator to merge.
 *
 * Usage (argv[2] is JSON): {mode, url, token, lane, group, schema, publisher, from, to, concurrency, shared?, doneFile?}
 * Prints {items, seconds, cpuMicros, claimCalls, ackCalls, acksCarried, capacityRefusals, emptyClaims, errors, handled?}.
 */
import { setMaxListeners } from "node:events";
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { LaneService } from "../gen/laneway/lane/v1/lane_service_pb.js";
import { createLanewayTransport } from "../src/client/transport.js";
import { Participant } from "../src/participant/index.js";

interface Spec {
  mode: "single" | "participant";
  url: string;
  token: string;
  lane: string;
  group: string;
  schema: string;
  publisher: string;
  from: number;
  to: number;
  concurrency: number;
  shared?: boolean;
  /** Shared runs: the file whose existence says every record is completed. */
  doneFile?: string;
}

const spec = JSON.parse(process.argv[2]!) as Spec;
const items = spec.to - spec.from + 1;
const transport = createLanewayTransport({ baseUrl: spec.url, token: spec.token, protocol: "connect-binary" });
const client = createClient(LaneService, transport.transport);
const handled = new Uint8Array(items);
let duplicates = 0;
let outOfRange = 0;
let claimCalls = 0;
let ackCalls = 0;
/** Receipts acknowledged by ClaimBatch calls (the acks that rode with a claim). */
let acksCarried = 0;
let capacityRefusals = 0;
let emptyClaims = 0;
let errors = 0;
let firstError: string | undefined;

function mark(sequence: bigint): void {
  const index = Number(sequence) - spec.from;
  if (index < 0 || index >= items) outOfRange += 1;
  else if (handled[index]!++ > 0) duplicates += 1;
}

function failed(error: unknown): void {
  errors += 1;
  firstError ??= ConnectError.from(error).message;
}

const cpuAtStart = process.cpuUsage();
const startedAt = performance.now();
let endedAt = startedAt;

if (spec.mode === "single") {
  const stop = new AbortController();
  setMaxListeners(spec.concurrency + 10, stop.signal); // one listener per waiting claim
  let claimed = 0;
  let acked = 0;
  const loop = async () => {
    while (claimed < items && !stop.signal.aborted) {
      claimCalls += 1;
      let work;
      try {
        work = (await client.claim({ lane: spec.lane, group: spec.group, wait: { seconds: 1n, nanos: 0 } }, { signal: stop.signal })).work;
      } catch (error) {
        if (stop.signal.aborted) return;
        if (ConnectError.from(error).code === Code.ResourceExhausted) {
          capacityRefusals += 1;
          await sleep(50);
        } else {
          failed(error);
          await sleep(100);
        }
        continue;
      }
      if (work === undefined) {
        emptyClaims += 1;
        continue;
      }
      claimed += 1;
      mark(work.record!.sequence);
      ackCalls += 1;
      try {
        const answer = await client.ack({ lane: spec.lane, group: spec.group, sequence: work.record!.sequence, receipt: work.receipt });
        if (answer.duplicate) duplicates += 1;
        acked += 1;
        if (acked === items) {
          endedAt = performance.now();
          stop.abort(); // the loops still waiting for work have nothing left to get
        }
      } catch (error) {
        failed(error);
      }
    }
  };
  // A safety net: a run that cannot finish (a lost ack) ends after a minute and fails its checks.
  const giveUp = setTimeout(() => stop.abort(), 60_000 + items * 20);
  await Promise.all(Array.from({ length: spec.concurrency }, loop));
  clearTimeout(giveUp);
  if (acked < items) endedAt = performance.now();
} else {
  // The participant's own calls, counted on the way out: claims (and the
  // records they asked for) and settlement batches.
  let claimedRecords = 0;
  const counted: typeof client = {
    ...client,
    claimBatch: async (request, options) => {
      claimCalls += 1;
      acksCarried += request.acks?.length ?? 0;
      const answer = await client.claimBatch(request, options);
      claimedRecords += answer.work.length;
      return answer;
    },
    ackBatch: (request, options) => {
      ackCalls += 1;
      return client.ackBatch(request, options);
    },
  };
  const participant = new Participant({
    client: counted,
    lane: spec.lane,
    group: spec.group,
    concurrency: spec.concurrency,
    waitMs: 1_000,
    onError: (error) => {
      if (error instanceof ConnectError && error.code === Code.ResourceExhausted) capacityRefusals += 1;
      else failed(error);
    },
  });
  participant.handle(spec.schema, spec.publisher, async (work) => {
    mark(work.sequence);
  });
  const running = participant.run();
  // Claims and acks are counted from the participant's own statistics;
  // completion is noticed within a millisecond or two (shared: when the
  // orchestrator's done file appears).
  await new Promise<void>((resolve) => {
    const deadline = Date.now() + 60_000 + items * 20;
    const check = setInterval(() => {
      const finish = () => {
        endedAt = performance.now();
        clearInterval(check);
        resolve();
      };
      if (Date.now() > deadline) return finish();
      if (!spec.shared) {
        if (participant.stats.acked + participant.stats.nacked >= items) finish();
        return;
      }
      // The orchestrator writes the file once the group's stored state shows every record completed.
      if (existsSync(spec.doneFile!)) finish();
    }, spec.shared ? 2 : 1);
  });
  await participant.stop(5_000);
  await running;
  if (participant.stats.nacked > 0) {
    errors += participant.stats.nacked;
    firstError ??= `${participant.stats.nacked} deliveries were nacked`;
  }
  if (claimedRecords !== participant.stats.claimed) {
    errors += 1;
    firstError ??= `the participant counted ${participant.stats.claimed} claimed records, its claim calls answered ${claimedRecords}`;
  }
}

const cpu = process.cpuUsage(cpuAtStart);
transport.close();
const missing = spec.shared ? 0 : handled.reduce((n, h) => n + (h === 0 ? 1 : 0), 0);
if (duplicates > 0 || outOfRange > 0 || missing > 0) {
  errors += 1;
  firstError ??= `${missing} of ${items} records never handled, ${duplicates} handled or acked twice, ${outOfRange} outside ${spec.from}..${spec.to}`;
}
process.stdout.write(
  JSON.stringify({
    items: spec.shared ? handled.reduce((n, h) => n + h, 0) : items - missing,
    ...(spec.shared ? { handled: Buffer.from(handled).toString("base64") } : {}),
    seconds: (endedAt - startedAt) / 1000,
    cpuMicros: cpu.user + cpu.system,
    claimCalls,
    ackCalls,
    acksCarried,
    capacityRefusals,
    emptyClaims,
    errors,
    firstError,
  }) + "\n",
);
