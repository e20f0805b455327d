import { createClient } from "@connectrpc/connect";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { createLanewayTransport, HiveHubService, HiveMemberService } from "laneway/client";

// A member's lifecycle, end to end: the operator invites hive-b into swarm
// rig, the member joins and connects to NATS with the credential it was
// minted, the NATS server lets it publish under swarm.rig and refuses
// swarm.other, a refresh revokes the previous credential, and retiring the
// member revokes the current one and voids its invite.
const baseUrl = process.env.LANEWAY_ADDRESS ?? "http://127.0.0.1:7600";
const operator = createLanewayTransport({ baseUrl, token: process.env.LANEWAY_ADMIN_TOKEN });
const hub = createClient(HiveHubService, operator.transport);

await hub.scope({ swarms: ["rig"] });
const invite = await hub.invite({ memberId: "hive-b", swarms: ["rig"] });
const asMember = createLanewayTransport({ baseUrl, token: invite.inviteSecret });
const member = createClient(HiveMemberService, asMember.transport);

const joined = (await member.join({})).credential!;
console.log(`joined as ${joined.memberId}: scoped to ${joined.swarms.join(", ")}`);

const nc = await connect({
  servers: joined.busUrl,
  authenticator: credsAuthenticator(new TextEncoder().encode(joined.creds)),
  inboxPrefix: joined.inboxPrefix, // replies reach the member only under _INBOX.hive-b
  reconnect: false,
});
for (const subject of ["swarm.rig.events.hello", "swarm.other.queue.eng.work"]) {
  try {
    await nc.request(subject, "{}", { timeout: 5_000 });
    console.log(`${subject}: allowed`);
  } catch (error) {
    const cause = (error as { cause?: Error }).cause;
    // No responders means the server let the request through.
    console.log(`${subject}: ${cause?.message.includes("Permissions Violation") ? cause.message : "allowed"}`);
  }
}

const revoked = nc.closed();
await member.refresh({});
console.log(`refreshed: the previous credential was ${/revoked/i.test(String((await revoked)?.message)) ? "revoked" : "kept"}`);

await hub.retireMember({ memberId: "hive-b" });
const again = await member.refresh({}).catch((error: Error) => error);
console.log(`retired: the invite ${again instanceof Error ? "no longer authenticates" : "still works"}`);

asMember.close();
operator.close();
