/**
 * A setting of `laneway serve`: a flag, its environment variable, and its
 * help line. The server's own settings are declared in server-config.ts;
 * each core's binding declares its own (src/server/cores), and the same
 * loader parses them all, so `serve --help` and docs/operations.md's table
 * list every one. Adding a core's flag is one declaration in its binding
 * and one line where the binding resolves it.
 */
import { ServerConfigError } from "./errors.js";

export interface SettingDeclaration {
  /** The flag without `--` (`max-pending`); undefined for a setting read only from its variable. */
  readonly flag?: string;
  /** Its `LANEWAY_*` variable (or the wire-contract name a specification gives it). */
  readonly env: string;
  readonly type: "string" | "boolean";
  /** The value's name in help (`N`, `FILE`); empty for a boolean. */
  readonly value: string;
  readonly help: string;
}

/** A raw setting and where it came from (the flag or the variable), for messages. */
export interface RawSetting {
  readonly value: string;
  readonly source: string;
}

/** The raw values of declared settings that were set, by flag (or, for a variable only, by variable). */
export type SettingValues = ReadonlyMap<string, RawSetting>;

/** A group of settings in `serve --help`: the server's own, or one core's. */
export interface SettingsSection {
  /** Heading line (empty for the server's own settings). */
  readonly title: string;
  readonly settings: readonly SettingDeclaration[];
}

/** The key a declared setting's value is found under in SettingValues. */
export function settingKey(setting: SettingDeclaration): string {
  return setting.flag ?? setting.env;
}

/** An integer setting within a range (`fallback` when unset); the message names the source, never the value's text beyond a number. */
export function parseCount(raw: RawSetting | undefined, fallback: number, range: { min: number; max: number }): number {
  if (raw === undefined) return fallback;
  if (!/^[0-9]{1,12}$/.test(raw.value)) throw new ServerConfigError(`${raw.source} must be an integer from ${range.min} to ${range.max}`, raw.source);
  const n = Number(raw.value);
  if (n < range.min || n > range.max) {
    throw new ServerConfigError(`${raw.source} must be an integer from ${range.min} to ${range.max}, got ${n}`, raw.source);
  }
  return n;
}

/** The rows of `serve --help`, aligned across every section. */
export function settingsHelp(sections: readonly SettingsSection[]): string[] {
  const rows = sections.map((section) => ({
    title: section.title,
    rows: section.settings.map((s) => [s.flag === undefined ? "" : `--${s.flag}${s.value ? ` ${s.value}` : ""}`, s.env, s.help] as const),
  }));
  const all = rows.flatMap((s) => s.rows);
  const flagWidth = Math.max(...all.map((r) => r[0].length));
  const envWidth = Math.max(...all.map((r) => r[1].length));
  const lines: string[] = [];
  for (const section of rows) {
    if (section.rows.length === 0) continue;
    if (section.title) lines.push("", `${section.title}:`);
    for (const [flag, env, help] of section.rows) lines.push(`  ${flag.padEnd(flagWidth)}  ${env.padEnd(envWidth)}  ${help}`);
  }
  return lines;
}
