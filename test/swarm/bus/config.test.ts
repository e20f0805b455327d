import { describe, expect, test } from "vitest";
import { BusConfigError, busConfigFromEnv, checkBusConfig, openBus } from "../../../src/swarm-bus/index.js";
import { freePort } from "../../helpers/free-port.js";

/** The bus settings from the hive.env variables, and their refusals (which never repeat a URL or credential). */

const URL = "nats://hub.internal.example:4222";

describe("the hive.env variables", () => {
  test("a member's hive.env: scoped, bind, its credential file", () => {
    const config = busConfigFromEnv(
      {
        AGENTIHOOKS_BUS: "nats",
        AGENTIHOOKS_BUS_URL: URL,
        AGENTIHOOKS_BUS_CREDENTIALS: "hive.creds",
        AGENTIHOOKS_BUS_SCOPED: "1",
        AGENTIHOOKS_BUS_BIND: "1",
      },
      { baseDir: "/home/member/.hive" },
    );
    expect(config).toEqual({ backend: "nats", url: URL, credentials: "/home/member/.hive/hive.creds", scoped: true, bind: true });
  });

  test("the hub: scoped without bind provisions; a cluster URL list", () => {
    const config = busConfigFromEnv({ AGENTIHOOKS_BUS: "nats", AGENTIHOOKS_BUS_URL: "nats://a:4222, nats://b:4222", AGENTIHOOKS_BUS_SCOPED: "1" });
    expect(config).toEqual({ backend: "nats", url: ["nats://a:4222", "nats://b:4222"], scoped: true, bind: false });
  });

  test("an unscoped (legacy) process: no scoped line", () => {
    expect(busConfigFromEnv({ AGENTIHOOKS_BUS: "nats", AGENTIHOOKS_BUS_URL: URL, AGENTIHOOKS_BUS_CREDENTIALS: "/etc/hive.creds" })).toEqual({
      backend: "nats",
      url: URL,
      credentials: "/etc/hive.creds",
      scoped: false,
      bind: false,
    });
  });

  const refusals: [string, Record<string, string>, string][] = [
    ["no backend", { AGENTIHOOKS_BUS_URL: URL }, "AGENTIHOOKS_BUS is not set; set AGENTIHOOKS_BUS=nats"],
    ["another backend", { AGENTIHOOKS_BUS: "redis", AGENTIHOOKS_BUS_URL: URL }, "AGENTIHOOKS_BUS must be nats"],
    ["no URL", { AGENTIHOOKS_BUS: "nats" }, "AGENTIHOOKS_BUS_URL is not set"],
    ["not a NATS URL", { AGENTIHOOKS_BUS: "nats", AGENTIHOOKS_BUS_URL: "http://secret-host:8080/x" }, "AGENTIHOOKS_BUS_URL is not a NATS URL"],
    ["a flag that is not 1 or 0", { AGENTIHOOKS_BUS: "nats", AGENTIHOOKS_BUS_URL: URL, AGENTIHOOKS_BUS_SCOPED: "yes" }, "AGENTIHOOKS_BUS_SCOPED must be 1 or 0"],
    [
      "an openbao: reference",
      { AGENTIHOOKS_BUS: "nats", AGENTIHOOKS_BUS_URL: URL, AGENTIHOOKS_BUS_CREDENTIALS: "openbao:agentihooks/hive/members/hive-a" },
      "AGENTIHOOKS_BUS_CREDENTIALS is an openbao: reference, and references are not supported by this build; point it at the credential file hive join saved (hive.creds)",
    ],
  ];

  test.each(refusals)("refuses %s with a typed error", (_name, env, message) => {
    let error: unknown;
    try {
      busConfigFromEnv(env);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BusConfigError);
    expect((error as BusConfigError).message).toBe(message);
    expect((error as BusConfigError).reason).toBe("swarm_invalid");
    for (const value of Object.values(env)) if (value.includes("secret") || value.includes("openbao")) expect((error as Error).message).not.toContain(value);
  });

  test("an unreachable broker is a typed unavailable error that names no address", async () => {
    const port = await freePort();
    let error: (Error & { reason?: string }) | undefined;
    try {
      await openBus({ backend: "nats", url: `nats://127.0.0.1:${port}`, scoped: true, bind: true });
    } catch (e) {
      error = e as Error & { reason?: string };
    }
    expect(error?.reason).toBe("swarm_unavailable");
    expect(error?.message).toBe("message broker unavailable: connection failed (connecting to the bus)");
    expect(error?.message).not.toContain(String(port));
  });

  test("options get the same checks; an openbao: reference is refused before any connection", async () => {
    await expect(openBus({ backend: "nats", url: URL, credentials: "openbao:x/y", scoped: true, bind: true })).rejects.toBeInstanceOf(BusConfigError);
    expect(() => checkBusConfig({ backend: "nats", url: [], scoped: true, bind: false })).toThrow("the bus needs a NATS URL");
  });
});
