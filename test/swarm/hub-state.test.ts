import { expect, test } from "vitest";
import {
  hiveAccountStateOf,
  initialHubState,
  memberByDigest,
  withInvitedMember,
  withMintedKey,
  withoutExpiredRevocations,
  withRetiredMember,
  withSigningKey,
} from "../../src/swarm/hub-state.js";

/**
 * The hub's state machine, with an explicit clock: what a join, a refresh
 * and a retirement do to the member record and the revocation list.
 */

const invited = withInvitedMember(initialHubState(), { memberId: "hive-a", secretDigest: "d1", invitedAt: 1_000, busUrl: "nats://127.0.0.1:4222", redisUser: false });
const key = (publicKey: string, issuedAt: number) => ({ publicKey, issuedAt, expiresAt: issuedAt + 60_000 });

test("the first credential revokes nothing; each later one revokes the keys held before", () => {
  const first = withMintedKey(invited, "hive-a", key("U1", 2_000));
  expect(first.members["hive-a"]?.keys.map((k) => k.publicKey)).toEqual(["U1"]);
  expect(first.revocations).toBe(invited.revocations);
  const second = withMintedKey(first, "hive-a", key("U2", 3_500));
  expect(second.members["hive-a"]?.keys.map((k) => k.publicKey)).toEqual(["U2"]);
  expect(second.revocations).toEqual({ U1: { revokedAt: 3, expiresAt: 62_000 } });
  expect(hiveAccountStateOf(second).revocations).toEqual({ U1: 3 });
  expect(second.members["hive-a"]?.lastMintedAt).toBe(3_500);
});

test("a revocation is never earlier than the revoked JWT's issue time (whole seconds)", () => {
  const minted = withMintedKey(invited, "hive-a", key("U1", 5_400)); // iat 5 s
  const retired = withRetiredMember(minted, "hive-a", 5_100); // a clock behind the mint
  expect(retired.revocations["U1"]?.revokedAt).toBe(6);
});

test("retiring deletes the record (its secret no longer resolves) and lists the member as retired", () => {
  const minted = withMintedKey(invited, "hive-a", key("U1", 2_000));
  expect(memberByDigest(minted, "d1")?.memberId).toBe("hive-a");
  const retired = withRetiredMember(minted, "hive-a", 9_000);
  expect(retired.members).toEqual({});
  expect(memberByDigest(retired, "d1")).toBeUndefined();
  expect(retired.retired["hive-a"]).toEqual({ memberId: "hive-a", retiredAt: 9_000, revokedKeys: 1 });
  expect(Object.keys(retired.revocations)).toEqual(["U1"]);
  expect(withRetiredMember(retired, "hive-a", 10_000)).toBe(retired);
});

test("revocations of credentials that expired are dropped; signing keys are listed once", () => {
  const second = withMintedKey(withMintedKey(invited, "hive-a", key("U1", 2_000)), "hive-a", key("U2", 3_000));
  expect(withoutExpiredRevocations(second, 61_999)).toBe(second);
  expect(withoutExpiredRevocations(second, 62_001).revocations).toEqual({});
  const signed = withSigningKey(withSigningKey(second, "AKEY"), "AKEY");
  expect(signed.signingKeys).toEqual(["AKEY"]);
});
