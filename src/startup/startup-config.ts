/**
 * Everything `laneway serve` needs before it starts anything: server
 * settings, demo files, and the lanes configuration, resolved in the one
 * order that makes them consistent.
 *
 * Order matters because demo mode supplies environment (the tokens in
 * tokens.env, including `LANEWAY_ADMIN_TOKEN`) and a default lanes config
 * path: the server settings are loaded once to learn the data directory
 * and whether demo mode is on, then again against the merged environment,
 * and the lanes loader sees that same merged environment — so it checks
 * project tokens against the operator token that will actually be used.
 * `process.env` is never modified; variables already in `env` win over the
 * demo file's.
 */
import type { Env } from "../config/env-name.js";
import { loadServerConfig, type ServerConfig, type ServerConfigOptions } from "../config/server-config.js";
import { loadLanesConfig, type LanesConfig } from "../lanes/index.js";
import { ensureDemoSetup, type DemoSetup } from "./demo-setup.js";

export interface StartupConfig {
  readonly server: ServerConfig;
  /** `undefined` when lanes are off (no --lanes-config, no demo). */
  readonly lanes: LanesConfig | undefined;
  /** Path the lanes configuration was loaded from, if any. */
  readonly lanesConfigPath: string | undefined;
  /** Demo files, when demo mode is on. Check `repairedTokensMode` to warn. */
  readonly demo: DemoSetup | undefined;
  /** The environment the loaders saw: `env` over the demo tokens. */
  readonly env: Env;
}

export async function loadStartupConfig(
  argv: readonly string[],
  env: Env,
  options: ServerConfigOptions = {},
): Promise<StartupConfig> {
  let server = loadServerConfig(argv, env, options);
  let merged: Env = env;
  let demo: DemoSetup | undefined;
  if (server.demo) {
    demo = await ensureDemoSetup(server.dataDir, env);
    merged = Object.freeze({ ...demo.env, ...definedOnly(env) });
    server = loadServerConfig(argv, merged, options);
  }
  const lanesConfigPath = server.lanesConfigPath ?? demo?.lanesConfigPath;
  const lanes =
    lanesConfigPath === undefined ? undefined : await loadLanesConfig(lanesConfigPath, merged, options);
  return Object.freeze({ server, lanes, lanesConfigPath, demo, env: merged });
}

/** Entries of `env` with a value; an unset (or empty) variable must not hide the demo file's value. */
function definedOnly(env: Env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined && value !== "") out[key] = value;
  return out;
}
