import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, expect, test } from "vitest";
import { CommandSchema } from "../../gen/laneway/kmap/v1/command_pb.js";
import { KmapCommandService } from "../../gen/laneway/kmap/v1/kmap_command_service_pb.js";
import { LaneService, RecordKind } from "../../gen/laneway/lane/v1/lane_service_pb.js";
import { HiveHubService } from "../../gen/laneway/swarm/v1/hive_hub_service_pb.js";
import { repoRoot, startLanewayProcess, type ChildLaneway } from "../helpers/laneway.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The console in Debian's Chromium (playwright-core, executablePath)
 * against a real `laneway serve --demo` child process. Each test saves a
 * screenshot under test-artifacts/console/.
 */

const CHROMIUM = "/usr/bin/chromium";
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const artifacts = join(repoRoot, "test-artifacts", "console");
const browserTimeout = 30_000;

let laneway: ChildLaneway;
let profile: string;
let context: BrowserContext;

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)`);
  await mkdir(artifacts, { recursive: true });
  laneway = await startLanewayProcess({ lanesConfig: false, args: ["--demo"] });
  profile = await mkdtemp(join(tmpdir(), "laneway-chromium-"));
  // A fresh profile directory for every run.
  context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: FLAGS, timeout: 120_000 });
  context.setDefaultTimeout(browserTimeout);
}, 180_000);

afterAll(async () => {
  await context?.close();
  await laneway?.remove();
  if (profile) await rm(profile, { recursive: true, force: true });
});

/** Opens the console and types a token into it. */
async function openWith(token: string, view = "lanes"): Promise<Page> {
  const page = await context.newPage();
  page.on("pageerror", (error) => console.error("console page error:", error.message));
  await page.goto(`${laneway.url}/console/`);
  await page.fill("#token", token);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("#who[data-who]");
  if (view !== "lanes") await page.click(`nav button[data-view=${view}]`);
  await page.waitForSelector(`#view-${view}[data-ready=true]`);
  return page;
}

async function shoot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });
  await page.close();
}

const operator = () => laneway.tokens.admin;

test("lanes: the registry and positions render, and a record published through the API appears in the live Follow", async () => {
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  await atlas.publish({ lane: "measurements", id: "before-follow", kind: RecordKind.EVENT, schema: "probe-v1", payload: new Uint8Array([1]) });
  const page = await openWith(laneway.tokens.atlas);
  expect(await page.textContent("#who")).toBe("project atlas");
  const registry = await page.textContent("#registry");
  expect(registry).toContain("measurements");
  expect(registry).toContain("atlas");
  await page.click('button[data-follow="measurements"]');
  await page.waitForSelector('#follow-measurements[data-state="open"]');
  const id = `live-${randomBytes(4).toString("hex")}`;
  const published = await atlas.publish({ lane: "measurements", id, kind: RecordKind.EVENT, schema: "probe-v1", payload: new TextEncoder().encode("hello") });
  const line = await page.waitForSelector(`#follow-measurements [data-id="${id}"]`);
  expect(await line.getAttribute("data-sequence")).toBe(String(published.record!.sequence));
  // The record published before the Follow started is not repeated.
  expect(await page.$('#follow-measurements [data-id="before-follow"]')).toBeNull();
  // Nothing of the token is kept by the browser or left in the page.
  // (Evaluated in the page; written as a string because the test's own types have no DOM.)
  const stored = await page.evaluate(
    `(async () => ({ local: localStorage.length, session: sessionStorage.length, cookie: document.cookie, databases: (await indexedDB.databases()).length, field: document.getElementById("token").value }))()`,
  );
  expect(stored).toEqual({ local: 0, session: 0, cookie: "", databases: 0, field: "" });
  expect(await page.content()).not.toContain(laneway.tokens.atlas);
  await shoot(page, "lanes-follow");
}, 120_000);

test("group: InspectGroup's deliveries and leases render, and the RecoverGroup form shows the revision it submits", async () => {
  const atlas = laneway.clients.client(LaneService, { token: laneway.tokens.atlas });
  const beacon = laneway.clients.client(LaneService, { token: laneway.tokens.beacon });
  await atlas.publish({ lane: "measurements", id: `work-${randomBytes(4).toString("hex")}`, kind: RecordKind.WORK, schema: "probe-v1", payload: new Uint8Array([7]) });
  const claimed = await beacon.claim({ lane: "measurements", group: "summarizers" });
  expect(claimed.work).toBeDefined();
  const state = (await beacon.inspectGroup({ lane: "measurements", group: "summarizers" })).group!;
  const page = await openWith(laneway.tokens.beacon, "group");
  await page.waitForSelector("#group-summary");
  expect(await page.textContent("#deliveries")).toContain(String(claimed.work!.record!.sequence));
  expect(await page.textContent("#deliveries")).toContain("leased");
  expect(await page.textContent("#recover-revision")).toBe(String(state.revision));
  // Guarded: the submit button stays disabled until the confirmation is ticked.
  expect(await page.isDisabled("#recover-submit")).toBe(true);
  await page.check("#recover-confirm");
  expect(await page.isDisabled("#recover-submit")).toBe(false);
  await shoot(page, "group");
}, 120_000);

test("kmap: a command submitted through the API moves to Committed on screen without a reload; nodes and verified history render", async () => {
  const page = await openWith(operator(), "kmap");
  await page.waitForSelector("#watch-state");
  const kmap = laneway.clients.client(KmapCommandService, { token: operator() });
  const idempotencyId = randomBytes(16).toString("hex");
  const title = `console node ${randomBytes(3).toString("hex")}`;
  await kmap.submitCommand({ idempotencyId, command: create(CommandSchema, { operation: { case: "createNode", value: { kind: "topic", title, body: "" } } }) });
  await page.waitForSelector(`tr[data-command="${idempotencyId}"] td[data-state="Committed"]`);
  // Re-render the view (no page reload): the node and its signed transaction are there, the signature verified.
  await page.click("nav button[data-view=kmap]");
  await page.waitForSelector("#view-kmap[data-ready=true]");
  expect(await page.textContent("#nodes-table")).toContain(title);
  const verdicts = await page.$$eval("#history-table [data-signature]", (cells) => cells.map((c) => c.getAttribute("data-signature")));
  expect(verdicts.length).toBeGreaterThan(0);
  expect(verdicts.every((v) => v === "valid")).toBe(true);
  await shoot(page, "kmap");
}, 120_000);

test("kmap: a tampered transaction fails the signature check visibly", async () => {
  const page = await context.newPage();
  // The test edits the page's data: the first transaction's signature has one bit flipped on its way to the page.
  await page.route("**/laneway.kmap.v1.KmapReadService/ListTransactions", async (route) => {
    const response = await route.fetch();
    const body = (await response.json()) as { transactions?: { signature?: string }[] };
    const first = body.transactions?.[0];
    if (first?.signature) {
      const bytes = Buffer.from(first.signature, "base64");
      bytes[0] = bytes[0]! ^ 1;
      first.signature = bytes.toString("base64");
    }
    await route.fulfill({ response, body: JSON.stringify(body) });
  });
  await page.goto(`${laneway.url}/console/`);
  await page.fill("#token", operator());
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("#who[data-who]");
  await page.click("nav button[data-view=kmap]");
  await page.waitForSelector("#view-kmap[data-ready=true]");
  const invalid = await page.waitForSelector('#history-table [data-signature="invalid"]');
  expect(await invalid.textContent()).toContain("INVALID");
  const verdicts = await page.$$eval("#history-table [data-signature]", (cells) => cells.map((c) => c.getAttribute("data-signature")));
  expect(verdicts.filter((v) => v === "invalid")).toHaveLength(1);
  await shoot(page, "kmap-tampered");
}, 120_000);

test("hive: members and their grants render", async () => {
  const hub = laneway.clients.client(HiveHubService, { token: operator() });
  await hub.scope({ swarms: ["rig"] });
  await hub.invite({ memberId: "console-a", swarms: ["rig"] });
  const page = await openWith(operator(), "hive");
  const members = await page.textContent("#members-table");
  expect(members).toContain("console-a");
  expect(members).toContain("rig");
  const grant = await page.textContent('[data-grant="console-a"]');
  expect(grant).toMatch(/publish: \S+/);
  await shoot(page, "hive");
}, 120_000);

test("a tab chosen while the first view is still loading stays shown when that view finishes", async () => {
  const page = await context.newPage();
  // The lanes view's Replay requests wait until the Kmap view is shown (the browser holds them; they then go to the server as sent).
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  await page.route("**/laneway.lane.v1.LaneService/Replay", async (route) => {
    await released;
    await route.continue();
  });
  await page.goto(`${laneway.url}/console/`);
  await page.fill("#token", laneway.tokens.atlas);
  await page.click("#token-form button[type=submit]");
  await page.waitForSelector("#who[data-who]");
  await page.click("nav button[data-view=kmap]");
  await page.waitForSelector("#view-kmap[data-ready=true]");
  release();
  // The lanes view's rendering, started first, finishes after the Kmap view was chosen.
  await page.waitForSelector("#view-lanes #registry", { state: "attached" });
  expect(await page.isVisible("#view-kmap")).toBe(true);
  expect(await page.isHidden("#view-lanes")).toBe(true);
  await page.close();
});

test("a forbidden action shows its reason: a project token on the Kmap, the operator token on the lanes", async () => {
  const project = await openWith(laneway.tokens.atlas, "kmap");
  const refusal = await project.textContent("#commands .error");
  expect(refusal).toContain("permission_denied (forbidden)");
  expect(refusal).toContain("needs the operator token");
  await shoot(project, "forbidden-kmap");

  const op = await openWith(operator(), "lanes");
  expect(await op.textContent("#who")).toBe("operator");
  expect(await op.textContent("#view-lanes .error")).toContain("permission_denied (forbidden)");
  await shoot(op, "forbidden-lanes");

  // An unknown token: refused with its reason.
  const stranger = await openWith("0".repeat(64));
  expect(await stranger.textContent("#who")).toContain("unauthenticated (unauthorized)");
  await shoot(stranger, "unknown-token");
  await waitFor(() => existsSync(join(artifacts, "unknown-token.png")));
}, 120_000);
