import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneError } from "../../src/lanes/index.js";
import { BrokerRequests } from "../../src/lanes/broker-requests.js";
import { LaneStore } from "../../src/lanes/lane-store.js";
import { BrokerConnection, BrokerTimeoutError, BrokerUnavailableError } from "../../src/nats/index.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * The lane store's write path (appends, key writes, single reads) over its
 * request pipe, against a real nats-server: a subject taken answers
 * `subject_taken`, a key that exists `exists`, a moved revision
 * `conflict`; a key whose last message is a delete marker can be created
 * again (as nats.js's `create` allows); the pipe fails a request nobody
 * answers as a timeout, one without responders and one pending when the
 * connection closes as unavailable.
 */

const STREAM = "WRITES";
const BUCKET = "writes";

let nats: NatsServerHandle;
let broker: BrokerConnection;
let store: LaneStore;

beforeAll(async () => {
  nats = await startNatsServer();
  broker = await BrokerConnection.open({ servers: nats.url });
  await broker.jetstreamManager().streams.add({ name: STREAM, subjects: ["writes.>"], allow_direct: true });
  await new Kvm(broker.jetstream()).create(BUCKET, { history: 1, allow_direct: true });
  store = new LaneStore(broker, 1_000, 1);
});

afterAll(async () => {
  await broker?.close();
  await nats?.remove();
});

describe("appends and reads", () => {
  test("an append is acknowledged and read back by sequence and by subject; a second append to the subject is subject_taken", async () => {
    const data = new TextEncoder().encode("first");
    const appended = await store.append("writes.one", data, { msgID: "g1", expectLastSubjectSequence: 0 });
    expect(appended).not.toBe("subject_taken");
    const { sequence, duplicate } = appended as { sequence: number; duplicate: boolean };
    expect(duplicate).toBe(false);
    const byNumber = await store.bySequence(STREAM, sequence);
    expect(byNumber?.subject).toBe("writes.one");
    expect(Buffer.from(byNumber!.data).toString()).toBe("first");
    expect(byNumber!.storedAt).toBeGreaterThan(0);
    expect((await store.lastOnSubject(STREAM, "writes.one"))?.sequence).toBe(sequence);
    // The same message id again is a duplicate acknowledgement of the same sequence.
    expect(await store.append("writes.one", data, { msgID: "g1", expectLastSubjectSequence: 0 })).toEqual({ sequence, duplicate: true });
    expect(await store.append("writes.one", data, { msgID: "g2", expectLastSubjectSequence: 0 })).toBe("subject_taken");
    expect(await store.bySequence(STREAM, sequence + 100)).toBeUndefined();
    expect(await store.lastOnSubject(STREAM, "writes.none")).toBeUndefined();
  });
});

describe("keys", () => {
  test("create, read, update at a revision; exists and conflict are answers, not errors", async () => {
    const created = await store.kvCreate(BUCKET, "k.one", new TextEncoder().encode('{"v":1}'));
    expect(typeof created).toBe("number");
    expect(await store.kvCreate(BUCKET, "k.one", new TextEncoder().encode('{"v":2}'))).toBe("exists");
    const read = await store.kvGet(BUCKET, "k.one");
    expect(read?.revision).toBe(created);
    expect(read?.json()).toEqual({ v: 1 });
    const updated = await store.kvUpdate(BUCKET, "k.one", new TextEncoder().encode('{"v":3}'), created as number);
    expect(typeof updated).toBe("number");
    expect(await store.kvUpdate(BUCKET, "k.one", new TextEncoder().encode('{"v":4}'), created as number)).toBe("conflict");
    expect((await store.kvGet(BUCKET, "k.one"))?.string()).toBe('{"v":3}');
    expect(await store.kvGet(BUCKET, "k.none")).toBeUndefined();
  });

  test("a deleted key reads as absent and can be created again", async () => {
    const created = (await store.kvCreate(BUCKET, "k.two", new TextEncoder().encode("a"))) as number;
    expect(await store.kvDeleteAt(BUCKET, "k.two", created)).toBe(true);
    expect(await store.kvGet(BUCKET, "k.two")).toBeUndefined();
    const again = await store.kvCreate(BUCKET, "k.two", new TextEncoder().encode("b"));
    expect(typeof again).toBe("number");
    expect((await store.kvGet(BUCKET, "k.two"))?.string()).toBe("b");
    expect(await store.kvCreate(BUCKET, "k.two", new TextEncoder().encode("c"))).toBe("exists");
  });

  test("a key that is not a valid KV key (a wildcard) is refused before anything is sent", async () => {
    await expect(store.kvCreate(BUCKET, "k.>", new Uint8Array(1))).rejects.toThrow();
    expect(await store.kvGet(BUCKET, "k.one")).toBeDefined();
  });

  test("a call whose signal aborted sends nothing and fails as canceled", async () => {
    const controller = new AbortController();
    controller.abort(new DOMException("gone", "AbortError"));
    const error = await store.kvCreate(BUCKET, "k.three", new Uint8Array(1), controller.signal).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LaneError);
    expect((error as LaneError).reason).toBe("lane_canceled");
    expect(await store.kvGet(BUCKET, "k.three")).toBeUndefined();
  });
});

describe("the request pipe", () => {
  test("no responders is unavailable; an unanswered request times out; requests pending when the connection closes are unavailable", async () => {
    const nc = await connect({ servers: nats.url });
    const silent = nc.subscribe("silent.request", { callback: () => {} });
    const pipe = new BrokerRequests(nc, undefined, 300);
    await expect(pipe.request("nobody.listens", new Uint8Array(0))).rejects.toBeInstanceOf(BrokerUnavailableError);
    await expect(pipe.request("silent.request", new Uint8Array(0))).rejects.toBeInstanceOf(BrokerTimeoutError);
    silent.unsubscribe();

    const longer = new BrokerRequests(nc, undefined, 60_000);
    nc.subscribe("silent.again", { callback: () => {} });
    const pending = longer.request("silent.again", new Uint8Array(0));
    await nc.flush();
    await nc.close();
    const error = await pending.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BrokerUnavailableError);
    await expect(longer.request("silent.again", new Uint8Array(0))).rejects.toBeInstanceOf(BrokerUnavailableError);
  });
});
