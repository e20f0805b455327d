import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import type { WireProtocol } from "../../src/client/transport.js";
import { MAX_FOLLOWERS_PER_PROJECT } from "../../src/lanes/index.js";
import { startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { newToken, reasonOf, type LaneClient } from "../helpers/lanes.js";
import { waitFor } from "../helpers/wait-for.js";
import { buildLanesConfig } from "../helpers/lanes-config.js";

/**
 * Readers cannot hurt writers. Against `laneway serve` (its embedded
 * nats-server, as `npm start` runs it): 32 Follow streams from cursor 0
 * over 128 events of 64 KiB — 8 MiB each, 256 MiB in all — and four
 * Replay readers paging through the same lane, while another project
 * publishes, claims and acknowledges on its own lane. Every
 * follower receives every event, in order and intact; no call anywhere
 * fails; Laneway's connections to the broker are never cut; and the
 * server's peak memory stays bounded. A follower whose client stops
 * reading does not grow the server's memory without bound, does not hold
 * up the other followers, and is ended once it stays stalled past the
 * idle timeout, which frees its Follow slot.
 *
 * Nothing here measures time: the tests wait for outcomes, and the memory
 * bound is a generous ceiling on the kernel's peak-RSS figure (reported
 * with console.log).
 */

const RECORDS = 128;
const PAYLOAD_BYTES = 65_536;
/** Replay readers beside the 32 followers. */
const REPLAYERS = 4;
/** Claims (and acks) the writer makes; it publishes events after them. */
const CLAIMS = 128;
const protocols: readonly WireProtocol[] = ["connect-binary", "grpc", "connect-json", "grpc-web"];

/** bulk: atlas publishes large events that beacon follows; chatter: cinder's own lane and group. */
function lanesConfig(): Record<string, unknown> {
  return buildLanesConfig({
    namespace: "readers",
    projects: ["atlas", "beacon", "cinder"],
    lanes: [
      { id: "bulk", owner: "atlas", publishers: ["atlas"], subscribers: ["beacon"] },
      { id: "chatter", owner: "cinder", publishers: ["cinder"], subscribers: ["cinder"], groups: { tally: ["cinder"] } },
    ],
  });
}

/** The peak resident set of a process, in bytes (VmHWM). */
function peakRss(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1]) * 1024;
}

function digest(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

interface Started {
  readonly laneway: ChildLaneway;
  readonly cinderToken: string;
  /** Payload digest of every bulk record, by sequence. */
  readonly digests: Map<bigint, string>;
}

async function startWithBulk(records = RECORDS, args: readonly string[] = []): Promise<Started> {
  const cinderToken = newToken();
  const laneway = await startLanewayProcess({ lanesConfig: lanesConfig(), env: { CINDER_LANE_TOKEN: cinderToken }, args });
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas, protocol: "connect-binary" });
  const digests = new Map<bigint, string>();
  for (let batch = 0; batch < records / 32; batch++) {
    const batchRecords = Array.from({ length: 32 }, (_, i) => ({
      id: `big-${batch * 32 + i}`,
      kind: RecordKind.EVENT,
      schema: "blob-v1",
      payload: randomBytes(PAYLOAD_BYTES),
    }));
    const answer = await atlas.publishBatch({ lane: "bulk", records: batchRecords });
    answer.results.forEach((result, i) => {
      if (result.outcome.case !== "published") throw new Error(`bulk record ${batchRecords[i]!.id} was not published`);
      digests.set(result.outcome.value.record!.sequence, digest(batchRecords[i]!.payload));
    });
  }
  return { laneway, cinderToken, digests };
}

/** What one follower saw: every event's sequence and payload digest, in order; or how it failed. */
interface Followed {
  readonly sequences: bigint[];
  readonly digests: string[];
  failure?: string;
}

/** Follows `bulk` from `from` until the cursor reaches `through`, then closes the stream. */
async function followThrough(client: LaneClient, through: bigint, from = 0n): Promise<Followed> {
  const seen: Followed = { sequences: [], digests: [] };
  const abort = new AbortController();
  try {
    for await (const page of client.follow({ lane: "bulk", cursor: from }, { signal: abort.signal })) {
      for (const event of page.events) {
        seen.sequences.push(event.sequence);
        seen.digests.push(digest(event.payload));
      }
      if (page.cursor >= through) break;
    }
  } catch (error) {
    const e = ConnectError.from(error);
    seen.failure = `${Code[e.code]} ${reasonOf(e) ?? ""}: ${e.rawMessage}`;
  } finally {
    abort.abort();
  }
  return seen;
}

/** Replays `bulk` from cursor 0 page by page to its end. */
async function replayThrough(client: LaneClient): Promise<Followed> {
  const seen: Followed = { sequences: [], digests: [] };
  try {
    let cursor = 0n;
    for (;;) {
      const page = await client.replay({ lane: "bulk", cursor });
      for (const event of page.events) {
        seen.sequences.push(event.sequence);
        seen.digests.push(digest(event.payload));
      }
      if (page.cursor >= page.lastSequence) break;
      cursor = page.cursor;
    }
  } catch (error) {
    const e = ConnectError.from(error);
    seen.failure = `${Code[e.code]} ${reasonOf(e) ?? ""}: ${e.rawMessage}`;
  }
  return seen;
}

/** Cinder's work while the readers read: publish a record, claim it, ack it; every failure is kept. */
function writer(client: LaneClient) {
  const failures: string[] = [];
  let published = 0;
  let claims = 0;
  let acked = 0;
  let stop = false;
  const record = (error: unknown) => {
    const e = ConnectError.from(error);
    failures.push(`${Code[e.code]} ${reasonOf(e) ?? ""}: ${e.rawMessage}`);
  };
  const done = (async () => {
    for (let i = 0; !stop || published < 16; i++) {
      // The group's ledger keeps acknowledged deliveries for ack_retention:
      // stay well below its max_ledger (256).
      const work = i < CLAIMS;
      try {
        await client.publish({ lane: "chatter", id: `note-${i}`, kind: work ? RecordKind.WORK : RecordKind.EVENT, schema: "note-v1", payload: Buffer.from(`note ${i}`) });
        published += 1;
        if (!work) continue;
        claims += 1;
        const claimed = await client.claim({ lane: "chatter", group: "tally", wait: { seconds: 5n, nanos: 0 } });
        if (claimed.work === undefined) {
          failures.push(`claim ${i} found no work`);
          continue;
        }
        await client.ack({ lane: "chatter", group: "tally", sequence: claimed.work.record!.sequence, receipt: claimed.work.receipt });
        acked += 1;
      } catch (error) {
        record(error);
      }
    }
  })();
  return {
    failures,
    counts: () => ({ published, claims, acked }),
    async finish() {
      stop = true;
      await done;
    },
  };
}

function followerClient(laneway: ChildLaneway, index: number): LaneClient {
  return laneway.clients.client(LaneService, { token: laneway.tokens.beacon, protocol: protocols[index % protocols.length]! });
}

function expectComplete(followed: Followed, digests: Map<bigint, string>, from = 0n): void {
  expect(followed.failure).toBeUndefined();
  const wanted = [...digests].filter(([sequence]) => sequence > from);
  expect(followed.sequences).toEqual(wanted.map(([sequence]) => sequence));
  expect(followed.digests).toEqual(wanted.map(([, d]) => d));
}

function brokerLosses(laneway: ChildLaneway): string[] {
  return [...laneway.stdout, ...laneway.stderr].filter((line) => line.includes("NATS connection is not available"));
}

describe("32 followers over 128 events of 64 KiB while another project writes", () => {
  let started: Started;

  beforeAll(async () => {
    started = await startWithBulk();
  }, 120_000);

  afterAll(async () => {
    await started?.laneway.remove();
  });

  test("every follower receives every event, every write succeeds, the broker connection holds and memory stays bounded", async () => {
    const { laneway, digests } = started;
    const cinder = laneway.clients.client(LaneService, { token: started.cinderToken, protocol: "connect-binary" });
    const writes = writer(cinder);
    const followers = Array.from({ length: MAX_FOLLOWERS_PER_PROJECT }, (_, i) => followThrough(followerClient(laneway, i), BigInt(RECORDS)));
    // Replay has no per-project bound: four readers page through the lane at the same time.
    const replays = Array.from({ length: REPLAYERS }, (_, i) => replayThrough(followerClient(laneway, i)));
    const results = await Promise.all(followers);
    const replayed = await Promise.all(replays);
    await writes.finish();
    const peak = peakRss(laneway.pid);
    console.log(
      `32 followers and ${REPLAYERS} replayers x ${RECORDS} events of 64 KiB: laneway serve peak RSS ${(peak / 2 ** 20).toFixed(0)} MiB; ` +
        `cinder published ${writes.counts().published}, claimed and acked ${writes.counts().acked} meanwhile; ` +
        `${[...results, ...replayed].filter((r) => r.failure !== undefined).length} readers failed, ${writes.failures.length} writes failed, ` +
        `${brokerLosses(laneway).length} broker connection losses`,
    );
    for (const followed of [...results, ...replayed]) expectComplete(followed, digests);
    expect(writes.failures).toEqual([]);
    expect(writes.counts().acked).toBe(writes.counts().claims);
    expect(brokerLosses(laneway)).toEqual([]);
    expect(peak).toBeLessThan(768 * 2 ** 20);
  }, 300_000);
});

describe("followers whose clients stop reading", () => {
  /** A lane of 48 MiB: a server that buffered it for each stalled follower would hold gigabytes' worth of copies. */
  const LONG_LANE = 768;
  /** Followers that read the lane's tail meanwhile. */
  const TAIL = 64n;
  let started: Started;

  beforeAll(async () => {
    started = await startWithBulk(LONG_LANE, ["--idle-timeout", "3s"]);
  }, 180_000);

  afterAll(async () => {
    await started?.laneway.remove();
  });

  test("neither grow the server's memory with the lane nor hold up other followers, and are ended, freeing their slots", async () => {
    const { laneway, digests } = started;
    const peakBefore = peakRss(laneway.pid);
    // Each opens the stream from cursor 0, takes its first page, and never reads again (one per protocol).
    const stalledAbort = new AbortController();
    for (let i = 0; i < protocols.length; i++) {
      const stalled = followerClient(laneway, i).follow({ lane: "bulk", cursor: 0n }, { signal: stalledAbort.signal })[Symbol.asyncIterator]();
      expect((await stalled.next()).done).toBe(false);
    }

    // Meanwhile others follow the same lane's tail, and cinder writes.
    const cinder = laneway.clients.client(LaneService, { token: started.cinderToken, protocol: "connect-binary" });
    const writes = writer(cinder);
    const from = BigInt(LONG_LANE) - TAIL;
    const others = await Promise.all(Array.from({ length: 8 }, (_, i) => followThrough(followerClient(laneway, i), BigInt(LONG_LANE), from)));
    for (const followed of others) expectComplete(followed, digests, from);

    // The stalled streams hold their Follow slots until the server ends them:
    // then the project can hold all 32 again.
    const fullHouse = async (): Promise<boolean> => {
      const abort = new AbortController();
      const opened = await Promise.allSettled(
        Array.from({ length: MAX_FOLLOWERS_PER_PROJECT }, async (_, i) => {
          const it = followerClient(laneway, i).follow({ lane: "bulk", cursor: BigInt(LONG_LANE) }, { signal: abort.signal })[Symbol.asyncIterator]();
          await it.next();
        }),
      );
      abort.abort();
      const refused = opened.filter((o) => o.status === "rejected").map((o) => reasonOf(ConnectError.from((o as PromiseRejectedResult).reason)));
      expect(refused.every((reason) => reason === "lane_capacity")).toBe(true);
      return refused.length === 0;
    };
    await waitFor(fullHouse, { timeoutMs: 120_000, intervalMs: 500, what: "the stalled followers to be ended" });
    await writes.finish();
    stalledAbort.abort();

    const peak = peakRss(laneway.pid);
    console.log(
      `${protocols.length} stalled followers of a lane of ${LONG_LANE} events of 64 KiB, 8 followers of its tail: laneway serve peak RSS ` +
        `${(peakBefore / 2 ** 20).toFixed(0)} MiB before, ${(peak / 2 ** 20).toFixed(0)} MiB after; ` +
        `${writes.failures.length} writes failed, ${brokerLosses(laneway).length} broker connection losses`,
    );
    expect(writes.failures).toEqual([]);
    expect(brokerLosses(laneway)).toEqual([]);
    // Measured 60–120 MiB; buffering the lane for each stalled stream would be
    // 4 x 48 MiB stored, before any decoded or serialized copy.
    expect(peak - peakBefore).toBeLessThan(224 * 2 ** 20);
  }, 300_000);
});
