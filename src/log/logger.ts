import { hasSafeMessage } from "./safe-message.js";

/**
 * Structured logging: one JSON object per line on stderr.
 *
 * Log lines are read by operators and shipped to systems with wide access, so
 * they follow the same rule as error messages: no token, receipt, credential,
 * broker address or raw backend error. Fields are therefore restricted to
 * scalars chosen by the caller, and errors go through `safeErrorFields`,
 * which keeps only what Laneway itself wrote.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Scalar log fields; objects are not accepted so nothing is dumped whole. */
export type LogFields = Readonly<Record<string, string | number | boolean | undefined>>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line. */
  child(fields: LogFields): Logger;
}

const levelOrder: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Options of `createLogger`. */
export interface LoggerOptions {
  /** The lowest level written; default `info` (the server passes `LANEWAY_LOG_LEVEL`). */
  level?: LogLevel;
  /** Where lines go; default process.stderr. */
  write?: (line: string) => void;
  /** Fields on every line. */
  fields?: LogFields;
  /** `json` (default) or `text` for a person at a terminal (the server passes `LANEWAY_LOG_FORMAT`). */
  format?: LogFormat;
}

/** How lines are written: one JSON object, or `time LEVEL message key=value ...`. */
export type LogFormat = "json" | "text";

export function createLogger(options: LoggerOptions = {}): Logger {
  const minimum = levelOrder[options.level ?? "info"];
  const write = options.write ?? ((line: string) => process.stderr.write(line));
  const text = options.format === "text";
  const make = (base: LogFields): Logger => {
    const emit = (level: LogLevel, message: string, fields?: LogFields) => {
      if (levelOrder[level] < minimum) return;
      if (text) {
        write(textLine(level, message, { ...base, ...fields }));
        return;
      }
      const line = { time: new Date().toISOString(), level, msg: message, ...base, ...fields };
      write(JSON.stringify(line) + "\n");
    };
    return {
      debug: (m, f) => emit("debug", m, f),
      info: (m, f) => emit("info", m, f),
      warn: (m, f) => emit("warn", m, f),
      error: (m, f) => emit("error", m, f),
      child: (fields) => make({ ...base, ...fields }),
    };
  };
  return make(options.fields ?? {});
}

/** `2026-12-01T10:00:00.000Z INFO message key=value key="a value"`: values quoted when they hold spaces, quotes or `=`. */
function textLine(level: LogLevel, message: string, fields: LogFields): string {
  let line = `${new Date().toISOString()} ${level.toUpperCase().padEnd(5)} ${message}`;
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) continue;
    const shown = String(value);
    line += ` ${key}=${shown === "" || /[\s"=\\]/.test(shown) ? JSON.stringify(shown) : shown}`;
  }
  return line + "\n";
}

/** A logger that writes nothing, for library use without a host logger. */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
};


/**
 * Describes an error for a log line without leaking it. Errors Laneway
 * constructs itself (marked with `safeMessage`) carry messages written for
 * callers, so their message is kept;
 * anything else — a driver, socket or SQLite error — is reduced to its class
 * name and code, because its text may embed an address, a path or a secret.
 */
export function safeErrorFields(error: unknown): LogFields {
  if (hasSafeMessage(error)) {
    // What caused it, said safely the same way: an operator must be able to
    // tell a locked database from a full disk or a dead worker thread.
    const cause = error.cause === undefined ? {} : safeErrorFields(error.cause);
    // A core error's machine-readable reason is logged as its code.
    const code = (error as { reason?: unknown }).reason ?? (error as { code?: unknown }).code;
    return {
      error: error.name,
      code: typeof code === "string" || typeof code === "number" ? String(code) : undefined,
      reason: error.message,
      ...(cause.error !== undefined ? { cause: cause.error, causeCode: cause.code, causeReason: cause.reason } : {}),
    };
  }
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return { error: error.constructor.name, code: typeof code === "string" || typeof code === "number" ? String(code) : undefined };
  }
  return { error: typeof error };
}
