import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { encodeAccount, encodeOperator, encodeUser, fmtCreds } from "@nats-io/jwt";
import { createAccount, createOperator, createUser } from "@nats-io/nkeys";
import { afterAll, describe, expect, it } from "vitest";

import { BrokerConnection } from "../../src/nats/broker-connection.js";
import { BrokerPermissionError, BrokerUnavailableError } from "../../src/nats/index.js";
import { removeAllNatsServers, startNatsServer } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

afterAll(removeAllNatsServers);

/** Decentralized JWT auth: an operator, a system account, and an app account with JetStream. */
async function operatorSetup() {
  const operator = createOperator();
  const system = createAccount();
  const app = createAccount();
  const operatorJwt = await encodeOperator("laneway-test-op", operator, {
    system_account: system.getPublicKey(),
  });
  const systemJwt = await encodeAccount("SYS", system, {}, { signer: operator });
  const appJwt = await encodeAccount(
    "APP",
    app,
    {
      // Unset limits mean 0 (no connections at all), so spell out "unlimited".
      limits: {
        conn: -1,
        subs: -1,
        data: -1,
        payload: -1,
        imports: -1,
        exports: -1,
        leaf: -1,
        wildcards: true,
        disk_storage: -1,
        mem_storage: -1,
        streams: -1,
        consumer: -1,
      },
    },
    { signer: operator },
  );
  const user = createUser();
  const userJwt = await encodeUser("lane-user", user, app, {
    pub: { allow: ["$JS.API.>", "app.>"] },
    sub: { allow: ["_INBOX.lane-user.>"] },
  });
  return {
    extraConfig: {
      operator: operatorJwt,
      system_account: system.getPublicKey(),
      resolver: "MEMORY",
      resolver_preload: { [system.getPublicKey()]: systemJwt, [app.getPublicKey()]: appJwt },
    },
    creds: fmtCreds(userJwt, user),
  };
}

describe("BrokerConnection with a .creds file", () => {
  it("authenticates with the credentials file and the inbox prefix a scoped user needs", async () => {
    const { extraConfig, creds } = await operatorSetup();
    const server = await startNatsServer({ extraConfig });
    const credentialsFile = join(server.storeDir, "lane-user.creds");
    await writeFile(credentialsFile, creds, { mode: 0o600 });

    const broker = await BrokerConnection.open({
      servers: server.url,
      credentialsFile,
      inboxPrefix: "_INBOX.lane-user",
      name: "laneway-creds-test",
    });
    try {
      expect(broker.state).toBe("connected");
      await broker.jetstreamManager().streams.add({ name: "APP", subjects: ["app.>"] });
      const ack = await broker.jetstream().publish("app.x", new TextEncoder().encode("hi"));
      expect(ack.seq).toBe(1);

      // The credentials are read again on reconnect.
      await server.kill("SIGKILL");
      await server.restart();
      await waitFor(() => broker.state === "connected" && broker.generation >= 2, { what: "reconnect with creds" });
      expect((await broker.jetstreamManager().streams.info("APP")).state.messages).toBe(1);
    } finally {
      await broker.close();
    }

    // Without the prefix the user may not subscribe to its reply inbox: the
    // JetStream check at connect fails with a typed permission error.
    const noPrefix = await BrokerConnection.open({ servers: server.url, credentialsFile }).catch((e: unknown) => e);
    expect(noPrefix).toBeInstanceOf(BrokerPermissionError);
    expect((noPrefix as BrokerPermissionError).operation).toBe("subscription");
    expect((noPrefix as Error).message).not.toContain("127.0.0.1");
    await server.remove();
  });

  it("reports an unreadable credentials file as unavailable without naming the path", async () => {
    const server = await startNatsServer();
    const err = await BrokerConnection.open({
      servers: server.url,
      credentialsFile: join(server.storeDir, "missing.creds"),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerUnavailableError);
    expect((err as BrokerUnavailableError).reason).toBe("credentials_unreadable");
    expect((err as Error).message).not.toContain("missing.creds");
    await server.remove();
  });
});
