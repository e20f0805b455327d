/**
 * Errors about Laneway's own embedded nats-server child process (not about
 * a call, so they are not BrokerErrors). Their messages never include the
 * server's log; the last log lines are kept in `logTail` for an operator's
 * diagnostics (they may contain addresses and paths: do not send them to
 * RPC callers).
 */
import { LanewayNatsError } from "./broker-errors.js";

/** Base class of errors about the embedded nats-server process. */
export abstract class EmbeddedServerError extends LanewayNatsError {}

/** The nats-server binary is not installed (or not executable) where Laneway looks. */
export class NatsServerNotInstalledError extends EmbeddedServerError {
  override readonly name = "NatsServerNotInstalledError";

  constructor(
    /** The path or command name that was looked up. */
    readonly binary: string,
    options?: ErrorOptions,
  ) {
    super(
      "nats-server is not installed: install it with `apt-get install -y nats-server` (or set LANEWAY_NATS_SERVER_BIN to its path)",
      options,
    );
  }
}

/** `nats-server -t` rejected the generated configuration (e.g. a bad extra config snippet). */
export class EmbeddedServerConfigError extends EmbeddedServerError {
  override readonly name = "EmbeddedServerConfigError";

  constructor(
    readonly configPath: string,
    readonly logTail: readonly string[],
  ) {
    super("nats-server rejected the embedded server configuration");
  }
}

/** The embedded nats-server exited before it became ready. */
export class EmbeddedServerExitedError extends EmbeddedServerError {
  override readonly name = "EmbeddedServerExitedError";

  constructor(
    readonly exitCode: number | null,
    readonly signal: NodeJS.Signals | null,
    readonly logTail: readonly string[],
    options?: ErrorOptions,
  ) {
    super(
      `nats-server exited before it became ready (${signal === null ? `exit code ${exitCode ?? "unknown"}` : `signal ${signal}`})`,
      options,
    );
  }
}

/** The embedded nats-server did not become ready before the startup deadline (it has been killed). */
export class EmbeddedServerStartTimeoutError extends EmbeddedServerError {
  override readonly name = "EmbeddedServerStartTimeoutError";

  constructor(
    readonly timeoutMs: number,
    readonly logTail: readonly string[],
  ) {
    super(`nats-server did not become ready within ${timeoutMs} ms`);
  }
}

/**
 * The embedded nats-server exited and could not be started again within
 * the supervisor's attempts. `cause` is the last attempt's failure (log
 * its class and code only).
 */
export class EmbeddedServerRestartError extends EmbeddedServerError {
  override readonly name = "EmbeddedServerRestartError";

  constructor(
    /** Restart attempts made since the server last ran stably. */
    readonly attempts: number,
    options?: ErrorOptions,
  ) {
    super(`the embedded nats-server could not be restarted (${attempts} attempt${attempts === 1 ? "" : "s"})`, options);
  }
}
