import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { EnvFileError, formatEnvFile, parseEnvFile, readEnvFile } from "../../src/config/index.js";
import { exampleLanesConfig, LanesConfigError, parseLanesConfig } from "../../src/lanes/index.js";
import { coreSettings } from "../../src/server/cores/index.js";
import { DEMO_LANES_CONFIG, type LanesSettings } from "../../src/server/cores/lanes.js";
import { DemoSetupError, ensureDemoSetup as ensureFiles, loadStartupConfig, type DemoSetup, type StartupConfig } from "../../src/startup/index.js";

/** The demo files the cores declare (the lanes' lanes.json). */
const demoFiles = coreSettings.flatMap((c) => (c.demo ? [{ core: c.core, ...c.demo }] : []));
const ensureDemoSetup = (dir: string, env: Record<string, string | undefined> = {}) => ensureFiles(dir, env, demoFiles);
/** The lanes' demo file. */
const lanesFile = (demo: DemoSetup) => demo.files.get("lanes")!;

/** The lanes core's resolved settings. */
const lanesOf = (startup: StartupConfig) => startup.cores.get("lanes") as LanesSettings;

const work = mkdtempSync(join(tmpdir(), "laneway-demo-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
let counter = 0;
const freshDir = (): string => join(work, `data-${++counter}`, "nested");
const mode = (path: string): number => statSync(path).mode & 0o777;

describe("ensureDemoSetup", () => {
  test("creates lanes.json and a 0600 tokens.env on first start", async () => {
    const dir = freshDir();
    const demo = await ensureDemoSetup(dir);
    expect(demo.dataDir).toBe(dir);
    expect(demo.created).toEqual({ files: ["lanes"], tokens: true });
    expect(demo.repairedTokensMode).toBe(false);
    expect(mode(dir)).toBe(0o700);
    expect(mode(demo.tokensPath)).toBe(0o600);

    expect(JSON.parse(readFileSync(lanesFile(demo), "utf8"))).toEqual(DEMO_LANES_CONFIG);
    expect(JSON.parse(readFileSync(lanesFile(demo), "utf8"))).toEqual(exampleLanesConfig({ namespace: "demo" }));

    const text = readFileSync(demo.tokensPath, "utf8");
    expect(text).toMatch(/^ATLAS_LANE_TOKEN=[0-9a-f]{64}\nBEACON_LANE_TOKEN=[0-9a-f]{64}\nLANEWAY_ADMIN_TOKEN=[0-9a-f]{64}\n$/);
    expect(Object.keys(demo.env)).toEqual(["ATLAS_LANE_TOKEN", "BEACON_LANE_TOKEN", "LANEWAY_ADMIN_TOKEN"]);
    expect(new Set(Object.values(demo.env)).size).toBe(3);

    // The generated pair is a valid configuration for the real loader.
    const config = parseLanesConfig(readFileSync(lanesFile(demo), "utf8"), demo.env);
    expect(config.tokens.get("atlas")?.reveal()).toBe(demo.env.ATLAS_LANE_TOKEN);
  });

  test("later starts reuse both files unchanged", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    writeFileSync(lanesFile(first), JSON.stringify({ ...DEMO_LANES_CONFIG, namespace: "edited" }));
    const before = readFileSync(first.tokensPath, "utf8");
    const second = await ensureDemoSetup(dir);
    expect(second.created).toEqual({ files: [], tokens: false });
    expect(second.env).toEqual(first.env);
    expect(readFileSync(first.tokensPath, "utf8")).toBe(before);
    expect(JSON.parse(readFileSync(lanesFile(first), "utf8")).namespace).toBe("edited");
  });

  test("a missing file is recreated on its own", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    rmSync(lanesFile(first));
    const second = await ensureDemoSetup(dir);
    expect(second.created).toEqual({ files: ["lanes"], tokens: false });
    expect(second.env).toEqual(first.env);
  });

  test("a tokens.env readable by group/other is repaired to 0600 and reported", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    chmodSync(first.tokensPath, 0o644);
    const second = await ensureDemoSetup(dir);
    expect(second.repairedTokensMode).toBe(true);
    expect(mode(first.tokensPath)).toBe(0o600);
    expect(second.env).toEqual(first.env);
    expect((await ensureDemoSetup(dir)).repairedTokensMode).toBe(false);
  });

  test("a symlinked tokens.env is refused", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    const elsewhere = join(work, `elsewhere-${counter}.env`);
    writeFileSync(elsewhere, readFileSync(first.tokensPath), { mode: 0o600 });
    rmSync(first.tokensPath);
    symlinkSync(elsewhere, first.tokensPath);
    await expect(ensureDemoSetup(dir)).rejects.toThrow(DemoSetupError);
    await expect(ensureDemoSetup(dir)).rejects.toThrow("must be a regular file, not a symlink or other file type");
  });

  test("a tokens.env missing a variable gets it generated, keeping the other lines", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    writeFileSync(first.tokensPath, `ATLAS_LANE_TOKEN=${first.env.ATLAS_LANE_TOKEN}\n`, { mode: 0o600 });
    const second = await ensureDemoSetup(dir);
    expect(second.completed).toEqual(["BEACON_LANE_TOKEN", "LANEWAY_ADMIN_TOKEN"]);
    expect(second.env.ATLAS_LANE_TOKEN).toBe(first.env.ATLAS_LANE_TOKEN);
    expect(second.env.BEACON_LANE_TOKEN).toMatch(/^[0-9a-f]{64}$/);
    expect(second.env.BEACON_LANE_TOKEN).not.toBe(first.env.BEACON_LANE_TOKEN);
    expect(parseEnvFile(readFileSync(first.tokensPath, "utf8"))).toEqual(second.env);
    expect(mode(first.tokensPath)).toBe(0o600);
  });

  test("a malformed tokens.env is refused by line number only", async () => {
    const dir = freshDir();
    const first = await ensureDemoSetup(dir);
    writeFileSync(first.tokensPath, `ATLAS_LANE_TOKEN="quoted-secret-value"\n`, { mode: 0o600 });
    const error = await ensureDemoSetup(dir).catch((e: unknown) => e);
    expect((error as Error).message).toBe(
      "demo: tokens.env: line 1: the value of ATLAS_LANE_TOKEN must be unquoted and use only A-Z a-z 0-9 _ . , : + / @ % -",
    );
  });

  test("two servers starting at once agree on one set of tokens", async () => {
    const dir = freshDir();
    const [a, b, c] = await Promise.all([ensureDemoSetup(dir), ensureDemoSetup(dir), ensureDemoSetup(dir)]);
    expect(b?.env).toEqual(a?.env);
    expect(c?.env).toEqual(a?.env);
    expect([a, b, c].filter((d) => d?.created.tokens).length).toBe(1);
  });

  test("a shell sourcing tokens.env sees the same values", async () => {
    const demo = await ensureDemoSetup(freshDir());
    const out = execFileSync(
      "sh",
      ["-c", 'set -a; . "$1"; printf "%s\\n%s\\n%s" "$ATLAS_LANE_TOKEN" "$BEACON_LANE_TOKEN" "$LANEWAY_ADMIN_TOKEN"', "sh", demo.tokensPath],
      { encoding: "utf8", env: { PATH: process.env.PATH } },
    );
    expect(out.split("\n")).toEqual([demo.env.ATLAS_LANE_TOKEN, demo.env.BEACON_LANE_TOKEN, demo.env.LANEWAY_ADMIN_TOKEN]);
  });
});

describe("env files", () => {
  test("parse KEY=value lines, comments, blank lines and CRLF", () => {
    expect(parseEnvFile("# demo tokens\n\nA=1\r\nB_2=x-y.z:/@%+,\n  # indented comment\nC=\n")).toEqual({ A: "1", B_2: "x-y.z:/@%+,", C: "" });
  });

  test("reject what a shell would read differently, naming lines not values", () => {
    const cases: ReadonlyArray<readonly [string, string]> = [
      ["A=1\nnot a pair\n", "line 2 is not KEY=value"],
      ["=value\n", "line 1 is not KEY=value"],
      ["1A=x\n", "line 1: the key is not a valid environment variable name"],
      ["export A=x\n", "line 1: the key is not a valid environment variable name"],
      ["A='sekrit-value'\n", "line 1: the value of A must be unquoted and use only A-Z a-z 0-9 _ . , : + / @ % -"],
      ["A=sekrit value\n", "line 1: the value of A must be unquoted and use only A-Z a-z 0-9 _ . , : + / @ % -"],
      ["A=$HOME\n", "line 1: the value of A must be unquoted and use only A-Z a-z 0-9 _ . , : + / @ % -"],
      ["A=1\nA=2\n", "line 2: A is set more than once"],
    ];
    for (const [text, message] of cases) {
      expect(() => parseEnvFile(text)).toThrow(new EnvFileError(message));
      try {
        parseEnvFile(text);
      } catch (error) {
        expect((error as Error).message).not.toContain("sekrit");
      }
    }
  });

  test("readEnvFile and formatEnvFile round-trip", async () => {
    const path = join(work, "round.env");
    writeFileSync(path, formatEnvFile({ X: "abc", Y: "0123" }));
    expect(await readEnvFile(path)).toEqual({ X: "abc", Y: "0123" });
    await expect(readEnvFile(join(work, "missing.env"))).rejects.toThrow("cannot read the environment file (ENOENT)");
    expect(() => formatEnvFile({ X: "has space" })).toThrow(EnvFileError);
  });
});

describe("loadStartupConfig", () => {
  test("demo mode: files are created, tokens merged under the environment, lanes loaded", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const env = { PATH: "/usr/bin", LANEWAY_DATA_DIR: "state" };
    const before = { ...process.env };
    const startup = await loadStartupConfig(["--demo"], env, { cwd, cores: coreSettings });
    expect(process.env).toEqual(before);
    expect(startup.demo?.dataDir).toBe(join(cwd, "state"));
    expect(lanesOf(startup).path).toBe(join(cwd, "state", "lanes.json"));
    expect(lanesOf(startup).config?.namespace).toBe("demo");
    expect(startup.server.adminToken?.equals(startup.demo?.env.LANEWAY_ADMIN_TOKEN as string)).toBe(true);
    expect(lanesOf(startup).config?.tokens.get("beacon")?.reveal()).toBe(startup.demo?.env.BEACON_LANE_TOKEN);
    expect(startup.env.PATH).toBe("/usr/bin");
  });

  test("variables already in the environment win over the demo file", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const mine = "my-own-atlas-token-0123456789abcdef0123";
    const startup = await loadStartupConfig(["--demo"], { ATLAS_LANE_TOKEN: mine, BEACON_LANE_TOKEN: "" }, { cwd, cores: coreSettings });
    expect(lanesOf(startup).config?.tokens.get("atlas")?.reveal()).toBe(mine);
    // An empty variable does not hide the file's value.
    expect(lanesOf(startup).config?.tokens.get("beacon")?.reveal()).toBe(startup.demo?.env.BEACON_LANE_TOKEN);
  });

  test("the demo never writes a token the server does not accept: an operator token from the environment stays out of tokens.env", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const operator = "operator-token-from-the-environment-0123456789";
    const startup = await loadStartupConfig(["--demo"], { LANEWAY_ADMIN_TOKEN: operator }, { cwd, cores: coreSettings });
    expect(startup.server.adminToken?.reveal()).toBe(operator);
    expect(startup.demo?.fromEnvironment).toEqual(["LANEWAY_ADMIN_TOKEN"]);
    const file = readFileSync(startup.demo!.tokensPath, "utf8");
    expect(file).not.toContain("LANEWAY_ADMIN_TOKEN");
    expect(Object.keys(parseEnvFile(file))).toEqual(["ATLAS_LANE_TOKEN", "BEACON_LANE_TOKEN"]);
  });

  test("a tokens.env holding another operator token than the environment's loses that line", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const first = await loadStartupConfig(["--demo"], {}, { cwd, cores: coreSettings });
    const written = first.demo!.env;
    expect(written.LANEWAY_ADMIN_TOKEN).toMatch(/^[0-9a-f]{64}$/);
    const operator = "operator-token-from-the-environment-9876543210";
    const second = await loadStartupConfig(["--demo"], { LANEWAY_ADMIN_TOKEN: operator }, { cwd, cores: coreSettings });
    expect(second.server.adminToken?.reveal()).toBe(operator);
    const file = parseEnvFile(readFileSync(second.demo!.tokensPath, "utf8"));
    expect(file).toEqual({ ATLAS_LANE_TOKEN: written.ATLAS_LANE_TOKEN, BEACON_LANE_TOKEN: written.BEACON_LANE_TOKEN });
    expect(mode(second.demo!.tokensPath)).toBe(0o600);
    // A later start without it in the environment generates a new operator token into the file, and uses it.
    const third = await loadStartupConfig(["--demo"], {}, { cwd, cores: coreSettings });
    expect(third.demo?.completed).toEqual(["LANEWAY_ADMIN_TOKEN"]);
    const after = parseEnvFile(readFileSync(third.demo!.tokensPath, "utf8"));
    expect(third.server.adminToken?.reveal()).toBe(after.LANEWAY_ADMIN_TOKEN);
    expect(after.LANEWAY_ADMIN_TOKEN).not.toBe(operator);
  });

  test("an operator token equal to a project token stops startup", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const demo = await ensureDemoSetup(join(cwd, ".laneway"));
    const error = await loadStartupConfig(["--demo"], { LANEWAY_ADMIN_TOKEN: demo.env.ATLAS_LANE_TOKEN }, { cwd, cores: coreSettings }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LanesConfigError);
    expect((error as Error).message).toBe(
      "lanes: the token of project atlas equals LANEWAY_ADMIN_TOKEN; the operator token must differ from every project token",
    );
  });

  test("without demo or lanes config, lanes are off and nothing is written", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const startup = await loadStartupConfig([], {}, { cwd, cores: coreSettings });
    expect(lanesOf(startup).config).toBeUndefined();
    expect(startup.demo).toBeUndefined();
    expect(() => statSync(cwd)).toThrow();
  });

  test("an explicit lanes config is used even in demo mode", async () => {
    const cwd = join(work, `startup-${++counter}`);
    const demo = await ensureDemoSetup(join(cwd, ".laneway"));
    const custom = join(cwd, "custom.json");
    writeFileSync(custom, JSON.stringify({ ...DEMO_LANES_CONFIG, namespace: "custom" }));
    const startup = await loadStartupConfig(["--demo", "--lanes-config", "custom.json"], {}, { cwd, cores: coreSettings });
    expect(lanesOf(startup).config?.namespace).toBe("custom");
    expect(startup.demo?.env).toEqual(demo.env);
  });
});
