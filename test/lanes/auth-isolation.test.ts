import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LaneService } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import type { WireProtocol } from "../../src/client/transport.js";
import { startLanewayInProcess, type InProcessLaneway } from "../helpers/laneway.js";
import { eventOn, failure, firstFollowMessage, newToken, reasonOf, registryWithStranger, type LaneClient } from "../helpers/lanes.js";
import { startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

/**
 * Auth isolation, table-driven: every project of the registry (the
 * specification's atlas and beacon, and cinder, configured with no
 * capability) against every lane and every read or write, over Connect
 * JSON, Connect binary and gRPC. Only the lists grant: publishers publish,
 * subscribers replay and follow; ownership, group membership and recovery
 * grant neither. A missing or unknown token is unauthenticated, the
 * operator token is refused, and no refusal echoes a token.
 */

type Project = "atlas" | "beacon" | "cinder";
type Action = "publish" | "replay" | "follow";

/** Who may do what, straight from registryWithStranger(). */
const grants: Record<string, { publish: Project[]; subscribe: Project[] }> = {
  measurements: { publish: ["atlas", "beacon"], subscribe: ["atlas", "beacon"] },
  "atlas-owned": { publish: ["beacon"], subscribe: ["beacon"] },
  "beacon-feed": { publish: ["beacon"], subscribe: ["atlas"] },
  summaries: { publish: ["atlas"], subscribe: [] },
  // Not configured at all: refused exactly like a lane without the capability.
  "no-such-lane": { publish: [], subscribe: [] },
};
const projects: Project[] = ["atlas", "beacon", "cinder"];
const actions: Action[] = ["publish", "replay", "follow"];
const protocols: WireProtocol[] = ["connect-json", "connect-binary", "grpc"];

const cases = projects.flatMap((project) =>
  Object.keys(grants).flatMap((lane) =>
    actions.map((action) => ({
      project,
      lane,
      action,
      allowed: (action === "publish" ? grants[lane]!.publish : grants[lane]!.subscribe).includes(project),
    })),
  ),
);

let nats: NatsServerHandle;
let laneway: InProcessLaneway;
const cinderToken = newToken();
let counter = 0;

function tokenOf(project: Project): string {
  return project === "cinder" ? cinderToken : laneway.tokens[project];
}

/** Runs one action; resolves with what the caller got back. */
async function act(client: LaneClient, action: Action, lane: string): Promise<unknown> {
  switch (action) {
    case "publish":
      return client.publish(eventOn(`auth-${++counter}`, { n: counter }, { lane }));
    case "replay":
      return client.replay({ lane, cursor: 0n });
    case "follow": {
      const abort = new AbortController();
      try {
        return await firstFollowMessage(client, lane, 0n, abort);
      } finally {
        abort.abort();
      }
    }
  }
}

beforeAll(async () => {
  nats = await startNatsServer();
  laneway = await startLanewayInProcess({ natsUrl: nats.url, lanesConfig: registryWithStranger(), env: { CINDER_LANE_TOKEN: cinderToken } });
  // One record on every configured lane, so an allowed follower's first
  // message (the retained events) arrives at once.
  const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  await beacon.publish(eventOn("seed", { seed: true }, { lane: "measurements" }));
  await beacon.publish(eventOn("seed", { seed: true }, { lane: "atlas-owned" }));
  await beacon.publish(eventOn("seed", { seed: true }, { lane: "beacon-feed" }));
  await atlas.publish(eventOn("seed", { seed: true }, { lane: "summaries" }));
});

afterAll(async () => {
  await laneway?.stop();
  await nats?.remove();
});

test("the registry shows each project its own capabilities: ownership, membership and recovery are listed but grant nothing else", async () => {
  const view = async (project: Project) => {
    const registry = await laneway.clients.client(LaneService, { token: tokenOf(project) }).getRegistry({});
    return registry.lanes.map((l) => ({ lane: l.lane, owner: l.owner, publish: l.publish, subscribe: l.subscribe, groups: l.groups, recover: l.recoverGroups }));
  };
  expect(await view("atlas")).toEqual([
    { lane: "measurements", owner: "atlas", publish: true, subscribe: true, groups: [], recover: [] },
    { lane: "atlas-owned", owner: "atlas", publish: false, subscribe: false, groups: [], recover: [] },
    { lane: "beacon-feed", owner: "beacon", publish: false, subscribe: true, groups: [], recover: [] },
    { lane: "summaries", owner: "beacon", publish: true, subscribe: false, groups: [], recover: [] },
  ]);
  expect(await view("beacon")).toEqual([
    { lane: "measurements", owner: "atlas", publish: true, subscribe: true, groups: ["summarizers"], recover: ["summarizers"] },
    { lane: "atlas-owned", owner: "atlas", publish: true, subscribe: true, groups: [], recover: [] },
    { lane: "beacon-feed", owner: "beacon", publish: true, subscribe: false, groups: [], recover: [] },
    { lane: "summaries", owner: "beacon", publish: false, subscribe: false, groups: ["digest"], recover: ["digest"] },
  ]);
  expect(await view("cinder")).toEqual([]);
});

describe.each(protocols)("over %s", (protocol) => {
  test.each(cases)("$project $action on $lane: allowed=$allowed", async ({ project, lane, action, allowed }) => {
    const client = laneway.clients.client(LaneService, { token: tokenOf(project), protocol });
    if (allowed) {
      const result = await act(client, action, lane);
      if (action === "publish") expect((result as { record: { project: string } }).record.project).toBe(project);
      if (action === "replay") expect((result as { events: unknown[] }).events.length).toBeGreaterThan(0);
      if (action === "follow") expect((result as { cursor: bigint }).cursor).toBeGreaterThan(0n);
      return;
    }
    const error = await failure(() => act(client, action, lane));
    expect({ code: Code[error.code], reason: reasonOf(error) }).toEqual({ code: Code[Code.PermissionDenied], reason: "lane_forbidden" });
    expect(error.rawMessage).toContain(project);
    for (const token of [laneway.tokens.atlas, laneway.tokens.beacon, laneway.tokens.admin, cinderToken]) {
      expect(error.rawMessage).not.toContain(token);
    }
  });

  const strangers = [
    { who: "no token", token: undefined, code: Code.Unauthenticated, reason: "unauthorized" },
    { who: "an unknown token", token: newToken(), code: Code.Unauthenticated, reason: "unauthorized" },
    { who: "the operator token", token: "operator", code: Code.PermissionDenied, reason: "forbidden" },
  ] as const;
  test.each(strangers.flatMap((s) => actions.map((action) => ({ ...s, action }))))(
    "$who cannot $action on any lane",
    async ({ token, action, code, reason }) => {
      const bearer = token === "operator" ? laneway.tokens.admin : token;
      const client = laneway.clients.client(LaneService, { token: bearer, protocol });
      for (const lane of ["measurements", "no-such-lane"]) {
        const error = await failure(() => act(client, action, lane));
        expect({ code: Code[error.code], reason: reasonOf(error) }).toEqual({ code: Code[code], reason });
        if (bearer !== undefined) expect(error.rawMessage).not.toContain(bearer);
      }
    },
  );
});

test("refused calls left nothing behind: only allowed publications are in the lanes", async () => {
  // Every refused publish above used a fresh id; none of them may be stored.
  const stored = new Map<string, string[]>();
  for (const [lane, grant] of Object.entries(grants)) {
    const reader = grant.subscribe[0];
    if (reader === undefined) continue;
    const client = laneway.clients.client(LaneService, { token: tokenOf(reader) });
    const page = await client.replay({ lane, cursor: 0n });
    stored.set(lane, [...new Set(page.events.map((e) => e.project))].sort());
  }
  expect(Object.fromEntries(stored)).toEqual({
    measurements: ["atlas", "beacon"],
    "atlas-owned": ["beacon"],
    "beacon-feed": ["beacon"],
  });
});
