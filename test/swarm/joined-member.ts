/**
 * A member as a hive member really is: invited by the operator through the
 * generated HiveHubService client, joined through HiveMemberService with
 * its invite secret, and on NATS only with the credential that join minted
 * (raw connections with its inbox prefix, or the scoped bus in bind mode
 * from its hive.env settings). Nothing here grants it more.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { expect } from "vitest";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { HiveMemberService, type MemberCredential } from "../../gen/laneway/swarm/v1/hive_member_service_pb.js";
import { openBus, type Bus } from "../../src/swarm-bus/index.js";
import type { InProcessLaneway } from "../helpers/laneway.js";
import { connectWithCreds } from "./hive-fixture.js";

export interface JoinedMember {
  readonly memberId: string;
  readonly secret: string;
  readonly credential: MemberCredential;
  readonly credsPath: string;
  /** A raw NATS connection with the minted credential and its inbox prefix, with JetStream handles (no `$JS.API.INFO`). */
  raw(): Promise<{ nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager }>;
  /** The scoped bus in bind mode with the minted credential, as hive.env configures it. */
  bus(): Promise<Bus>;
  close(): Promise<void>;
}

/** Invites `memberId` (with `swarms`, when the field exists) and joins it. */
export async function joinMember(laneway: InProcessLaneway, adminToken: string, dir: string, memberId: string, swarms: readonly string[] = []): Promise<JoinedMember> {
  const hub = laneway.clients.client(HiveHubService, { token: adminToken });
  const invite = await hub.invite({ memberId, swarms: [...swarms] });
  const member = laneway.clients.client(HiveMemberService, { token: invite.inviteSecret });
  const credential = (await member.join({})).credential!;
  expect(credential.memberId).toBe(memberId);
  const credsPath = join(dir, `${memberId}.creds`);
  await writeFile(credsPath, credential.creds, { mode: 0o600 });
  const connections: NatsConnection[] = [];
  const buses: Bus[] = [];
  return {
    memberId,
    secret: invite.inviteSecret,
    credential,
    credsPath,
    async raw() {
      const nc = await connectWithCreds(credential.busUrl, credential.creds, credential.inboxPrefix);
      connections.push(nc);
      return { nc, js: jetstream(nc, { timeout: 10_000 }), jsm: await jetstreamManager(nc, { checkAPI: false, timeout: 10_000 }) };
    },
    async bus() {
      const bus = await openBus({ backend: "nats", url: credential.busUrl, credentials: credsPath, scoped: credential.scoped, bind: true });
      buses.push(bus);
      return bus;
    },
    async close() {
      for (const bus of buses) await bus.close().catch(() => undefined);
      for (const nc of connections) await nc.close().catch(() => undefined);
    },
  };
}

/** The server's refusal of a publish: a permissions violation naming the subject. */
export async function refusedByServer(attempt: Promise<unknown>, subject: string): Promise<void> {
  const error = (await attempt.then(
    () => undefined,
    (e: unknown) => e,
  )) as (Error & { cause?: Error }) | undefined;
  expect(error, `the server should refuse ${subject}`).toBeDefined();
  expect(`${error!.message} ${error!.cause?.message ?? ""}`).toContain(`Permissions Violation for Publish to "${subject}"`);
}
