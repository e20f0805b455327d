/**
 * Server-wide settings (`laneway serve` flags and `LANEWAY_*` variables)
 * and the building blocks every configuration shares: Go durations,
 * secrets and token rules, environment names and files, NATS URLs and
 * credentials files, typed configuration errors, and the way a core
 * declares its own settings (settings.ts). No core's configuration lives
 * here; each core's binding declares and resolves its own.
 */
export { ConfigError, DurationError, EnvFileError, ServerConfigError } from "./errors.js";
export { constantTimeEquals, Secret } from "./secret.js";
export { ADMIN_TOKEN_ENV, TOKEN_RULES, tokenProblem } from "./tokens.js";
export {
  formatGoDuration,
  HOUR,
  MICROSECOND,
  MILLISECOND,
  millisToNanos,
  MINUTE,
  NANOSECOND,
  nanosToMillis,
  parseGoDuration,
  SECOND,
} from "./duration.js";
export { envValue, isEnvName, type Env } from "./env-name.js";
export { parseNatsServers, type NatsUrlResult } from "./nats-url.js";
export { resolveCredentialsFile, type CredentialsFileResult } from "./credentials-file.js";
export {
  loadServerConfig,
  SERVER_DEFAULTS,
  SERVER_SETTINGS,
  serveHelp,
  type ListenAddress,
  type ObserveSettings,
  type ServerConfig,
  type ServerConfigOptions,
  type WireLimits,
  type CoreSelection,
} from "./server-config.js";
export { formatEnvFile, parseEnvFile, readEnvFile } from "./env-file.js";
export { parseCount, settingKey, type RawSetting, type SettingDeclaration, type SettingsSection, type SettingValues } from "./settings.js";
export { FrozenMap } from "./frozen-map.js";
