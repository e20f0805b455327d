import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { AckPolicy, RetentionPolicy, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import {
  deadLetterSubject,
  deadStream,
  GLOBAL_STREAMS,
  queueStream,
  queueWorkSubject,
  stateKeySubject,
  stateStream,
  swarmStreams,
} from "../../src/swarm-bus/index.js";
import { connectWithCreds, jetStreamOf, SecretLedger, startHive, type HiveUnderTest } from "./hive-fixture.js";

/**
 * The NATS server itself enforces a member's scope. A member of swarm `rig`
 * holding its minted credential round-trips its own queue, dead letter and
 * state, while the server refuses it another swarm's queue, dead letter,
 * state and JetStream API subjects (new and legacy stream names) even
 * though those streams exist. An unscoped member minted before the
 * member_swarms field existed works against the same server at the same
 * time, on the legacy resources.
 */

let hive: HiveUnderTest;
let admin: NatsConnection;
let scoped: { credential: MemberCredential; nc: NatsConnection };
let unscoped: { credential: MemberCredential; nc: NatsConnection };
const secrets = new SecretLedger();
const encode = (text: string) => new TextEncoder().encode(text);
const decode = (data: Uint8Array) => new TextDecoder().decode(data);

/** What the hub provisions for a swarm (issue 12 makes that the hub's job): every stream, a durable consumer per lane. */
async function provisionSwarm(jsm: JetStreamManager, swarm: string): Promise<void> {
  for (const stream of swarmStreams(swarm)) {
    await jsm.streams.add({
      name: stream.name,
      subjects: [...stream.subjects],
      ...(stream.kind === "queue" ? { retention: RetentionPolicy.Workqueue } : {}),
      ...(stream.kind === "state" ? { max_msgs_per_subject: 64 } : {}),
    });
    if (stream.kind === "queue") await jsm.consumers.add(stream.name, { durable_name: stream.lane!, ack_policy: AckPolicy.Explicit });
  }
  // A legacy (underscore) state stream of the swarm beside the new one.
  const legacy = stateStream(swarm, "spoke-work").legacyName;
  await jsm.streams.add({ name: legacy, subjects: [`legacy-test.${swarm}.state`] });
}

async function joinMember(memberId: string, options: { swarms?: string[] } = {}): Promise<{ credential: MemberCredential; nc: NatsConnection }> {
  const invite = await hive.hub().invite({ memberId, swarms: options.swarms ?? [] });
  secrets.add(invite.inviteSecret);
  const credential = (await hive.member(invite.inviteSecret).join({})).credential!;
  secrets.add(credential.creds);
  const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
  return { credential, nc };
}

/** The server's refusal of a request: a permissions violation naming the subject. */
async function refused(attempt: Promise<unknown>, subject: string): Promise<void> {
  const error = (await attempt.then(
    () => undefined,
    (e: unknown) => e,
  )) as (Error & { cause?: Error }) | undefined;
  expect(error, `the server should refuse ${subject}`).toBeDefined();
  const text = `${error!.message} ${error!.cause?.message ?? ""}`;
  expect(text).toContain(`Permissions Violation for Publish to "${subject}"`);
}

beforeAll(async () => {
  hive = await startHive();
  admin = await hive.hubConnection();
  const { jsm } = await jetStreamOf(admin);
  for (const swarm of ["rig", "other"]) await provisionSwarm(jsm, swarm);
  // The legacy shared resources of unscoped members.
  await jsm.streams.add({ name: GLOBAL_STREAMS.legacyDead, subjects: ["dead.>"] });
  await new Kvm(admin).create("spoke-work");

  // Minted before the field exists: unscoped.
  unscoped = await joinMember("hive-legacy");
  expect(unscoped.credential.scoped).toBe(false);
  await hive.hub().scope({ swarms: ["rig"] });
  scoped = await joinMember("hive-rig", { swarms: ["rig"] });
  expect(scoped.credential.scoped).toBe(true);
  expect(scoped.credential.swarms).toEqual(["rig"]);
}, 120_000);

afterAll(async () => {
  await scoped?.nc.close();
  await unscoped?.nc.close();
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  expect(secrets.leaked(logs)).toEqual([]);
});

describe("a member of swarm rig", () => {
  test("round-trips its own queue: offer, take with the durable lane consumer, ack", async () => {
    const { js } = await jetStreamOf(scoped.nc);
    const ack = await js.publish(queueWorkSubject("rig", "eng"), encode('{"job":1}'));
    expect(ack.stream).toBe(queueStream("rig", "eng").name);
    const consumer = await js.consumers.get(queueStream("rig", "eng").name, "eng");
    const message = await consumer.next({ expires: 5_000 });
    expect(message && decode(message.data)).toBe('{"job":1}');
    await message!.ackAck();
  });

  test("round-trips its own dead letters and state (read by message get)", async () => {
    const { js, jsm } = await jetStreamOf(scoped.nc);
    await js.publish(deadLetterSubject("rig"), encode("letter"));
    const letter = await jsm.streams.getMessage(deadStream("rig").name, { last_by_subj: deadLetterSubject("rig") });
    expect(letter && decode(letter.data)).toBe("letter");
    const key = stateKeySubject("rig", "spoke-work", "claim-1");
    await js.publish(key, encode("v1"));
    await js.publish(key, encode("v2"));
    const state = await jsm.streams.getMessage(stateStream("rig", "spoke-work").name, { last_by_subj: key });
    expect(state && decode(state.data)).toBe("v2");
    const info = await jsm.streams.info(stateStream("rig", "spoke-work").name);
    expect(info.state.messages).toBe(2);
  });

  test("is refused another swarm's queue, dead letter and state subjects, although their streams exist", async () => {
    const { js } = await jetStreamOf(scoped.nc);
    for (const subject of [queueWorkSubject("other", "eng"), "swarm.other.dead.letter-7", stateKeySubject("other", "spoke-work", "claim-1")]) {
      await refused(js.publish(subject, encode("{}")), subject);
    }
    // Also over core NATS (the specification's `nats pub` check).
    await refused(scoped.nc.request("swarm.other.queue.eng.work", encode("{}"), { timeout: 5_000 }), "swarm.other.queue.eng.work");
  });

  test("is refused the JetStream API subjects of another swarm's streams, new and legacy names", async () => {
    const { jsm } = await jetStreamOf(scoped.nc);
    const otherState = stateStream("other", "spoke-work");
    expect(otherState.name).toBe("AGENTIHOOKS-6f74686572-h-bfdb74b91986464723022e957a6d5e52d6a5eb0070241ac54c0c979b13c398a6");
    for (const stream of [otherState.name, otherState.legacyName]) {
      await expect((await jetStreamOf(admin)).jsm.streams.info(stream)).resolves.toBeDefined();
      await refused(jsm.streams.getMessage(stream, { seq: 1 }), `$JS.API.STREAM.MSG.GET.${stream}`);
      await refused(jsm.streams.info(stream), `$JS.API.STREAM.INFO.${stream}`);
    }
    await refused(jsm.consumers.info(queueStream("other", "eng").name, "eng"), `$JS.API.CONSUMER.INFO.${queueStream("other", "eng").name}.eng`);
  });

  test("holds no stream or consumer creation grant, and no legacy global stream", async () => {
    const { jsm } = await jetStreamOf(scoped.nc);
    await refused(jsm.streams.add({ name: "AGENTIHOOKS-726967-MINE", subjects: ["swarm.rig.mine.>"] }), "$JS.API.STREAM.CREATE.AGENTIHOOKS-726967-MINE");
    await refused(jsm.streams.info(GLOBAL_STREAMS.legacyDead), `$JS.API.STREAM.INFO.${GLOBAL_STREAMS.legacyDead}`);
    await refused(jsm.streams.getMessage("KV_spoke-work", { seq: 1 }), "$JS.API.STREAM.MSG.GET.KV_spoke-work");
  });

  test("reaches replies only under its own inbox prefix", async () => {
    // Another member's inbox is not its to subscribe to: the server refuses the subscription.
    const errors: string[] = [];
    const watch = (async () => {
      for await (const status of scoped.nc.status()) if (status.type === "error") errors.push(String((status as { error?: Error }).error?.message));
    })();
    scoped.nc.subscribe("_INBOX.hive-legacy.>");
    await scoped.nc.flush();
    await expect.poll(() => errors.join(" "), { timeout: 10_000 }).toContain('Permissions Violation for Subscription to "_INBOX.hive-legacy.>"');
    void watch;
  });
});

describe("an unscoped member beside it, on the same server at the same time", () => {
  test("works on the legacy shared dead letter stream and KV store", async () => {
    const { js, jsm } = await jetStreamOf(unscoped.nc);
    const ack = await js.publish("dead.rig", encode("legacy letter"));
    expect(ack.stream).toBe(GLOBAL_STREAMS.legacyDead);
    const letter = await jsm.streams.getMessage(GLOBAL_STREAMS.legacyDead, { last_by_subj: "dead.rig" });
    expect(letter && decode(letter.data)).toBe("legacy letter");
    const kv = await new Kvm(unscoped.nc).open("spoke-work");
    await kv.put("claim-9", encode("held"));
    expect(decode((await kv.get("claim-9"))!.value)).toBe("held");
    // The scoped member is still connected and working meanwhile.
    const { js: scopedJs } = await jetStreamOf(scoped.nc);
    await scopedJs.publish(deadLetterSubject("rig"), encode("still here"));
  });

  test("is refused the per-swarm streams", async () => {
    const { js } = await jetStreamOf(unscoped.nc);
    await refused(js.publish(queueWorkSubject("rig", "eng"), encode("{}")), queueWorkSubject("rig", "eng"));
  });
});

test("a member listed with no swarm may publish nothing and subscribe only its own inbox", async () => {
  const invite = await hive.hub().invite({ memberId: "hive-empty", swarms: ["rig"] });
  secrets.add(invite.inviteSecret);
  // The operator edits the record by hand: the member is listed with no swarm.
  const path = join(hive.dataDir, "hive", "records", "nats-signer.json");
  const record = JSON.parse(await readFile(path, "utf8")) as { member_swarms: Record<string, string[]> };
  record.member_swarms["hive-empty"] = [];
  await writeFile(path, JSON.stringify(record));
  const credential = (await hive.member(invite.inviteSecret).join({})).credential!;
  secrets.add(credential.creds);
  expect(credential.scoped).toBe(true);
  expect(credential.swarms).toEqual([]);
  const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
  try {
    await refused(nc.request("swarm.rig.queue.eng.work", encode("{}"), { timeout: 5_000 }), "swarm.rig.queue.eng.work");
    const errors: string[] = [];
    void (async () => {
      for await (const status of nc.status()) if (status.type === "error") errors.push(String((status as { error?: Error }).error?.message));
    })();
    nc.subscribe("swarm.rig.>");
    await nc.flush();
    await expect.poll(() => errors.join(" "), { timeout: 10_000 }).toContain('Permissions Violation for Subscription to "swarm.rig.>"');
  } finally {
    await nc.close();
  }
});
