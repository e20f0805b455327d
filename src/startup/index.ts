/**
 * What `laneway serve` resolves before it starts anything: the server
 * settings, the demo files, and each core's configuration, in the one order
 * that makes them consistent.
 */
export {
  DEMO_LANES_CONFIG,
  DEMO_LANES_FILE,
  DEMO_TOKEN_VARIABLES,
  DEMO_TOKENS_FILE,
  DemoSetupError,
  ensureDemoSetup,
  type DemoSetup,
} from "./demo-setup.js";
export { loadStartupConfig, type CoreSettings, type SettingsContext, type StartupConfig, type StartupOptions } from "./startup-config.js";
