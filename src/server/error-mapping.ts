import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CoreError, type ErrorDomain } from "../errors/core-error.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import type { ErrorDomainSpec, FallbackKind } from "./core-binding.js";

/**
 * The one place where failures become Connect errors.
 *
 * Cores throw CoreErrors whose reason is the specification's
 * machine-readable code and whose message was written for callers. Each
 * core's binding declares its error domain: every reason it gives and the
 * Connect code of each (DESIGN.md's status table). This module holds only
 * the mechanism and the server's own reasons: it looks a reason up in its
 * domain's table and attaches a `laneway.errors.v1.ErrorDetail` with the
 * reason and the domain, so a client can switch on the reason without
 * parsing text. Anything else — a driver, socket or SQLite error — becomes
 * `internal` with a fixed message: its text may hold an address, a path or a
 * secret, so it is logged only as its class name and code.
 */

/** Reasons the server itself gives, in every domain. */
export type ServerReason =
  | "unauthorized"
  | "forbidden"
  | "unimplemented"
  | "not_found"
  | "internal"
  | "invalid_argument"
  | "canceled"
  | "deadline_exceeded"
  | "unavailable"
  | "resource_exhausted"
  | "message_too_large";

/** The server's reasons and their Connect codes; a domain's own table comes first. */
const serverReasonCodes: Readonly<Record<ServerReason, Code>> = {
  unauthorized: Code.Unauthenticated,
  forbidden: Code.PermissionDenied,
  unimplemented: Code.Unimplemented,
  not_found: Code.NotFound,
  internal: Code.Internal,
  invalid_argument: Code.InvalidArgument,
  canceled: Code.Canceled,
  deadline_exceeded: Code.DeadlineExceeded,
  unavailable: Code.Unavailable,
  resource_exhausted: Code.ResourceExhausted,
  message_too_large: Code.ResourceExhausted,
};

/** The shared reason for a failure kind, when a domain names none of its own. */
const sharedFallbacks: Readonly<Record<FallbackKind, ServerReason>> = {
  invalid: "invalid_argument",
  canceled: "canceled",
  timeout: "deadline_exceeded",
  unavailable: "unavailable",
  capacity: "resource_exhausted",
};

/** The domain of failures no core owns: health, reflection, unknown routes. */
export const serverDomain: ErrorDomainSpec = { domain: "server", reasons: {}, fallbackReasons: {} };

/** The Connect code of a reason in a domain (internal for one neither its table nor the server's knows). */
export function codeOfReason(spec: ErrorDomainSpec, reason: string): Code {
  if (Object.hasOwn(spec.reasons, reason)) return spec.reasons[reason]!;
  if (Object.hasOwn(serverReasonCodes, reason)) return serverReasonCodes[reason as ServerReason];
  return Code.Internal;
}

/** Builds a ConnectError with one of the server's reasons, its code and an ErrorDetail. */
export function lanewayError(reason: ServerReason, message: string, domain: ErrorDomain): ConnectError {
  return detailed(message, serverReasonCodes[reason], reason, domain);
}

/** Builds a ConnectError with a reason of the domain, its code and an ErrorDetail. */
export function domainError(spec: ErrorDomainSpec, reason: string, message: string): ConnectError {
  return detailed(message, codeOfReason(spec, reason), reason, spec.domain);
}

function detailed(message: string, code: Code, reason: string, domain: ErrorDomain): ConnectError {
  return new ConnectError(message, code, undefined, [{ desc: ErrorDetailSchema, value: { reason, domain } }]);
}

/** Codes a domain may give its own reason for failures that did not come from its core. */
const fallbackKinds: Readonly<Partial<Record<Code, FallbackKind>>> = {
  [Code.InvalidArgument]: "invalid",
  [Code.Canceled]: "canceled",
  [Code.DeadlineExceeded]: "timeout",
  [Code.Unavailable]: "unavailable",
  [Code.ResourceExhausted]: "capacity",
};

/** The shared reason of the other codes Connect itself raises. */
const sharedReasons: Readonly<Partial<Record<Code, ServerReason>>> = {
  [Code.Unauthenticated]: "unauthorized",
  [Code.PermissionDenied]: "forbidden",
  [Code.Unimplemented]: "unimplemented",
  [Code.NotFound]: "not_found",
};

/** The reason a domain gives a failure that did not come from its core. */
function fallbackReason(spec: ErrorDomainSpec, code: Code): string {
  const kind = fallbackKinds[code];
  if (kind !== undefined) return spec.fallbackReasons[kind] ?? sharedFallbacks[kind];
  return sharedReasons[code] ?? "internal";
}

/** The invalid-request reason of a domain (the binding's own, or `invalid_input`). */
export function invalidReason(spec: ErrorDomainSpec): string {
  return fallbackReason(spec, Code.InvalidArgument);
}

/** Whether a ConnectError already carries an ErrorDetail. */
function hasErrorDetail(error: ConnectError): boolean {
  return error.details.some((d) => ("desc" in d ? d.desc.typeName : d.type) === ErrorDetailSchema.typeName);
}

/**
 * Translates any failure into the ConnectError a client receives. `spec` is
 * the domain of the service called; a core error of another domain is
 * looked up in `domains`. With the call's `signal`, a failure of a caller
 * that went away (callerGone) is a cancellation, logged at debug level
 * only.
 */
export function toConnectError(error: unknown, spec: ErrorDomainSpec, log: Logger, domains?: ReadonlyMap<string, ErrorDomainSpec>, signal?: AbortSignal): ConnectError {
  if (signal !== undefined && callerGone(error, signal)) {
    log.debug("the caller closed its connection before the call ended");
    return canceledError(spec);
  }
  if (error instanceof CoreError) {
    const own = error.domain === spec.domain ? spec : domains?.get(error.domain);
    const code = codeOfReason(own ?? serverDomain, error.reason);
    if (code === Code.Internal) {
      log.error(`${error.domain} internal failure`, safeErrorFields(error.cause ?? error));
      return lanewayError("internal", error.message, error.domain);
    }
    return detailed(error.message, code, error.reason, error.domain);
  }
  if (error instanceof ConnectError) {
    if (hasErrorDetail(error)) return error;
    if (error.code === Code.Internal || error.code === Code.Unknown) {
      log.error("unexpected failure", safeErrorFields(error.cause ?? error));
      return lanewayError("internal", "internal error", spec.domain);
    }
    // Validation, cancellation and deadline errors built by Connect itself:
    // their messages are Connect's own and safe; keep their details (for
    // example protovalidate's Violations) and add the domain's reason.
    error.details.push({ desc: ErrorDetailSchema, value: { reason: fallbackReason(spec, error.code), domain: spec.domain } });
    return error;
  }
  if (isAbortError(error)) return canceledError(spec);
  log.error("unexpected failure", safeErrorFields(error));
  return lanewayError("internal", "internal error", spec.domain);
}

function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

/** The errors of a write to (or a read from) a caller's connection that the caller closed or reset. */
const CALLER_GONE_CODES = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "ERR_STREAM_PREMATURE_CLOSE", "ERR_STREAM_DESTROYED", "ERR_HTTP2_STREAM_CANCEL", "ERR_HTTP2_INVALID_STREAM"]);

/**
 * Whether a failure is the caller having gone away: its call's signal has
 * aborted and the failure (or one of its causes) is a connection error of
 * the caller's own socket. A Follow whose client stops reading and closes
 * its stream ends so; nothing can reach that caller any more, and it is no
 * failure of the server's.
 */
function callerGone(error: unknown, signal: AbortSignal): boolean {
  if (!signal.aborted) return false;
  for (let current = error, depth = 0; depth < 8 && typeof current === "object" && current !== null; current = (current as { cause?: unknown }).cause, depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && CALLER_GONE_CODES.has(code)) return true;
  }
  return false;
}

/** A canceled call's answer, with the domain's reason for cancellation. */
function canceledError(spec: ErrorDomainSpec): ConnectError {
  return new ConnectError("the call was canceled", Code.Canceled, undefined, [
    { desc: ErrorDetailSchema, value: { reason: fallbackReason(spec, Code.Canceled), domain: spec.domain } },
  ]);
}

/**
 * The outermost server interceptor: every error a handler or an inner
 * interceptor throws — including errors raised while a server stream is
 * being iterated — passes through `toConnectError`, in the error domain of
 * the service called.
 */
export function errorMappingInterceptor(
  log: Logger,
  domainOf: (typeName: string) => ErrorDomainSpec,
  domains?: ReadonlyMap<string, ErrorDomainSpec>,
): Interceptor {
  return (next) => async (req) => {
    const spec = domainOf(req.service.typeName);
    try {
      const res = await next(req);
      if (!res.stream) return res;
      const source = res.message;
      return {
        ...res,
        message: (async function* () {
          try {
            yield* source;
          } catch (error) {
            throw toConnectError(error, spec, log, domains, req.signal);
          }
        })(),
      };
    } catch (error) {
      throw toConnectError(error, spec, log, domains, req.signal);
    }
  };
}
