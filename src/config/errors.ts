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
 * The lanes configuration file is unusable. The message always starts with
 * `lanes: ` and names the offending field (and its allowed range for a
 * bound), in the form the lanes specification quotes:
 * `lanes: max_pending must be at least 1, got -1`.
 */
export class LanesConfigError extends ConfigError {
  override readonly name = "LanesConfigError";
  /** Path of the offending field (`max_pending`, `lanes[0].owner`), when one is to blame. */
  readonly field: string | undefined;

  constructor(message: string, field?: string) {
    super(message);
    this.field = field;
  }
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

/** The demo files under the data directory cannot be created or safely reused. */
export class DemoSetupError extends ConfigError {
  override readonly name = "DemoSetupError";
}
