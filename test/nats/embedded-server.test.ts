import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, describe, expect, it } from "vitest";

import { DEFAULT_MAX_PAYLOAD, EmbeddedNatsServer } from "../../src/nats/embedded-server.js";
import {
  EmbeddedServerConfigError,
  EmbeddedServerExitedError,
  NatsServerNotInstalledError,
} from "../../src/nats/index.js";
import { inspectNatsServerBinary, NATS_SERVER_BIN_ENV, resolveNatsServerBinary } from "../../src/nats/nats-server-binary.js";
import { removeAllNatsServers, startNatsServer } from "../helpers/nats-server.js";

afterAll(removeAllNatsServers);

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("embedded nats-server", () => {
  it("starts with JetStream on a free loopback port, and stop ends the process", async () => {
    const handle = await startNatsServer();
    const { server } = handle;
    expect(server.host).toBe("127.0.0.1");
    expect(server.port).toBeGreaterThan(0);
    expect(server.url).toBe(`nats://127.0.0.1:${server.port}`);
    expect(processExists(server.pid)).toBe(true);

    const nc = await connect({ servers: server.url, reconnect: false });
    try {
      expect(nc.info?.max_payload).toBe(DEFAULT_MAX_PAYLOAD);
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: "EMB", subjects: ["emb.>"] });
      const js = jsm.jetstream();
      const ack = await js.publish("emb.one", new TextEncoder().encode("hello"));
      expect(ack).toMatchObject({ stream: "EMB", seq: 1, duplicate: false });
      const stored = await jsm.streams.getMessage("EMB", { seq: 1 });
      expect(stored?.string()).toBe("hello");
    } finally {
      await nc.close();
    }

    // The JetStream store lives under the given directory.
    expect((await stat(join(handle.storeDir, "jetstream"))).isDirectory()).toBe(true);

    const pid = server.pid;
    const exit = await server.stop();
    // Graceful: no SIGKILL was needed (2.9.10 exits with code 1 on SIGTERM).
    expect(exit.forced).toBe(false);
    expect(exit.signal).toBeNull();
    expect(server.exited).toBe(true);
    expect(processExists(pid)).toBe(false);
    await handle.remove();
    await expect(stat(handle.storeDir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("applies sync_interval: always exactly when the installed server supports it", async () => {
    const caps = await inspectNatsServerBinary(await resolveNatsServerBinary());
    const handle = await startNatsServer();
    const config = await readFile(handle.server.configPath, "utf8");
    expect(handle.server.syncAlways).toBe(caps.supportsSyncInterval);
    expect(config.includes("sync_interval")).toBe(caps.supportsSyncInterval);
    expect(handle.server.serverVersion).toBe(caps.version);
    if (caps.version === "2.9.10") {
      // 2.9.10 rejects the field (`unknown field "sync_interval"`).
      expect(caps.supportsSyncInterval).toBe(false);
    }
    await handle.remove();
  });

  it("restarts on the same port with the same store, keeping acknowledged messages", async () => {
    const handle = await startNatsServer();
    const port = handle.port;
    let nc = await connect({ servers: handle.url, reconnect: false });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "KEEP", subjects: ["keep.>"] });
    await jsm.jetstream().publish("keep.a", new TextEncoder().encode("kept"));
    await nc.close();

    const oldPid = handle.pid;
    await handle.kill("SIGKILL");
    expect(handle.running).toBe(false);
    await handle.restart();
    expect(handle.port).toBe(port);
    expect(handle.pid).not.toBe(oldPid);

    nc = await connect({ servers: handle.url, reconnect: false });
    try {
      const jsm2 = await jetstreamManager(nc);
      const msg = await jsm2.streams.getMessage("KEEP", { seq: 1 });
      expect(msg?.string()).toBe("kept");
    } finally {
      await nc.close();
    }
    await handle.remove();
  });

  it("pause and resume keep the server usable", async () => {
    const handle = await startNatsServer();
    await handle.pause();
    await handle.resume();
    const nc = await connect({ servers: handle.url, reconnect: false });
    const jsm = await jetstreamManager(nc);
    expect((await jsm.getAccountInfo()).streams).toBe(0);
    await nc.close();
    // A paused server still stops gracefully (SIGTERM is followed by SIGCONT).
    await handle.pause();
    await handle.remove();
    expect(handle.running).toBe(false);
  });

  it("reports a missing binary with a one-line install hint", async () => {
    const dir = await mkdtemp(join(tmpdir(), "laneway-nats-missing-"));
    try {
      const err = await EmbeddedNatsServer.start({ storeDir: dir, binary: "/nonexistent/nats-server" }).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(NatsServerNotInstalledError);
      const message = (err as Error).message;
      expect(message).toContain("apt-get install -y nats-server");
      expect(message).not.toContain("\n");

      const previous = process.env[NATS_SERVER_BIN_ENV];
      process.env[NATS_SERVER_BIN_ENV] = join(dir, "no-such-nats-server");
      try {
        await expect(EmbeddedNatsServer.start({ storeDir: dir })).rejects.toBeInstanceOf(NatsServerNotInstalledError);
      } finally {
        if (previous === undefined) delete process.env[NATS_SERVER_BIN_ENV];
        else process.env[NATS_SERVER_BIN_ENV] = previous;
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("rejects an invalid extra config with a typed error that keeps the log out of the message", async () => {
    const err = await startNatsServer({ extraConfigText: "this_is_not_an_option: 1" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EmbeddedServerConfigError);
    const configError = err as EmbeddedServerConfigError;
    expect(configError.logTail.join("\n")).toContain("this_is_not_an_option");
    expect(configError.message).not.toContain("this_is_not_an_option");
  });

  it("reports a server that exits during startup (port taken) with a typed error", async () => {
    const first = await startNatsServer();
    const dir = await mkdtemp(join(tmpdir(), "laneway-nats-conflict-"));
    try {
      const err = await EmbeddedNatsServer.start({ storeDir: dir, port: first.port }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(EmbeddedServerExitedError);
      const exited = err as EmbeddedServerExitedError;
      expect(exited.logTail.length).toBeGreaterThan(0);
      expect(exited.message).not.toContain(String(first.port));
      expect(exited.message).not.toContain("127.0.0.1");
      expect(exited.message).not.toContain("\n");
    } finally {
      await rm(dir, { recursive: true, force: true });
      await first.remove();
    }
  });
});
