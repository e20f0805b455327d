import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { connect as connectTcp } from "node:net";
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
import { rotatedLogFiles, SERVER_LOG_FILE } from "../../src/nats/server-log-file.js";
import { removeAllNatsServers, startNatsServer } from "../helpers/nats-server.js";
import { waitFor } from "../helpers/wait-for.js";

afterAll(removeAllNatsServers);

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Opens a raw client connection with a wrong password and waits for the
 * server's answer: each such attempt is one `authentication error` line in
 * the server's log. Resolves with the connection's `cid`.
 */
function failedLogin(port: number): Promise<number> {
  return new Promise((resolveLogin, reject) => {
    const socket = connectTcp({ host: "127.0.0.1", port });
    let received = "";
    let clientId = -1;
    socket.on("error", reject);
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("utf8");
      if (clientId < 0 && received.includes("\r\n")) {
        clientId = (JSON.parse(received.slice(5, received.indexOf("\r\n"))) as { client_id: number }).client_id;
        socket.write('CONNECT {"user":"nobody","pass":"wrong","verbose":false}\r\nPING\r\n');
      }
      if (received.includes("-ERR")) socket.destroy();
    });
    socket.on("close", () => resolveLogin(clientId));
  });
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

  it("writes its own log to nats-server.log in the store directory, rotated by size, keeping only the newest rotated files", async () => {
    const limit = 2_048;
    const handle = await startNatsServer({
      extraConfig: { authorization: { user: "someone", password: "a-password-of-the-test" } },
      logFileBytes: limit,
      rotatedLogFiles: 2,
    });
    const logFile = join(handle.storeDir, SERVER_LOG_FILE);
    expect(handle.server.logFile).toBe(logFile);
    expect(await readFile(logFile, "utf8")).toMatch(new RegExp(`^\\[${handle.pid}\\] .*Server is ready$`, "m"));

    // Log lines until the file has rotated so often that its first copy
    // (the one with the startup banner) has been removed.
    const everyFile = async () => [logFile, ...(await rotatedLogFiles(handle.storeDir)).map((name) => join(handle.storeDir, name))];
    let attempts = 0;
    await waitFor(
      async () => {
        for (let i = 0; i < 20; i++) await failedLogin(handle.port);
        attempts += 20;
        if (attempts > 5_000) throw new Error("the log did not rotate");
        const rotated = await rotatedLogFiles(handle.storeDir);
        if (rotated.length < 2) return false;
        const contents = await Promise.all((await everyFile()).map((file) => readFile(file, "utf8")));
        return contents.every((text) => !text.includes("Starting nats-server"));
      },
      { timeoutMs: 120_000, what: "the first rotated log file to be removed" },
    );
    // The bound holds: the current file and at most two rotated ones, each near the size limit.
    await waitFor(async () => (await rotatedLogFiles(handle.storeDir)).length <= 2, { what: "the rotated files to be pruned" });
    for (const file of await everyFile()) expect((await stat(file)).size, file).toBeLessThan(limit + 1_024);
    const current = await readFile(logFile, "utf8");
    expect(current).toMatch(new RegExp(`^\\[${handle.pid}\\] .*\\[ERR\\] .* - cid:\\d+ - authentication error$`, "m"));
    // A restart keeps the bound too.
    await handle.restart();
    expect((await rotatedLogFiles(handle.storeDir)).length).toBeLessThanOrEqual(2);
    expect(await readFile(logFile, "utf8")).toMatch(new RegExp(`^\\[${handle.pid}\\] .*Server is ready$`, "m"));
    await handle.remove();
  }, 180_000);

  it("tells why it closed a client connection when its log says so: a slow consumer", async () => {
    // A reader that stops reading (its socket paused) while a publisher floods its subscription.
    // max_payload must not exceed max_pending.
    const handle = await startNatsServer({ maxPayload: 512 * 1024, extraConfig: { max_pending: 1_048_576 } });
    const reader = connectTcp({ host: "127.0.0.1", port: handle.port });
    const info = await new Promise<string>((resolveInfo) => reader.once("data", (chunk: Buffer) => resolveInfo(chunk.toString("utf8"))));
    const clientId = (JSON.parse(info.slice(5, info.indexOf("\r\n"))) as { client_id: number }).client_id;
    reader.write('CONNECT {"verbose":false,"name":"stalled-reader"}\r\nSUB flood.> 1\r\nPING\r\n');
    await new Promise<void>((resolvePong) => reader.once("data", () => resolvePong()));
    reader.pause();
    reader.on("error", () => {});
    expect(await handle.server.clientCloseReason(clientId)).toBeUndefined();

    const nc = await connect({ servers: handle.url, reconnect: false });
    try {
      const chunk = new Uint8Array(256 * 1024);
      await waitFor(
        async () => {
          for (let i = 0; i < 16; i++) nc.publish("flood.data", chunk);
          await nc.flush();
          return (await handle.server.clientCloseReason(clientId)) === "slow_consumer";
        },
        { timeoutMs: 120_000, what: "the server to cut the stalled reader off" },
      );
    } finally {
      await nc.close();
      reader.destroy();
    }
    // Another connection's id has no such message.
    expect(await handle.server.clientCloseReason(clientId + 1000)).toBeUndefined();
    await handle.remove();
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
      // Read back from the server's log file, which it writes instead of stderr.
      expect(exited.logTail.join("\n")).toContain("address already in use");
      expect(exited.message).not.toContain(String(first.port));
      expect(exited.message).not.toContain("127.0.0.1");
      expect(exited.message).not.toContain("\n");
    } finally {
      await rm(dir, { recursive: true, force: true });
      await first.remove();
    }
  });
});
