import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { serveHelp } from "../../src/config/index.js";
import { createLanewayTransport } from "../../src/client/transport.js";
import { silentLogger } from "../../src/log/logger.js";
import { coreBindings } from "../../src/server/cores/index.js";
import { LanewayServer } from "../../src/server/laneway-server.js";
import { loadStartupConfig } from "../../src/startup/index.js";
import { echoBinding, EchoService } from "../fixtures/echo-core/binding.js";
import { parsePrometheusText, sampleValue } from "../helpers/prometheus-text.js";

/**
 * Adding a core is its folder (test/fixtures/echo-core: the core and its
 * binding) and one list entry (below): the server then parses its settings,
 * lists them in `serve --help`, authenticates its principal, maps its
 * reasons, reports its health, feeds its metrics and serves it — with no
 * other file changed.
 */
const cores = [...coreBindings, echoBinding];

const ECHO_TOKEN = "echo-token-0123456789abcdef0123456789abcdef";
const ADMIN_TOKEN = "admin-token-0123456789abcdef0123456789abcdef";
let dataDir: string;
let server: LanewayServer;
let closeTransports: (() => void)[] = [];

function client(token: string): { echo(req: never): Promise<{ text?: unknown }> } {
  const { transport, close } = createLanewayTransport({ baseUrl: server.url, token });
  closeTransports.push(close);
  return createClient(EchoService, transport) as never;
}

/** A call that was expected to fail did not. */
function succeeded(): never {
  throw new Error("the call succeeded; a failure was expected");
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "laneway-fourth-core-"));
  const startup = await loadStartupConfig(
    ["--listen", "127.0.0.1:0", "--data-dir", dataDir, "--echo-prefix", "> "],
    { LANEWAY_ECHO_TOKEN: ECHO_TOKEN, LANEWAY_ADMIN_TOKEN: ADMIN_TOKEN },
    { cores: cores.flatMap((b) => (b.settings ? [b.settings] : [])) },
  );
  server = await LanewayServer.start({ startup, logger: silentLogger, cores });
});

afterAll(async () => {
  for (const close of closeTransports) close();
  closeTransports = [];
  await server?.close();
  await rm(dataDir, { recursive: true, force: true });
});

test("the fourth core is served with its own setting and principal", async () => {
  expect((await client(ECHO_TOKEN).echo({ text: "hello" } as never)).text as string).toBe("> hello");
});

test("its reasons are its binding's: an empty echo is invalid_argument with reason echo_empty in domain echo", async () => {
  const error = await client(ECHO_TOKEN).echo({ text: "" } as never).then(succeeded, (e: unknown) => ConnectError.from(e));
  expect(error.code).toBe(Code.InvalidArgument);
  expect(error.rawMessage).toBe("echo: there is nothing to echo");
  expect(error.findDetails(ErrorDetailSchema)).toEqual([expect.objectContaining({ reason: "echo_empty", domain: "echo" })]);
});

test("its principal is its own: the operator token is refused, naming the credential the binding declares", async () => {
  const error = await client(ADMIN_TOKEN).echo({ text: "x" } as never).then(succeeded, (e: unknown) => ConnectError.from(e));
  expect(error.code).toBe(Code.PermissionDenied);
  expect(error.rawMessage).toBe("the operator token cannot call fixture.echo.v1.EchoService: it needs an echo token");
  const unknown = await client("x".repeat(40)).echo({ text: "x" } as never).then(succeeded, (e: unknown) => ConnectError.from(e));
  expect(unknown.code).toBe(Code.Unauthenticated);
});

test("its health counts in the server's, and its settings are in serve --help", () => {
  expect(server.health.get(EchoService.typeName)).toBe("SERVING");
  expect(server.health.get("")).toBe("SERVING");
  const help = serveHelp(cores.flatMap((b) => (b.settings ? [{ title: b.settings.title, settings: b.settings.declarations }] : [])));
  expect(help).toContain("\necho:\n");
  expect(help).toMatch(/--echo-prefix TEXT +LANEWAY_ECHO_PREFIX +what every echo starts with/);
});

test("its metrics are its binding's: /metrics counts its calls as the binding declares", async () => {
  const scrape = async () => parsePrometheusText(await (await fetch(`${server.url}/metrics`)).text());
  const before = await scrape();
  await client(ECHO_TOKEN).echo({ text: "counted" } as never);
  await client(ECHO_TOKEN).echo({ text: "" } as never).then(succeeded, () => undefined);
  const after = await scrape();
  const delta = (labels: Record<string, string>) => sampleValue(after, "echo_calls_total", labels) - sampleValue(before, "echo_calls_total", labels);
  expect(delta({ outcome: "echoed" })).toBe(1);
  expect(delta({ outcome: "echo_empty" })).toBe(1);
  // The other cores' metrics are there as before.
  expect(after.has("laneway_lane_records_published_total")).toBe(true);
  expect(after.has("laneway_kmap_backlog")).toBe(true);
});
