import { DiscardPolicy } from "@nats-io/jetstream";
import { connect, usernamePasswordAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { BrokerConnection } from "../../src/nats/broker-connection.js";
import {
  BrokerInvalidRequestError,
  BrokerPermissionError,
  BrokerTimeoutError,
  BrokerUnavailableError,
  classifyNatsError,
  classifyServerError,
  isSevereDisconnect,
  JetStreamErrorCode,
  JetStreamRejectedError,
  type NatsFailure,
} from "../../src/nats/index.js";
import { removeAllNatsServers, startNatsServer, type NatsServerHandle } from "../helpers/nats-server.js";

const encode = (s: string): Uint8Array => new TextEncoder().encode(s);

let server: NatsServerHandle;
let broker: BrokerConnection;

beforeAll(async () => {
  server = await startNatsServer({
    extraConfig: {
      authorization: {
        users: [
          { user: "laneway", password: "s3cret-pass" },
          { user: "limited", password: "limited-pass", permissions: { publish: { deny: ["forbidden.>"] } } },
        ],
      },
    },
  });
  broker = await BrokerConnection.open({
    servers: server.url,
    authenticator: usernamePasswordAuthenticator("laneway", "s3cret-pass"),
  });
});

afterAll(async () => {
  await broker?.close();
  await removeAllNatsServers();
});

/** Runs `op`, which must fail, and returns its classified error after checking it leaks nothing. */
async function failure(op: () => Promise<unknown>): Promise<NatsFailure> {
  const err = await op().then(
    () => {
      throw new Error("operation unexpectedly succeeded");
    },
    (e: unknown) => classifyNatsError(e),
  );
  expect(err.message).not.toContain("127.0.0.1");
  expect(err.message).not.toContain(String(server.port));
  expect(err.message).not.toContain("s3cret");
  expect(err.message).not.toContain("pass");
  expect(err.cause).toBeDefined();
  return err;
}

describe("classifyNatsError on real server errors", () => {
  it("keeps 10071 (wrong last sequence) from an expect-last-sequence publish", async () => {
    await broker.jetstreamManager().streams.add({ name: "SEQ", subjects: ["seq.>"] });
    await broker.jetstream().publish("seq.a", encode("1"));
    const err = await failure(() => broker.jetstream().publish("seq.a", encode("2"), { expect: { lastSequence: 7 } }));
    expect(err).toBeInstanceOf(JetStreamRejectedError);
    expect((err as JetStreamRejectedError).code).toBe(JetStreamErrorCode.WrongLastSequence);
    expect((err as JetStreamRejectedError).status).toBe(400);
    // The raw server text ("wrong last sequence: 1") is not passed through.
    expect(err.message).not.toContain(": 1");
  });

  it("keeps 10071 from a KV compare-and-set mismatch and a create of an existing key", async () => {
    const kv = await broker.kvm().create("CAS");
    const rev = await kv.create("k", encode("a"));
    const casErr = await failure(() => kv.update("k", encode("b"), rev + 5));
    expect((casErr as JetStreamRejectedError).code).toBe(10071);
    const createErr = await failure(() => kv.create("k", encode("c")));
    expect((createErr as JetStreamRejectedError).code).toBe(10071);
  });

  it("keeps 10077 (maximum messages exceeded) from a full DiscardNew stream", async () => {
    await broker.jetstreamManager().streams.add({
      name: "FULL",
      subjects: ["full.>"],
      max_msgs: 1,
      discard: DiscardPolicy.New,
    });
    await broker.jetstream().publish("full.a", encode("1"));
    const err = await failure(() => broker.jetstream().publish("full.a", encode("2")));
    expect(err).toBeInstanceOf(JetStreamRejectedError);
    expect((err as JetStreamRejectedError).code).toBe(JetStreamErrorCode.StoreFailed);
    expect(err.kind).toBe("jetstream");
  });

  it("keeps 10054 (message too big) and 10058 (stream exists with another config)", async () => {
    await broker.jetstreamManager().streams.add({ name: "SMALL", subjects: ["small.>"], max_msg_size: 8 });
    const big = await failure(() => broker.jetstream().publish("small.a", encode("0123456789abcdef")));
    expect((big as JetStreamRejectedError).code).toBe(JetStreamErrorCode.MessageTooBig);
    const exists = await failure(() =>
      broker.jetstreamManager().streams.add({ name: "SMALL", subjects: ["small.>"], max_msg_size: 16 }),
    );
    expect((exists as JetStreamRejectedError).code).toBe(JetStreamErrorCode.StreamNameExistsDifferentConfig);
  });

  it("classifies no responders as unavailable", async () => {
    const core = await failure(() => broker.connection().request("nobody.listens", encode("x"), { timeout: 2_000 }));
    expect(core).toBeInstanceOf(BrokerUnavailableError);
    expect((core as BrokerUnavailableError).reason).toBe("no_responders");
    // A JetStream publish to a subject no stream captures: nats.js says "jetstream is not enabled".
    const js = await failure(() => broker.jetstream().publish("no.stream.here", encode("x")));
    expect(js).toBeInstanceOf(BrokerUnavailableError);
    expect((js as BrokerUnavailableError).reason).toBe("no_responders");
  });

  it("classifies a request timeout as a deadline", async () => {
    const nc = broker.connection();
    const sub = nc.subscribe("silent.service");
    try {
      const err = await failure(() => nc.request("silent.service", encode("x"), { timeout: 100 }));
      expect(err).toBeInstanceOf(BrokerTimeoutError);
      expect(err.kind).toBe("timeout");
    } finally {
      sub.unsubscribe();
    }
  });

  it("classifies a denied request as a permission error without naming the subject in the message", async () => {
    const nc = await connect({ servers: server.url, user: "limited", pass: "limited-pass", reconnect: false });
    try {
      const err = await failure(() => nc.request("forbidden.thing", encode("x"), { timeout: 2_000 }));
      expect(err).toBeInstanceOf(BrokerPermissionError);
      expect((err as BrokerPermissionError).operation).toBe("publish");
      expect((err as BrokerPermissionError).subject).toBe("forbidden.thing");
      expect(err.message).not.toContain("forbidden.thing");
    } finally {
      await nc.close();
    }
  });

  it("classifies rejected credentials as unavailable (authentication)", async () => {
    const err = await failure(() =>
      BrokerConnection.open({
        servers: server.url,
        authenticator: usernamePasswordAuthenticator("laneway", "wrong-pass"),
      }),
    );
    expect(err).toBeInstanceOf(BrokerUnavailableError);
    expect((err as BrokerUnavailableError).reason).toBe("authentication");
  });

  it("classifies a payload over max_payload as an invalid request", async () => {
    const payload = new Uint8Array((server.server.maxPayload) + 1);
    const err = await failure(async () => broker.connection().publish("big.payload", payload));
    expect(err).toBeInstanceOf(BrokerInvalidRequestError);
    expect((err as BrokerInvalidRequestError).reason).toBe("max_payload_exceeded");
  });

  it("returns already classified errors unchanged", () => {
    const e = new BrokerUnavailableError("not_connected");
    expect(classifyNatsError(e)).toBe(e);
    expect(classifyNatsError(new Error("boom 127.0.0.1")).message).not.toContain("127.0.0.1");
  });
});

describe("classifyServerError on the texts nats-server closes a connection with", () => {
  it("names each known -ERR and log message with a fixed reason, and anything else server_error", () => {
    const cases: [string, string][] = [
      ["Stale Connection", "stale_connection"],
      ["Stale Client Connection - Closing", "stale_connection"],
      ["Slow Consumer Detected: WriteDeadline of 10s exceeded with 2 chunks of 524308 total bytes.", "slow_consumer"],
      ["Slow Consumer Detected: MaxPending of 67108864 Exceeded", "slow_consumer"],
      ["Authorization Violation", "authorization_violation"],
      ["Authentication Timeout", "authentication_timeout"],
      ["User Authentication Expired", "authentication_expired"],
      ["Account Authentication Expired", "authentication_expired"],
      ["User Authentication Revoked", "authentication_revoked"],
      ["maximum connections exceeded", "max_connections_exceeded"],
      ["Maximum Account Connections Exceeded", "max_connections_exceeded"],
      ["Maximum Payload Violation", "max_payload_violation"],
      ["Maximum Subscriptions Exceeded", "max_subscriptions_exceeded"],
      ["Unknown Protocol Operation", "protocol_violation"],
      ["Parser Error", "protocol_violation"],
      ["something new from a later server at 10.1.2.3:4222", "server_error"],
    ];
    for (const [text, reason] of cases) expect(classifyServerError(text), text).toBe(reason);
  });

  it("logs a cut-off as an error and an ordinary close as a warning", () => {
    for (const reason of ["broker_exited", "slow_consumer", "stale_connection", "server_unresponsive", "authorization_violation", "server_error"] as const) {
      expect(isSevereDisconnect(reason), reason).toBe(true);
    }
    for (const reason of ["closed_by_server", "socket_error", "lame_duck_mode", undefined] as const) expect(isSevereDisconnect(reason), reason).toBe(false);
  });
});
