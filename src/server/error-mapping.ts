import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { CoreError, type ErrorDomain } from "../errors/core-error.js";
import type { KmapReason } from "../kmap/index.js";
import type { LaneReason } from "../lanes/index.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import type { SwarmReason } from "../swarm/index.js";
import type { ErrorDomainSpec, FallbackKind } from "./core-binding.js";

/**
 * The one place where failures become Connect errors.
 *
 * Cores throw CoreErrors whose reason is the specification's
 * machine-readable code and whose message was written for callers. This
 * module gives each reason its Connect code from one table (DESIGN.md's
 * status table) and attaches a `laneway.errors.v1.ErrorDetail` with the
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

export type Reason = LaneReason | KmapReason | SwarmReason | ServerReason;

/** Every reason and its Connect code: one row per reason. */
const reasonCodes: Readonly<Record<Reason, Code>> = {
  // lanes (seed 000)
  lane_invalid: Code.InvalidArgument,
  lane_forbidden: Code.PermissionDenied,
  lane_conflict: Code.Aborted,
  lane_cursor: Code.Aborted,
  lane_stale: Code.Aborted,
  lane_capacity: Code.ResourceExhausted,
  lane_canceled: Code.Canceled,
  lane_unavailable: Code.Unavailable,
  lane_timeout: Code.DeadlineExceeded,
  // kmap (seed 004)
  invalid_input: Code.InvalidArgument,
  conflict: Code.Aborted,
  backlog_full: Code.ResourceExhausted,
  position_pruned: Code.Aborted,
  // swarm (seed 003)
  swarm_invalid: Code.InvalidArgument,
  swarm_forbidden: Code.PermissionDenied,
  swarm_conflict: Code.Aborted,
  swarm_not_found: Code.NotFound,
  swarm_unavailable: Code.Unavailable,
  swarm_migration_incomplete: Code.Aborted,
  swarm_unscoped: Code.PermissionDenied,
  // every domain
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
export const serverDomain: ErrorDomainSpec = { domain: "server", fallbackReasons: {} };

/** The Connect code of a reason (internal for one the table does not know). */
export function codeOfReason(reason: string): Code {
  return reasonCodes[reason as Reason] ?? Code.Internal;
}

/** Builds a ConnectError with the reason's code and an ErrorDetail. */
export function lanewayError(reason: Reason, message: string, domain: ErrorDomain): ConnectError {
  return new ConnectError(message, reasonCodes[reason], undefined, [{ desc: ErrorDetailSchema, value: { reason, domain } }]);
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

/** The invalid-request reason of a domain (`lane_invalid`, `invalid_input`, …). */
export function invalidReason(spec: ErrorDomainSpec): string {
  return fallbackReason(spec, Code.InvalidArgument);
}

/** Whether a ConnectError already carries an ErrorDetail. */
function hasErrorDetail(error: ConnectError): boolean {
  return error.details.some((d) => ("desc" in d ? d.desc.typeName : d.type) === ErrorDetailSchema.typeName);
}

/** Translates any failure into the ConnectError a client receives. */
export function toConnectError(error: unknown, spec: ErrorDomainSpec, log: Logger): ConnectError {
  if (error instanceof CoreError) {
    const reason = error.reason as Reason;
    const code = reasonCodes[reason] ?? Code.Internal;
    if (code === Code.Internal) log.error(`${error.domain} internal failure`, safeErrorFields(error.cause ?? error));
    return lanewayError(code === Code.Internal ? "internal" : reason, error.message, error.domain);
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
  if (isAbortError(error)) {
    return new ConnectError("the call was canceled", Code.Canceled, undefined, [
      { desc: ErrorDetailSchema, value: { reason: fallbackReason(spec, Code.Canceled), domain: spec.domain } },
    ]);
  }
  log.error("unexpected failure", safeErrorFields(error));
  return lanewayError("internal", "internal error", spec.domain);
}

function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

/**
 * The outermost server interceptor: every error a handler or an inner
 * interceptor throws — including errors raised while a server stream is
 * being iterated — passes through `toConnectError`, in the error domain of
 * the service called.
 */
export function errorMappingInterceptor(log: Logger, domainOf: (typeName: string) => ErrorDomainSpec): Interceptor {
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
            throw toConnectError(error, spec, log);
          }
        })(),
      };
    } catch (error) {
      throw toConnectError(error, spec, log);
    }
  };
}
