import { afterAll, describe, expect, it } from "vitest";

import { BrokerConnection, type BrokerStateChange } from "../../src/nats/broker-connection.js";
import { BrokerUnavailableError, classifyNatsError } from "../../src/nats/index.js";
import { removeAllNatsServers, startNatsServer } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

afterAll(removeAllNatsServers);

const encode = (s: string): Uint8Array => new TextEncoder().encode(s);
const fastBackoff = { initialMs: 20, maxMs: 200 };

describe("BrokerConnection", () => {
  it("connects and exposes working JetStream, KV and core handles", async () => {
    const server = await startNatsServer();
    const broker = await BrokerConnection.open({ servers: server.url, name: "laneway-test" });
    try {
      expect(broker.state).toBe("connected");
      expect(broker.generation).toBe(1);
      await broker.jetstreamManager().streams.add({ name: "S", subjects: ["s.>"] });
      const ack = await broker.jetstream().publish("s.a", encode("one"));
      expect(ack.seq).toBe(1);
      const kv = await broker.kvm().create("B");
      expect(await kv.put("k", encode("v"))).toBe(1);
      expect(broker.connection().isClosed()).toBe(false);
    } finally {
      await broker.close();
      await server.remove();
    }
    expect(broker.state).toBe("closed");
    expect(() => broker.connection()).toThrow(BrokerUnavailableError);
  });

  it("fails at once while the broker is down, queues nothing, and reconnects by itself", async () => {
    const server = await startNatsServer();
    const broker = await BrokerConnection.open({ servers: server.url, backoff: fastBackoff });
    const changes: BrokerStateChange[] = [];
    broker.onStateChange((c) => changes.push(c));
    try {
      await broker.jetstreamManager().streams.add({ name: "LANE", subjects: ["lane.>"] });
      await broker.jetstream().publish("lane.x", encode("before"));
      const staleJs = broker.jetstream();
      const staleNc = broker.connection();

      await server.kill("SIGKILL");
      await waitFor(() => broker.state !== "connected", { what: "disconnect noticed" });

      // Every accessor throws the typed error immediately.
      for (const get of [
        () => broker.connection(),
        () => broker.jetstream(),
        () => broker.jetstreamManager(),
        () => broker.kvm(),
      ]) {
        expect(get).toThrow(BrokerUnavailableError);
      }
      // Handles from before fail at once too (no reconnect buffer, no wait).
      const stalePublish = await staleJs.publish("lane.x", encode("while-down")).then(
        () => "published",
        (e: unknown) => classifyNatsError(e),
      );
      expect(stalePublish).toBeInstanceOf(BrokerUnavailableError);
      expect(() => staleNc.publish("lane.x", encode("core-while-down"))).toThrow();
      expect(changes.some((c) => c.state === "disconnected")).toBe(true);
      const lost = changes.find((c) => c.state === "disconnected");
      expect(lost?.failure).toBeInstanceOf(BrokerUnavailableError);
      // Killed outright, the server said nothing: the socket just closed (or was reset).
      expect(["closed_by_server", "socket_error"]).toContain(lost?.disconnect);

      await server.restart();
      await waitFor(() => broker.state === "connected", { what: "reconnect" });
      expect(broker.generation).toBeGreaterThanOrEqual(2);

      // The publishes attempted while down were not queued and replayed.
      const info = await broker.jetstreamManager().streams.info("LANE");
      expect(info.state.messages).toBe(1);
      expect((await broker.jetstreamManager().streams.getMessage("LANE", { seq: 1 }))?.string()).toBe("before");
      const ack = await broker.jetstream().publish("lane.x", encode("after"));
      expect(ack.seq).toBe(2);

      // Observed transitions: connected → disconnected → (connecting ↔ disconnected)* → connected.
      const states = changes.map((c) => c.state);
      expect(states[0]).toBe("disconnected");
      expect(states.at(-1)).toBe("connected");
      expect(states).toContain("connecting");
      expect(changes.at(-1)?.generation).toBe(broker.generation);
    } finally {
      await broker.close();
      await server.remove();
    }
  });

  it("close() stops reconnecting", async () => {
    const server = await startNatsServer();
    const broker = await BrokerConnection.open({ servers: server.url, backoff: fastBackoff });
    const after: BrokerStateChange[] = [];
    await server.kill("SIGKILL");
    await waitFor(() => broker.state === "disconnected", { what: "disconnect" });
    await broker.close();
    expect(broker.state).toBe("closed");
    broker.onStateChange((c) => after.push(c));

    await server.restart();
    // A second connection with the same backoff gets through; the closed one
    // must stay closed and silent.
    const probe = await BrokerConnection.open({ servers: server.url, initialConnect: "retry", backoff: fastBackoff });
    await waitFor(() => probe.state === "connected", { what: "probe connected" });
    await probe.close();
    expect(broker.state).toBe("closed");
    expect(after).toEqual([]);
    expect(() => broker.jetstream()).toThrow(BrokerUnavailableError);
    await server.remove();
  });

  it("fail-fast initial connect rejects with a typed error that names no address", async () => {
    const server = await startNatsServer();
    const { url, port } = server;
    await server.stop();
    const err = await BrokerConnection.open({ servers: url }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerUnavailableError);
    expect((err as BrokerUnavailableError).reason).toBe("connection_failed");
    expect((err as Error).message).not.toContain("127.0.0.1");
    expect((err as Error).message).not.toContain(String(port));
    await server.remove();
  });

  it("retrying initial connect keeps trying in the background until the broker is up", async () => {
    const server = await startNatsServer();
    await server.stop();
    const broker = await BrokerConnection.open({ servers: server.url, initialConnect: "retry", backoff: fastBackoff });
    const changes: BrokerStateChange[] = [];
    broker.onStateChange((c) => changes.push(c));
    try {
      expect(["connecting", "disconnected"]).toContain(broker.state);
      expect(() => broker.jetstream()).toThrow(BrokerUnavailableError);
      await waitFor(() => changes.some((c) => c.state === "disconnected"), { what: "a failed attempt" });
      expect(broker.lastFailure).toBeInstanceOf(BrokerUnavailableError);

      await server.restart();
      await waitFor(() => broker.state === "connected", { what: "connected" });
      expect(broker.lastFailure).toBeUndefined();
      expect((await broker.jetstreamManager().getAccountInfo()).streams).toBe(0);
    } finally {
      await broker.close();
      await server.remove();
    }
  });

  it("treats a silent (paused) broker as a timeout, then as lost once pings go unanswered", async () => {
    const server = await startNatsServer();
    const broker = await BrokerConnection.open({
      servers: server.url,
      backoff: fastBackoff,
      pingIntervalMs: 200,
      maxPingOut: 2,
      jetstream: { timeout: 300 },
    });
    const changes: BrokerStateChange[] = [];
    broker.onStateChange((c) => changes.push(c));
    try {
      await server.pause();
      const outcome = await broker
        .jetstreamManager()
        .getAccountInfo()
        .then(
          () => "answered",
          (e: unknown) => classifyNatsError(e),
        );
      expect(outcome).not.toBe("answered");
      expect(["timeout", "unavailable"]).toContain((outcome as { kind: string }).kind);
      await waitFor(() => broker.state !== "connected", { what: "stale connection detected" });
      expect(() => broker.jetstream()).toThrow(BrokerUnavailableError);
      expect(changes.find((c) => c.state === "disconnected")?.disconnect).toBe("server_unresponsive");
      await server.resume();
      await waitFor(() => broker.state === "connected", { what: "reconnect after resume" });
      expect((await broker.jetstreamManager().getAccountInfo()).streams).toBe(0);
    } finally {
      await server.resume();
      await broker.close();
      await server.remove();
    }
  });
});
