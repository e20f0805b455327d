import { ADMIN_TOKEN_ENV, ConfigError, serveHelp } from "../config/index.js";
import { CoreStartupError } from "../errors/core-error.js";
import { PAUSE_AT_ENV, pausePointsFromSetting } from "../fault-injection/pause-points.js";
import { createLogger, safeErrorFields } from "../log/logger.js";
import { EmbeddedServerError, UnsafeBrokerError } from "../nats/index.js";
import { corePausePoints, LanewayServer } from "../server/laneway-server.js";
import { coreBindings, coreSettings } from "../server/cores/index.js";
import { loadStartupConfig } from "../startup/index.js";
import type { CliIo } from "./command.js";
import { lanewayVersion } from "./version.js";

/**
 * `laneway serve`: start the server and run until SIGTERM or SIGINT.
 *
 * Exit codes: 0 after a clean shutdown on SIGTERM/SIGINT (every in-flight
 * call finished, the Kmap runtime stopped and SQLite closed, NATS closed,
 * the embedded nats-server stopped); 1 when shutdown had to cancel calls or
 * a step failed, when a core failed at run time (the Kmap runtime) or the
 * embedded nats-server exited and could not be restarted, or when
 * startup failed; 2 for configuration errors.
 * Diagnostics never print raw backend errors, broker addresses or secrets.
 */
export async function serveCommand(args: readonly string[], io: CliIo): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    io.stdout(serveHelp(coreSettings.map((c) => ({ title: c.title, settings: c.declarations }))));
    return 0;
  }
  let startup;
  let pausePoints;
  try {
    startup = await loadStartupConfig(args, io.env, { cores: coreSettings });
    pausePoints = pausePointsFromSetting(startup.env[PAUSE_AT_ENV], corePausePoints);
  } catch (error) {
    if (error instanceof ConfigError) {
      io.stderr(`laneway: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  const log = createLogger({ level: startup.server.observe.logLevel, format: startup.server.observe.logFormat });
  let server: LanewayServer;
  try {
    server = await LanewayServer.start({ startup, logger: log, pausePoints });
  } catch (error) {
    if (error instanceof EmbeddedServerError) {
      io.stderr(`laneway: ${error.message}\n`);
      return 1;
    }
    if (error instanceof UnsafeBrokerError) {
      // A configuration the operator must decide on: one line, exit 2.
      io.stderr(`laneway: ${error.message}\n`);
      return 2;
    }
    if (error instanceof CoreStartupError) {
      // A conflict needs a person (exit 2); an unreachable broker may pass (exit 1).
      io.stderr(`laneway: ${error.message}\n`);
      return error.kind === "state_conflict" ? 2 : 1;
    }
    log.error("startup failed", safeErrorFields(error));
    io.stderr("laneway: startup failed (see the log line above)\n");
    return 1;
  }

  const { server: settings, demo } = startup;
  const lines = [
    `laneway ${lanewayVersion()} listening on ${server.url}`,
    `  data directory: ${settings.dataDir}`,
    `  NATS: ${settings.natsServers ? "external server" : "embedded nats-server (JetStream store in the data directory)"}`,
    ...(settings.cores === "all" ? [] : [`  cores: ${settings.cores.join(", ")} only (a replica: the full instance serves the others)`]),
    ...coreBindings.flatMap((b) => (b.summary && startup.cores.has(b.name) ? [`  ${b.name}: ${b.summary(startup.cores.get(b.name))}`] : [])),
    `  operator RPCs: ${
      !settings.adminToken
        ? "disabled (LANEWAY_ADMIN_TOKEN is not set)"
        : demo && !demo.fromEnvironment.includes(ADMIN_TOKEN_ENV)
          ? `enabled (LANEWAY_ADMIN_TOKEN from ${demo.tokensPath})`
          : "enabled (LANEWAY_ADMIN_TOKEN from the environment)"
    }`,
  ];
  if (demo) {
    const own = demo.fromEnvironment.length > 0 ? `; ${demo.fromEnvironment.join(", ")} come from the environment and are not in it` : "";
    lines.push(`  demo tokens: ${demo.tokensPath} (load them with: set -a; . ${demo.tokensPath}; set +a${own})`);
    if (demo.completed.length > 0) lines.push(`  demo tokens: ${demo.completed.join(", ")} were missing from the file and have been generated`);
    if (demo.repairedTokensMode) lines.push("  warning: the demo tokens file was readable by other users; its mode is now 0600");
  }
  io.stdout(lines.join("\n") + "\n");
  log.info("laneway serving", { url: server.url, version: lanewayVersion() });

  let stopping = false;
  const reason = await Promise.race([
    new Promise<NodeJS.Signals>((resolve) => {
      const onSignal = (signal: NodeJS.Signals) => {
        if (!stopping) {
          stopping = true;
          resolve(signal);
          return;
        }
        // A second signal while draining: stop waiting for in-flight calls.
        log.warn("second signal during shutdown: exiting without waiting", { signal });
        process.exit(1);
      };
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }),
    server.fatal.then(() => "fatal" as const),
  ]);
  stopping = true;
  log.info("shutting down", { reason });
  const report = await server.close();
  for (const step of report.steps) if (!step.ok) log.error("shutdown step did not complete", { step: step.step });
  log.info("stopped", { clean: report.ok });
  // A core failure ends the process non-zero even when shutdown was clean:
  // the supervisor must restart it so that recovery runs.
  return report.ok && reason !== "fatal" ? 0 : 1;
}
