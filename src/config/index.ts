/**
 * Server-wide settings (`laneway serve` flags and `LANEWAY_*` variables)
 * and the building blocks every configuration shares: Go durations,
 * secrets and token rules, environment names and files, NATS URLs and
 * credentials files, typed configuration errors. No core's configuration
 * lives here; each core keeps its own (the lanes configuration is in
 * src/lanes/).
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
  serveHelp,
  type ListenAddress,
  type ServerConfig,
  type ServerConfigOptions,
  type WireLimits,
  CORE_SELECTIONS,
  type CoreSelection,
} from "./server-config.js";
export { formatEnvFile, parseEnvFile, readEnvFile } from "./env-file.js";
export { FrozenMap } from "./frozen-map.js";
