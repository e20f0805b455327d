/**
 * Public surface of Laneway's configuration: server settings, the lanes
 * configuration, demo setup, and the building blocks they share (Go
 * durations, secrets, typed errors). Other modules import from here, not
 * from the individual files.
 */
export {
  ConfigError,
  DemoSetupError,
  DurationError,
  EnvFileError,
  LanesConfigError,
  ServerConfigError,
} from "./errors.js";
export { constantTimeEquals, Secret } from "./secret.js";
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
  ADMIN_TOKEN_ENV,
  IDENTIFIER_PATTERN,
  LANE_BOUND_RULES,
  LANES_LIMITS,
  loadLanesConfig,
  parseLanesConfig,
  type LaneBounds,
  type LaneDefinition,
  type LanePrincipal,
  type LanesBroker,
  type LanesConfig,
  type LanesConfigOptions,
} from "./lanes-config.js";
export { REGISTRY_FORMAT_VERSION, registryDocument, serializeRegistry } from "./registry.js";
export { laneCapabilities, projectCapabilities, type LaneCapabilities } from "./capabilities.js";
export {
  loadServerConfig,
  SERVER_DEFAULTS,
  type ListenAddress,
  type ServerConfig,
  type ServerConfigOptions,
} from "./server-config.js";
export { formatEnvFile, parseEnvFile, readEnvFile } from "./env-file.js";
export {
  DEMO_LANES_CONFIG,
  DEMO_LANES_FILE,
  DEMO_TOKEN_VARIABLES,
  DEMO_TOKENS_FILE,
  ensureDemoSetup,
  type DemoSetup,
} from "./demo-setup.js";
export { loadStartupConfig, type StartupConfig } from "./startup-config.js";
export { FrozenMap } from "./frozen-map.js";
