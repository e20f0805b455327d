/**
 * What `laneway serve` resolves before it starts anything: the server
 * settings, the demo files, and each core's configuration, in the one order
 * that makes them consistent.
 */
export { DEMO_TOKENS_FILE, DemoSetupError, ensureDemoSetup, type DemoFile, type DemoSetup } from "./demo-setup.js";
export { loadStartupConfig, type CoreSettings, type SettingsContext, type StartupConfig, type StartupOptions } from "./startup-config.js";
