/**
 * Typed configuration errors.
 *
 * Startup code reports these to an operator verbatim, so every message is
 * written to be safe to print: no token value, no credentials-file contents
 * and no broker URL (a URL can carry secrets) ever appears in one. Callers
 * can branch on the class instead of parsing text.
 */

import { safeMessage } from "../log/safe-message.js";

/** Base class of every error raised while loading Laneway configuration. */
export class ConfigError extends Error {
  override readonly name: string = "ConfigError";
  readonly [safeMessage] = true as const;
}

/**
 * A Go duration string that `time.ParseDuration` would reject. The message
 * is Go's own text (for example `time: unknown unit "e" in duration "1e3s"`)
 * so operators can compare behaviour with the Go services that share the
 * configuration format.
 */
export class DurationError extends ConfigError {
  override readonly name = "DurationError";
}

/**
 * A `laneway serve` flag or `LANEWAY_*` variable is unusable. The message
 * names the flag or variable the bad value came from and never echoes the
 * value itself.
 */
export class ServerConfigError extends ConfigError {
  override readonly name = "ServerConfigError";
  /** The flag (`--replicas`) or variable (`LANEWAY_REPLICAS`) to blame, when there is one. */
  readonly setting: string | undefined;

  constructor(message: string, setting?: string) {
    super(message);
    this.setting = setting;
  }
}

/** A `KEY=value` environment file is malformed. Lines are named by number, never by content. */
export class EnvFileError extends ConfigError {
  override readonly name = "EnvFileError";
}
