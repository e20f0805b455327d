/**
 * Everything `laneway serve` needs before it starts anything: server
 * settings, demo files, and each core's configuration, resolved in the one
 * order that makes them consistent.
 *
 * Order matters because demo mode supplies environment (the tokens in
 * tokens.env, including `LANEWAY_ADMIN_TOKEN`) and a default configuration
 * path: the server settings are loaded once to learn the data directory
 * and whether demo mode is on, then again against the merged environment,
 * and each core resolves its settings against that same merged environment
 * — so a core checks its tokens against the operator token that will
 * actually be used. `process.env` is never modified; variables already in
 * `env` win over the demo file's.
 */
import type { Env } from "../config/env-name.js";
import { loadServerConfig, type ServerConfig, type ServerConfigOptions } from "../config/server-config.js";
import type { SettingDeclaration, SettingValues } from "../config/settings.js";
import { ensureDemoSetup, type DemoFile, type DemoSetup } from "./demo-setup.js";

/** What a core sees while it resolves its settings. */
export interface SettingsContext {
  /** The environment the loaders see: `env` over the demo tokens. */
  readonly env: Env;
  /** Directory relative paths resolve against. */
  readonly cwd: string;
  readonly server: ServerConfig;
  /** Demo files, when demo mode is on. */
  readonly demo: DemoSetup | undefined;
}

/**
 * A core's settings: what it declares (for parsing, `serve --help` and the
 * operations table) and how it turns their values into its configuration.
 * A failure is a ConfigError (`laneway serve` exits 2).
 */
export interface CoreSettings<C = unknown> {
  /** The core's name (the binding's). */
  readonly core: string;
  /** The heading of its section in `serve --help`. */
  readonly title: string;
  readonly declarations: readonly SettingDeclaration[];
  /** What demo mode (`--demo`) writes for the core under the data directory: once, then left alone. */
  readonly demo?: Omit<DemoFile, "core">;
  resolve(values: SettingValues, context: SettingsContext): C | Promise<C>;
}

export interface StartupOptions extends ServerConfigOptions {
  /** The settings of every core to serve (src/server/cores: `coreSettings`). */
  readonly cores?: readonly CoreSettings[];
}

export interface StartupConfig {
  readonly server: ServerConfig;
  /** Each core's resolved configuration, by core name. */
  readonly cores: ReadonlyMap<string, unknown>;
  /** Demo files, when demo mode is on. Check `repairedTokensMode` to warn. */
  readonly demo: DemoSetup | undefined;
  /** The environment the loaders saw: `env` over the demo tokens. */
  readonly env: Env;
}

export async function loadStartupConfig(argv: readonly string[], env: Env, options: StartupOptions = {}): Promise<StartupConfig> {
  const cores = options.cores ?? [];
  const serverOptions: ServerConfigOptions = { ...options, settings: cores.flatMap((c) => c.declarations) };
  let server = loadServerConfig(argv, env, serverOptions);
  let merged: Env = env;
  let demo: DemoSetup | undefined;
  if (server.demo) {
    demo = await ensureDemoSetup(server.dataDir, env, cores.flatMap((c) => (c.demo ? [{ core: c.core, ...c.demo }] : [])));
    merged = Object.freeze({ ...demo.env, ...definedOnly(env) });
    server = loadServerConfig(argv, merged, serverOptions);
  }
  const context: SettingsContext = { env: merged, cwd: options.cwd ?? process.cwd(), server, demo };
  const resolved = new Map<string, unknown>();
  for (const core of cores) resolved.set(core.core, await core.resolve(server.declared, context));
  return Object.freeze({ server, cores: resolved, demo, env: merged });
}

/** Entries of `env` with a value; an unset (or empty) variable must not hide the demo file's value. */
function definedOnly(env: Env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined && value !== "") out[key] = value;
  return out;
}
