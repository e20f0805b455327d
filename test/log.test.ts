import { expect, test } from "vitest";
import { KmapError } from "../src/kmap/errors.js";
import { createLogger, safeErrorFields } from "../src/log/logger.js";
import { BrokerUnavailableError } from "../src/nats/index.js";

test("errors Laneway did not write are logged as class name and code only", () => {
  const backend = Object.assign(new Error("connect ECONNREFUSED 10.1.2.3:4222 user=svc pass=hunter2"), { code: "ECONNREFUSED" });
  const fields = safeErrorFields(backend);
  expect(fields).toEqual({ error: "Error", code: "ECONNREFUSED" });
  expect(JSON.stringify(fields)).not.toContain("10.1.2.3");
});

test("Laneway's own errors keep their message, but never their cause", () => {
  const cause = new Error("SQLITE_READONLY: attempt to write a readonly database /var/lib/secret/path");
  const fields = safeErrorFields(new KmapError("internal", "the command lane database is not writable", { cause }));
  expect(fields).toMatchObject({ error: "KmapError", code: "internal", reason: "the command lane database is not writable", cause: "Error" });
  expect(JSON.stringify(fields)).not.toContain("/var/lib");
  expect(JSON.stringify(fields)).not.toContain("SQLITE_READONLY: attempt");
  const broker = safeErrorFields(new BrokerUnavailableError("connection_failed", { cause: new Error("nats://10.0.0.1:4222 refused") }));
  expect(JSON.stringify(broker)).not.toContain("10.0.0.1");
});

test("a log line is one JSON object with scalar fields", () => {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (l) => lines.push(l) }).child({ core: "kmap" });
  log.debug("hidden");
  log.warn("writer unavailable", { attempt: 3 });
  expect(lines).toHaveLength(1);
  expect(JSON.parse(lines[0]!)).toMatchObject({ level: "warn", msg: "writer unavailable", core: "kmap", attempt: 3 });
});
