import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/laneway/errors/v1/errors_pb.js";
import { KmapError, type KmapErrorCode } from "../kmap/errors.js";
import { LaneError, type LaneErrorCode } from "../lanes/errors.js";
import { safeErrorFields, type Logger } from "../log/logger.js";
import { SwarmError, type SwarmErrorCode } from "../swarm/errors.js";

/**
 * The one place where failures become Connect errors.
 *
 * Cores throw their own typed errors (LaneError, KmapError, SwarmError) whose
 * messages were written for callers. This module gives each the Connect code
 * of DESIGN.md's table and attaches a `laneway.errors.v1.ErrorDetail` with the
 * specification's reason, so a client can switch on the reason without
 * parsing text. Anything else — a driver, socket or SQLite error — becomes
 * `internal` with a fixed message: its text may hold an address, a path or a
 * secret, so it is logged only as its class name and code.
 */

/** The core an RPC belongs to; it picks the reason for generic failures. */
export type ErrorDomain = "lanes" | "swarm" | "kmap" | "server";

const laneCodes: Record<LaneErrorCode, Code> = {
  lane_invalid: Code.InvalidArgument,
  lane_forbidden: Code.PermissionDenied,
  lane_conflict: Code.Aborted,
  lane_cursor: Code.Aborted,
  lane_stale: Code.Aborted,
  lane_capacity: Code.ResourceExhausted,
  lane_canceled: Code.Canceled,
  lane_unavailable: Code.Unavailable,
  lane_timeout: Code.DeadlineExceeded,
};

const kmapCodes: Record<KmapErrorCode, Code> = {
  invalid_input: Code.InvalidArgument,
  conflict: Code.Aborted,
  not_found: Code.NotFound,
  internal: Code.Internal,
};

const swarmCodes: Record<SwarmErrorCode, Code> = {
  swarm_invalid: Code.InvalidArgument,
  swarm_forbidden: Code.PermissionDenied,
  swarm_conflict: Code.Aborted,
  swarm_unavailable: Code.Unavailable,
  swarm_migration_incomplete: Code.Aborted,
  swarm_unscoped: Code.PermissionDenied,
};

/**
 * The reason a domain uses for a failure that did not come from its core
 * (request validation, cancellation, deadlines, an unexpected error).
 */
function genericReason(domain: ErrorDomain, code: Code): string {
  switch (code) {
    case Code.InvalidArgument:
      return { lanes: "lane_invalid", kmap: "invalid_input", swarm: "swarm_invalid", server: "invalid_argument" }[domain];
    case Code.Canceled:
      return domain === "lanes" ? "lane_canceled" : "canceled";
    case Code.DeadlineExceeded:
      return domain === "lanes" ? "lane_timeout" : "deadline_exceeded";
    case Code.Unavailable:
      return { lanes: "lane_unavailable", kmap: "unavailable", swarm: "swarm_unavailable", server: "unavailable" }[domain];
    case Code.Unauthenticated:
      return "unauthorized";
    case Code.PermissionDenied:
      return "forbidden";
    case Code.Unimplemented:
      return "unimplemented";
    case Code.NotFound:
      return "not_found";
    case Code.ResourceExhausted:
      return domain === "lanes" ? "lane_capacity" : "resource_exhausted";
    default:
      return "internal";
  }
}

/** Builds a ConnectError that carries an ErrorDetail. */
export function lanewayError(code: Code, message: string, reason: string, domain: ErrorDomain): ConnectError {
  return new ConnectError(message, code, undefined, [{ desc: ErrorDetailSchema, value: { reason, domain } }]);
}

/** Whether a ConnectError already carries an ErrorDetail. */
function hasErrorDetail(error: ConnectError): boolean {
  return error.details.some((d) => ("desc" in d ? d.desc.typeName : d.type) === ErrorDetailSchema.typeName);
}

/** Translates any failure into the ConnectError a client receives. */
export function toConnectError(error: unknown, domain: ErrorDomain, log: Logger): ConnectError {
  if (error instanceof LaneError) {
    return lanewayError(laneCodes[error.code], error.message, error.code, "lanes");
  }
  if (error instanceof KmapError) {
    if (error.code === "internal") log.error("kmap internal failure", safeErrorFields(error.cause ?? error));
    return lanewayError(kmapCodes[error.code], error.message, error.code, "kmap");
  }
  if (error instanceof SwarmError) {
    return lanewayError(swarmCodes[error.code], error.message, error.code, "swarm");
  }
  if (error instanceof ConnectError) {
    if (hasErrorDetail(error)) return error;
    if (error.code === Code.Internal || error.code === Code.Unknown) {
      log.error("unexpected failure", safeErrorFields(error.cause ?? error));
      return lanewayError(Code.Internal, "internal error", "internal", domain);
    }
    // Validation, cancellation and deadline errors built by Connect itself:
    // their messages are Connect's own and safe; keep their details (for
    // example protovalidate's Violations) and add the domain's reason.
    error.details.push({ desc: ErrorDetailSchema, value: { reason: genericReason(domain, error.code), domain } });
    return error;
  }
  if (isAbortError(error)) {
    return lanewayError(Code.Canceled, "the call was canceled", genericReason(domain, Code.Canceled), domain);
  }
  log.error("unexpected failure", safeErrorFields(error));
  return lanewayError(Code.Internal, "internal error", "internal", domain);
}

function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError");
}

/** Maps a service's type name to its error domain. */
export function domainOfService(typeName: string): ErrorDomain {
  if (typeName.startsWith("laneway.lane.")) return "lanes";
  if (typeName.startsWith("laneway.kmap.")) return "kmap";
  if (typeName.startsWith("laneway.swarm.")) return "swarm";
  return "server";
}

/**
 * The outermost server interceptor: every error a handler or an inner
 * interceptor throws — including errors raised while a server stream is
 * being iterated — passes through `toConnectError`.
 */
export function errorMappingInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const domain = domainOfService(req.service.typeName);
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
            throw toConnectError(error, domain, log);
          }
        })(),
      };
    } catch (error) {
      throw toConnectError(error, domain, log);
    }
  };
}
