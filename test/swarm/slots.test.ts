import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, expect, test } from "vitest";
import type { MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { createLogger } from "../../src/log/logger.js";
import { BrokerConnection } from "../../src/nats/index.js";
import { DEFAULT_SLOT_POLICY, slotPolicyFromEnv, SlotResponder } from "../../src/swarm/index.js";
import { encodeSlotRequest, requestSlotRaw, SlotClient, SlotError, type AccountSlot } from "../../src/swarm-bus/index.js";
import { HUB_SLOT_BUCKETS } from "../../src/swarm-bus/internal.js";
import { waitFor } from "../helpers/wait-for.js";
import { connectWithCreds, SecretLedger, startHive, type HiveUnderTest } from "./hive-fixture.js";

/**
 * Account slots: members take, renew and return a slot by request on
 * `slots.<swarm>.<hive>` with the credential they were minted; the hub
 * answers from the `hub-slots` queue group and keeps the accounting in its
 * `account-slots` and `hive-slot-accounts` buckets, which no member
 * reaches. A body naming another hive is refused and logged; the NATS
 * server itself refuses a scoped member's request on another hive's (or
 * another swarm's) subject.
 *
 * Slot accounts of this hive: alpha (2 slots), beta (1), gamma (3),
 * delta (4); a hive holds at most 3 slots at once.
 */

let hive: HiveUnderTest;
const secrets = new SecretLedger();
const members = new Map<string, { credential: MemberCredential; nc: NatsConnection }>();
let secondHub: { broker: BrokerConnection; responder: SlotResponder } | undefined;

async function join(memberId: string, swarms?: string[]): Promise<{ credential: MemberCredential; nc: NatsConnection }> {
  const invite = await hive.hub().invite({ memberId, ...(swarms ? { swarms } : {}) });
  const credential = (await hive.member(invite.inviteSecret).join({})).credential!;
  secrets.add(invite.inviteSecret, credential.creds, credential.redisUrl);
  const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
  const member = { credential, nc };
  members.set(memberId, member);
  return member;
}

function slots(memberId: string, swarm = "rig"): SlotClient {
  return new SlotClient(members.get(memberId)!.nc, { hive: memberId, swarm });
}

async function refusal(promise: Promise<unknown>): Promise<SlotError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SlotError);
  return error as SlotError;
}

beforeAll(async () => {
  hive = await startHive({ env: { LANEWAY_HIVE_SLOT_ACCOUNTS: "alpha:2,beta:1,gamma:3,delta:4", LANEWAY_HIVE_SLOTS_PER_HIVE: "3" } });
  // Joined before the hive is scoped: an unscoped credential (slots.*.hive-u).
  await join("hive-u");
  await hive.hub().scope({ swarms: ["rig"] });
  await join("hive-a", ["rig"]);
  await join("hive-b", ["rig"]);
  await join("hive-c", ["rig"]);
  await join("hive-d", ["rig", "ops"]);
}, 120_000);

afterAll(async () => {
  for (const { nc } of members.values()) await nc.close().catch(() => {});
  await secondHub?.responder.close();
  await secondHub?.broker.close();
  const logs = hive?.laneway.logs.join("") ?? "";
  await hive?.stop();
  expect(secrets.leaked(logs)).toEqual([]);
  expect(logs).not.toContain(hive?.nats.url ?? "nats://");
});

test("a member takes, renews, lists and returns a slot of its own hive", async () => {
  const a = slots("hive-a");
  const slot = await a.take({ holder: "worker-1", leaseSeconds: 60 });
  expect(slot).toMatchObject({ id: "alpha.0.1", account: "alpha", index: 0, generation: 1, hive: "hive-a", swarm: "rig", holder: "worker-1" });
  expect(Date.parse(slot.expiresAt)).toBeGreaterThan(Date.parse(slot.takenAt));

  const renewed = await a.renew({ slotId: slot.id, leaseSeconds: 600 });
  expect(renewed.id).toBe(slot.id);
  expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.parse(slot.expiresAt));
  expect((await a.list()).map((s) => s.id)).toEqual([slot.id]);

  expect(await a.return(slot.id)).toBe(true);
  // Returning again changes nothing; a returned tenure cannot be renewed.
  expect(await a.return(slot.id)).toBe(false);
  expect((await refusal(a.renew({ slotId: slot.id }))).reason).toBe("slot_lost");
  expect(await a.list()).toEqual([]);

  // The freed slot is the next one taken, as a new tenure.
  const again = await a.take();
  expect(again).toMatchObject({ id: "alpha.0.2", generation: 2 });
  expect(await a.return(again.id)).toBe(true);
});

test("the accounting lives in the hub's two buckets, which no member credential reaches", async () => {
  const held = await slots("hive-a").take({ account: "gamma" });
  const hub = await hive.hubConnection();
  const kvm = new Kvm(hub);
  const accountSlots = await kvm.open(HUB_SLOT_BUCKETS[0]);
  const hiveAccounts = await kvm.open(HUB_SLOT_BUCKETS[1]);
  expect((await accountSlots.get("gamma.0"))?.json()).toMatchObject({ state: "held", hive: "hive-a", swarm: "rig", generation: 1 });
  expect((await hiveAccounts.get("hive-a"))?.json()).toMatchObject({ hive: "hive-a", entries: [{ kind: "held", slot: held.id, account: "gamma", swarm: "rig" }] });

  const member = members.get("hive-a")!.nc;
  for (const subject of ["$JS.API.STREAM.INFO.KV_account-slots", "$KV.hive-slot-accounts.hive-a", "$JS.API.DIRECT.GET.KV_account-slots.$KV.account-slots.gamma.0"]) {
    const error = await member.request(subject, "{}", { timeout: 5_000 }).catch((e: unknown) => e);
    expect(String((error as { cause?: Error }).cause?.message), subject).toContain("Permissions Violation");
  }
  expect(await slots("hive-a").return(held.id)).toBe(true);
});

test("an expired slot is reclaimable: the next take gets it as a new tenure, and the old one can no longer renew or return it", async () => {
  const a = slots("hive-a");
  const b = slots("hive-b");
  const short = await a.take({ account: "beta", leaseSeconds: 1 });
  expect(short.id).toBe("beta.0.1");
  // While the lease runs, the only beta slot is taken.
  expect((await refusal(b.take({ account: "beta" }))).reason).toBe("slot_exhausted");

  const reclaimed = await waitFor(() => b.take({ account: "beta", leaseSeconds: 60 }).catch(() => undefined), { what: "the expired beta slot to be taken again" });
  expect(reclaimed).toMatchObject({ id: "beta.0.2", hive: "hive-b", generation: 2 });
  expect((await refusal(a.renew({ slotId: short.id }))).reason).toBe("slot_lost");
  expect(await a.return(short.id)).toBe(false);
  expect((await b.list()).map((s) => s.id)).toEqual(["beta.0.2"]);
  expect(await b.return(reclaimed.id)).toBe(true);
});

test("a renewal after the lease ended is refused: slot_lost", async () => {
  const c = slots("hive-c");
  const short = await c.take({ account: "beta", leaseSeconds: 1 });
  await waitFor(async () => (await c.list()).length === 0, { what: "the lease to end" });
  const lost = await refusal(c.renew({ slotId: short.id }));
  expect(lost.reason).toBe("slot_lost");
  expect(lost.message).toBe("the lease of slot beta.0.3 ended; take a slot again");
  // Returning the expired tenure nobody took again frees it.
  expect(await c.return(short.id)).toBe(true);
});

test("two members racing for the last slot: exactly one wins, on two hubs of the hub-slots queue group", async () => {
  // A second responder in the same queue group, on its own connection with
  // the hub's credential: the racing requests may be answered by either.
  const broker = await BrokerConnection.open({ servers: hive.nats.url, credentialsFile: hive.trust.credsPaths.hub, name: "second-hub" });
  const responder = SlotResponder.start({ broker, policy: slotPolicyFromEnv({ LANEWAY_HIVE_SLOT_ACCOUNTS: "alpha:2,beta:1,gamma:3,delta:4", LANEWAY_HIVE_SLOTS_PER_HIVE: "3" }), isMember: () => true, log: createLogger({ write: () => {} }) });
  secondHub = { broker, responder };
  try {
    await raceForTheLastSlot(responder);
  } finally {
    // Only Laneway's hub answers from here on (its log is the one the later tests read).
    await responder.close();
    await broker.close();
    secondHub = undefined;
  }
});

async function raceForTheLastSlot(responder: SlotResponder): Promise<void> {
  await waitFor(() => responder.listening, { what: "the second responder to subscribe" });

  const first = await slots("hive-a").take({ account: "gamma" });
  const second = await slots("hive-a").take({ account: "gamma" });
  expect([first.index, second.index]).toEqual([0, 1]);
  for (let round = 0; round < 8; round++) {
    const outcomes = await Promise.allSettled([slots("hive-b").take({ account: "gamma" }), slots("hive-c").take({ account: "gamma" })]);
    const won = outcomes.filter((o): o is PromiseFulfilledResult<AccountSlot> => o.status === "fulfilled");
    const lost = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
    expect(won, `round ${round}`).toHaveLength(1);
    expect(won[0]!.value.id).toMatch(/^gamma\.2\.\d+$/);
    expect(lost.map((o) => (o.reason as SlotError).reason)).toEqual(["slot_exhausted"]);
    expect(await slots(won[0]!.value.hive).return(won[0]!.value.id)).toBe(true);
  }
  expect(await slots("hive-a").return(first.id)).toBe(true);
  expect(await slots("hive-a").return(second.id)).toBe(true);
}

test("one hive holds at most LANEWAY_HIVE_SLOTS_PER_HIVE slots at once, across its swarms", async () => {
  const d = slots("hive-d");
  const fromOps = slots("hive-d", "ops");
  const held = [await d.take({ account: "delta" }), await fromOps.take({ account: "delta" }), await d.take({ account: "delta" })];
  expect(held.map((s) => s.swarm)).toEqual(["rig", "ops", "rig"]);
  const refused = await refusal(d.take({ account: "delta" }));
  expect(refused.reason).toBe("slot_exhausted");
  expect(refused.message).toBe("hive hive-d holds 3 slots, the most one hive may hold at once");
  // The hive's slots are one account across its swarms: listed from either.
  expect((await fromOps.list()).map((s) => s.id)).toEqual(held.map((s) => s.id).sort());
  expect(await d.return(held[1]!.id)).toBe(true);
  const next = await d.take({ account: "delta" });
  expect(next.index).toBe(1);
  for (const slot of [held[0]!, held[2]!, next]) expect(await d.return(slot.id)).toBe(true);
});

test("a request whose body names another hive is refused and logged, without a secret: take, renew, return and list alike", async () => {
  const held = await slots("hive-b").take({ account: "gamma", holder: "worker-b" });
  const nc = members.get("hive-a")!.nc;
  const refusedLine = "slot request refused: its body names another hive than the credential's";
  const cases: [Record<string, unknown>, string][] = [
    [{ op: "take", hive: "hive-b" }, "take"],
    [{ op: "renew", hive: "hive-b", slot: held.id, lease_seconds: 3600 }, "renew"],
    [{ op: "return", hive: "hive-b", slot: held.id }, "return"],
    [{ op: "list", hive: "hive-b" }, "list"],
    // Refused as another hive's even when the rest of the body is malformed.
    [{ op: "steal", hive: "hive-b", extra: true }, "(not an operation)"],
  ];
  for (const [body, op] of cases) {
    const before = hive.laneway.logs.length;
    const answer = await requestSlotRaw({ nc, subject: "slots.rig.hive-a", body: encodeSlotRequest(body) });
    expect(answer, JSON.stringify(body)).toMatchObject({
      ok: false,
      error: { reason: "slot_forbidden", message: "the request came from hive hive-a and names another hive; a hive takes, renews and returns only its own slots" },
    });
    // The hub logged the refusal before it answered.
    const lines = hive.laneway.logs
      .slice(before)
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l["msg"] === refusedLine);
    expect(lines, JSON.stringify(body)).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: "warn", core: "swarm", swarm: "rig", hive: "hive-a", namedHive: "hive-b", op });
    expect(secrets.leaked(JSON.stringify(lines[0]))).toEqual([]);
  }
  // hive-b's slot is untouched: not renewed, not returned, nothing taken in its name.
  expect(await slots("hive-b").list()).toEqual([held]);
  expect(await slots("hive-b").return(held.id)).toBe(true);
  expect(await slots("hive-b").list()).toEqual([]);
});

test("a scoped member cannot even publish a slot request for another hive or another swarm: the server refuses it", async () => {
  const nc = members.get("hive-a")!.nc;
  for (const subject of ["slots.rig.hive-b", "slots.ops.hive-a"]) {
    const error = await nc.request(subject, encodeSlotRequest({ op: "list", hive: "hive-b" }), { timeout: 5_000 }).catch((e: unknown) => e);
    expect(String((error as { cause?: Error }).cause?.message), subject).toBe(`Permissions Violation for Publish to "${subject}"`);
  }
  const asOther = await refusal(new SlotClient(nc, { hive: "hive-b", swarm: "rig" }).take());
  expect(asOther.reason).toBe("slot_forbidden");
  expect(asOther.message).toBe("the NATS server refused the slot request on slots.rig.hive-b: the credential does not grant it");
  expect(await slots("hive-b").list()).toEqual([]);
});

test("an unscoped member requests on slots.*.<its hive>, and only there", async () => {
  const u = slots("hive-u", "any-swarm");
  const slot = await u.take({ account: "alpha" });
  expect(slot).toMatchObject({ hive: "hive-u", swarm: "any-swarm" });
  expect(await u.return(slot.id)).toBe(true);
  const nc = members.get("hive-u")!.nc;
  const error = await nc.request("slots.rig.hive-a", encodeSlotRequest({ op: "list", hive: "hive-a" }), { timeout: 5_000 }).catch((e: unknown) => e);
  expect(String((error as { cause?: Error }).cause?.message)).toBe('Permissions Violation for Publish to "slots.rig.hive-a"');
});

test("malformed requests are refused with slot_invalid", async () => {
  const nc = members.get("hive-a")!.nc;
  const cases: [string, string][] = [
    ["not json", "a slot request is a JSON object"],
    [JSON.stringify({ op: "steal", hive: "hive-a" }), "op must be one of take, renew, return, list"],
    [JSON.stringify({ op: "take", hive: "hive-a", account: "omega" }), "the hub has no slot account omega"],
    [JSON.stringify({ op: "take", hive: "hive-a", lease_seconds: 0 }), "lease_seconds must be a whole number from 1 to 3600"],
    [JSON.stringify({ op: "renew", hive: "hive-a", slot: "alpha.x" }), "a slot id is <account>.<index>.<generation>, as take answered it"],
    [JSON.stringify({ op: "list", hive: "hive-a", extra: 1 }), 'a list request has no field "extra"'],
  ];
  for (const [body, message] of cases) {
    const answer = await requestSlotRaw({ nc, subject: "slots.rig.hive-a", body: new TextEncoder().encode(body) });
    expect(answer, body).toMatchObject({ ok: false, error: { reason: "slot_invalid", message } });
  }
});

test("the slot settings: defaults, and refusals that name the variable", () => {
  expect(slotPolicyFromEnv({})).toEqual(DEFAULT_SLOT_POLICY);
  expect(slotPolicyFromEnv({ LANEWAY_HIVE_SLOT_ACCOUNTS: "claude-a:2, claude-b:3", LANEWAY_HIVE_SLOTS_PER_HIVE: "2" })).toEqual({
    accounts: new Map([
      ["claude-a", 2],
      ["claude-b", 3],
    ]),
    maxPerHive: 2,
  });
  expect(() => slotPolicyFromEnv({ LANEWAY_HIVE_SLOT_ACCOUNTS: "Claude:2" })).toThrow(/^LANEWAY_HIVE_SLOT_ACCOUNTS must be name:slots/);
  expect(() => slotPolicyFromEnv({ LANEWAY_HIVE_SLOT_ACCOUNTS: "a:0" })).toThrow(/LANEWAY_HIVE_SLOT_ACCOUNTS/);
  expect(() => slotPolicyFromEnv({ LANEWAY_HIVE_SLOT_ACCOUNTS: "a:1,a:2" })).toThrow("LANEWAY_HIVE_SLOT_ACCOUNTS names the account a twice");
  expect(() => slotPolicyFromEnv({ LANEWAY_HIVE_SLOTS_PER_HIVE: "none" })).toThrow("LANEWAY_HIVE_SLOTS_PER_HIVE must be a whole number from 1 to 999999");
});
