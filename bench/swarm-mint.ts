/**
 * Swarm credential minting: a member's Refresh through Laneway (end to
 * end: authenticate the invite secret, reread the signer record, decide
 * the grant, mint the user JWT, store the new key, push the hive account
 * with the previous key revoked to the NATS server, rotate the member's
 * Redis ACL password) against minting the same user JWT directly with
 * `@nats-io/jwt` in this process (key pair, the same claims, signature,
 * `.creds` text) — both measured in this run.
 *
 * Processes: `laneway serve` (the embedded nats-server in operator mode,
 * after `hive init` in a temporary data directory) with a redis-server of
 * this benchmark's own on a free port; the clients (generated, Connect
 * binary over HTTP/1.1) and the raw baseline run here.
 *
 * Two raw baselines: `@nats-io/jwt` with `@nats-io/nkeys` key pairs (what a
 * caller of the library gets: pure JavaScript Ed25519, the key pair derived
 * again on every use), and `@nats-io/jwt` with the Node Ed25519 key pairs
 * Laneway signs with (src/nats/native-keys.ts), which isolates what the
 * hub adds around the mint.
 *
 * Reported, for an unscoped grant and a grant scoped to one swarm (a
 * larger JWT: 102 publish subjects): minted credentials per second with 1
 * and 8 refreshes in flight (members are distinct; the hub serializes its
 * changes), the median and 99th percentile time of one refresh, and the
 * ratio to the raw mint rate. Nothing is asserted.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createAccount, createUser, fromPublic } from "@nats-io/nkeys";
import { encodeUser, fmtCreds } from "@nats-io/jwt";
import { HiveHubService } from "../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService } from "../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { createLanewayTransport, type LanewayTransport } from "../src/client/transport.js";
import { initHive, renderMemberGrant, userClaims, type GrantDecision } from "../src/swarm/index.js";
import { NativeKeyPair } from "../src/nats/index.js";
import { benchSeconds, median, percentile, printTable, startListening } from "./harness.js";
import { startRedis } from "../test/helpers/redis.js";

const MEMBERS = 8;

/**
 * Raw baseline: the same claims minted with @nats-io/jwt, sequentially, for
 * `seconds`, with @nats-io/nkeys key pairs (`nkeys`) or with the native
 * Ed25519 key pairs Laneway uses (`native`).
 */
async function rawMints(decision: GrantDecision, seconds: number, keys: "nkeys" | "native"): Promise<number> {
  const signer = keys === "nkeys" ? createAccount() : NativeKeyPair.create("account");
  const account = fromPublic(createAccount().getPublicKey());
  const claims = userClaims(renderMemberGrant("hive-bench", decision));
  const deadline = Date.now() + seconds * 1000;
  let count = 0;
  const started = performance.now();
  while (Date.now() < deadline) {
    const user = keys === "nkeys" ? createUser() : NativeKeyPair.create("user");
    const jwt = await encodeUser("hive-bench", user, account, claims, { signer, exp: Math.floor(Date.now() / 1000) + 3600 });
    fmtCreds(jwt, user);
    count += 1;
  }
  return count / ((performance.now() - started) / 1000);
}

/** Closed-loop refreshes with `inFlight` distinct members; returns rate and per-call latencies (ms). */
async function refreshes(members: Client<typeof HiveMemberService>[], inFlight: number, seconds: number): Promise<{ rate: number; latencies: number[] }> {
  const latencies: number[] = [];
  const deadline = Date.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    members.slice(0, inFlight).map(async (member) => {
      while (Date.now() < deadline) {
        const t0 = performance.now();
        await member.refresh({});
        latencies.push(performance.now() - t0);
      }
    }),
  );
  return { rate: latencies.length / ((performance.now() - started) / 1000), latencies };
}

export async function swarmMint(): Promise<void> {
  const seconds = benchSeconds(5);
  const dataDir = await mkdtemp(join(tmpdir(), "laneway-bench-swarm-"));
  const redis = await startRedis();
  const transports: LanewayTransport[] = [];
  const admin = randomBytes(32).toString("hex");
  await initHive(dataDir, { natsListen: "127.0.0.1:0" });
  const laneway = await startListening("src/cli/main.ts", ["serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--shutdown-timeout", "5s"], {
    LANEWAY_ADMIN_TOKEN: admin,
    LANEWAY_HIVE_REDIS_URL: redis.adminUrl,
  });
  try {
    const client = <S extends typeof HiveHubService | typeof HiveMemberService>(service: S, token: string) => {
      const t = createLanewayTransport({ baseUrl: laneway.url, protocol: "connect-binary", token });
      transports.push(t);
      return createClient(service, t.transport);
    };
    const hub = client(HiveHubService, admin);
    const rows: string[][] = [];
    for (const [label, decision] of [
      ["unscoped grant", { kind: "unscoped" }],
      ["scoped to 1 swarm", { kind: "scoped", swarms: ["rig"] }],
    ] as const) {
      const members: Client<typeof HiveMemberService>[] = [];
      for (let i = 0; i < MEMBERS; i++) {
        const id = `hive-${decision.kind}-${i}`;
        if (decision.kind === "scoped" && i === 0) await hub.scope({ swarms: ["rig"] });
        const invite = await hub.invite({ memberId: id, swarms: decision.kind === "scoped" ? ["rig"] : [] });
        const member = client(HiveMemberService, invite.inviteSecret);
        const joined = (await member.join({})).credential!;
        if (joined.scoped !== (decision.kind === "scoped")) throw new Error(`${id} was minted the wrong grant`);
        members.push(member);
      }
      // Warm up, then interleave the raw and the Laneway rounds.
      await refreshes(members, MEMBERS, 0.5);
      const raw: number[] = [];
      const rawNative: number[] = [];
      const one: { rate: number; latencies: number[] }[] = [];
      const eight: number[] = [];
      for (let round = 0; round < 3; round++) {
        raw.push(await rawMints(decision, seconds / 3, "nkeys"));
        rawNative.push(await rawMints(decision, seconds / 3, "native"));
        one.push(await refreshes(members, 1, seconds / 3));
        eight.push((await refreshes(members, MEMBERS, seconds / 3)).rate);
      }
      const rawRate = median(raw);
      const nativeRate = median(rawNative);
      const latencies = one.flatMap((r) => r.latencies);
      const ratios = (rate: number) => [(rate / rawRate).toFixed(3), (rate / nativeRate).toFixed(3)];
      rows.push([label, "raw @nats-io/jwt mint (nkeys keys)", rawRate.toFixed(0), "", "", ...ratios(rawRate)]);
      rows.push([label, "raw @nats-io/jwt mint (native Ed25519 keys)", nativeRate.toFixed(0), "", "", ...ratios(nativeRate)]);
      const oneRate = median(one.map((r) => r.rate));
      rows.push([label, "Laneway Refresh, 1 in flight", oneRate.toFixed(0), median(latencies).toFixed(2), percentile(latencies, 99).toFixed(2), ...ratios(oneRate)]);
      rows.push([label, `Laneway Refresh, ${MEMBERS} in flight`, median(eight).toFixed(0), "", "", ...ratios(median(eight))]);
    }
    console.log(`\nswarm-mint: credential minting (${seconds}s per measurement, medians of 3 interleaved rounds)`);
    printTable(["grant", "path", "credentials/s", "refresh p50 ms", "refresh p99 ms", "ratio to raw (nkeys)", "ratio to raw (native)"], rows);
    console.log("A Refresh is end to end: authentication, the signer record reread, the JWT minted, the previous key revoked on the NATS server, the Redis password rotated.");
  } finally {
    for (const t of transports) t.close();
    await laneway.stop();
    await redis.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}
