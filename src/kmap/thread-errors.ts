import { hasSafeMessage } from "../log/safe-message.js";
import { CoreError } from "../errors/core-error.js";
import { KmapError, type KmapReason } from "./errors.js";

/**
 * Errors as they cross the boundary between the Kweb worker thread and the
 * main thread. Classes do not survive structured cloning, and an operator
 * reading the log needs the whole chain — Laneway's own failure, what caused
 * it, down to the SQLite or system code — so a failure travels as the list
 * of its causes, outermost first.
 *
 * Only what the log may show travels: for Laneway's own errors (whose
 * messages were written for callers) the class name, reason and message;
 * for anything else (a SqliteError, a system error) the class name and code
 * only — their messages can hold paths, so they never leave the worker.
 */
export interface WireFailureLink {
  readonly name: string;
  /** A CoreError's reason. */
  readonly reason?: string;
  /** A driver or system error's code (`SQLITE_FULL`, `ENOSPC`), or an error's own code field. */
  readonly code?: string;
  /** The message, for Laneway's own errors only. */
  readonly message?: string;
}

export type WireFailure = readonly WireFailureLink[];

export function failureToWire(error: unknown): WireFailure {
  const links: WireFailureLink[] = [];
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (current !== undefined && !seen.has(current) && links.length < 8) {
    seen.add(current);
    if (!(current instanceof Error)) {
      links.push({ name: typeof current });
      break;
    }
    const code = (current as { code?: unknown }).code;
    const name = current.constructor.name === "Error" ? current.name : current.constructor.name;
    links.push({
      name,
      ...(current instanceof CoreError ? { reason: current.reason } : {}),
      ...(typeof code === "string" || typeof code === "number" ? { code: String(code) } : {}),
      ...(hasSafeMessage(current) ? { message: current.message } : {}),
    });
    current = current.cause;
  }
  return links;
}

/** An error class named `name`, so that logs show the original class name. */
function namedErrorClass(name: string): new (message: string) => Error {
  const safe = /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/.test(name) ? name : "Error";
  return { [safe]: class extends Error {} }[safe]!;
}

/**
 * Rebuilds the chain: Laneway's own errors as KmapErrors with their reason,
 * message and original name; anything else as an error of its original
 * class name with its code and a message that says nothing.
 */
export function failureFromWire(wire: WireFailure, fallbackMessage = "the Kmap command lane failed"): KmapError {
  let cause: Error | undefined;
  for (const link of [...wire].reverse()) {
    let error: Error;
    if (link.reason !== undefined && link.message !== undefined) {
      error = new KmapError(link.reason as KmapReason, link.message, cause === undefined ? undefined : { cause });
      Object.defineProperty(error, "name", { value: link.name, enumerable: false, configurable: true, writable: true });
    } else {
      const Named = namedErrorClass(link.name);
      error = new Named(`${link.name}${link.code === undefined ? "" : ` ${link.code}`} (message withheld)`);
      if (link.code !== undefined) Object.assign(error, { code: link.code });
      if (cause !== undefined) Object.assign(error, { cause });
    }
    cause = error;
  }
  if (cause instanceof KmapError) return cause;
  return new KmapError("internal", fallbackMessage, cause === undefined ? undefined : { cause });
}
