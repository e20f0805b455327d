/**
 * Typed errors of broker calls, and the one place that turns
 * whatever nats.js throws into them.
 *
 * Why a classifier: the cores (lanes, swarm) must decide between "the broker
 * is down" (503), "the broker did not answer in time" (504) and "JetStream
 * refused this particular write" (a conflict or capacity error keyed by the
 * JetStream `err_code`). nats.js reports these as a zoo of error classes,
 * some wrapped in `RequestError`, some only recognisable by name. Callers get
 * one closed set of classes with stable fields instead and never match on
 * message text.
 *
 * Why fixed messages: every `message` below is a constant template. The raw
 * backend text can carry a broker address ("connection refused
 * 127.0.0.1:4222"), a subject of another tenant, or details of credentials,
 * and Laneway never shows any of those to a caller or writes them to a log.
 *
 * SECURITY: the original nats.js error is kept as the standard `cause` for a
 * developer at a debugger ONLY. `cause` must never be logged, serialised,
 * put in an RPC error detail, or otherwise sent anywhere — note that
 * `util.inspect` / `console.log(err)` and some log serialisers print
 * `cause`, so log `err.message` and the typed fields, never the error object.
 */
import { safeMessage } from "../log/safe-message.js";
import {
  AuthorizationError,
  ClosedConnectionError,
  ConnectionError,
  DrainingConnectionError,
  InvalidArgumentError,
  InvalidSubjectError,
  NoRespondersError,
  PermissionViolationError,
  ProtocolError,
  RequestError,
  TimeoutError,
  UserAuthenticationExpiredError,
} from "@nats-io/transport-node";
import { JetStreamApiError } from "@nats-io/jetstream";
import { JetStreamStatusError, jserrors } from "@nats-io/jetstream/internal";

/** The categories a core maps to its own error vocabulary. */
export type NatsFailureKind =
  | "unavailable"
  | "timeout"
  | "jetstream"
  | "permission"
  | "invalid"
  | "unknown";

/** Base class of every error this module throws. */
export abstract class LanewayNatsError extends Error {
  readonly [safeMessage] = true as const;
}

/**
 * Base class of the errors a broker call can end in (what
 * {@link classifyNatsError} returns). `kind` is the category to switch on.
 */
export abstract class BrokerError extends LanewayNatsError {
  abstract readonly kind: NatsFailureKind;
}

/**
 * Why the broker is unavailable. Health reporting and operators use it; the
 * RPC layer maps every reason to `unavailable`.
 * - `not_connected`: Laneway has no live connection right now (it is
 *   reconnecting, or has been closed). Raised at once, never after a wait.
 * - `connection_closed`: the connection closed under a call in flight.
 * - `connection_failed`: a connect attempt failed (refused, unreachable,
 *   handshake or TLS failure, connect timeout).
 * - `authentication`: the server rejected Laneway's credentials.
 * - `credentials_unreadable`: the configured `.creds` file cannot be read.
 * - `no_responders`: nothing answered the request subject (JetStream absent
 *   for this account/domain, or no stream captures the subject).
 * - `jetstream_disabled`: JetStream is not enabled on the server/account.
 * - `cluster_unavailable`: the JetStream cluster cannot serve now (no meta
 *   leader, e.g. during an election).
 */
export type UnavailableReason =
  | "not_connected"
  | "connection_closed"
  | "connection_failed"
  | "authentication"
  | "credentials_unreadable"
  | "no_responders"
  | "jetstream_disabled"
  | "cluster_unavailable";

const unavailableMessages: Record<UnavailableReason, string> = {
  not_connected: "message broker unavailable: not connected",
  connection_closed: "message broker unavailable: connection closed",
  connection_failed: "message broker unavailable: connection failed",
  authentication: "message broker unavailable: authentication rejected",
  credentials_unreadable: "message broker unavailable: credentials file unreadable",
  no_responders: "message broker unavailable: no responders",
  jetstream_disabled: "message broker unavailable: JetStream not enabled",
  cluster_unavailable: "message broker unavailable: JetStream cluster unavailable",
};

/** The broker cannot be reached or cannot serve: callers answer 503. */
export class BrokerUnavailableError extends BrokerError {
  override readonly name = "BrokerUnavailableError";
  readonly kind = "unavailable" as const;
  /**
   * The JetStream `err_code`, when the server itself said it cannot serve
   * (10008 cluster temporarily unavailable, 10039/10076 not enabled).
   */
  readonly apiCode: number | undefined;

  constructor(
    readonly reason: UnavailableReason,
    options?: ErrorOptions & { apiCode?: number },
  ) {
    super(unavailableMessages[reason], options);
    this.apiCode = options?.apiCode;
  }
}

/** A request got no answer before its deadline: callers answer 504. */
export class BrokerTimeoutError extends BrokerError {
  override readonly name = "BrokerTimeoutError";
  readonly kind = "timeout" as const;

  constructor(options?: ErrorOptions) {
    super("message broker request timed out", options);
  }
}

/**
 * JetStream `err_code`s Laneway's cores act on. Values are the server's
 * (nats-server `errors.json`); they are stable across server versions.
 */
export const JetStreamErrorCode = {
  /** `expect.lastSequence`/`lastSubjectSequence` mismatch, KV CAS mismatch, `kv.create` on an existing key. */
  WrongLastSequence: 10071,
  /** `expect.lastMsgID` mismatch. */
  WrongLastMsgId: 10070,
  /** Message larger than the stream's `max_msg_size`. */
  MessageTooBig: 10054,
  /** Store failure; with DiscardNew on a full stream/bucket its text is "maximum messages/bytes exceeded". */
  StoreFailed: 10077,
  /** `streams.add` of an existing stream with a different configuration. */
  StreamNameExistsDifferentConfig: 10058,
  StreamNotFound: 10059,
  ConsumerNotFound: 10014,
  NoMessageFound: 10037,
  SequenceNotFound: 10043,
  StreamSubjectOverlap: 10065,
  ConsumerNameExists: 10013,
  MaximumConsumersLimit: 10026,
  MaximumStreamsLimit: 10027,
  AccountResourcesExceeded: 10002,
  InsufficientResources: 10023,
  StorageResourcesExceeded: 10047,
  MemoryResourcesExceeded: 10028,
  ClusterTemporarilyUnavailable: 10008,
  JetStreamNotEnabledForAccount: 10039,
  JetStreamNotEnabled: 10076,
} as const;

/** Fixed descriptions for known codes; anything else gets a generic text. */
const knownDescriptions = new Map<number, string>([
  [JetStreamErrorCode.WrongLastSequence, "wrong last sequence"],
  [JetStreamErrorCode.WrongLastMsgId, "wrong last message id"],
  [JetStreamErrorCode.MessageTooBig, "message size exceeds maximum allowed"],
  [JetStreamErrorCode.StoreFailed, "store failed (maximum messages/bytes exceeded)"],
  [JetStreamErrorCode.StreamNameExistsDifferentConfig, "stream exists with a different configuration"],
  [JetStreamErrorCode.StreamNotFound, "stream not found"],
  [JetStreamErrorCode.ConsumerNotFound, "consumer not found"],
  [JetStreamErrorCode.NoMessageFound, "no message found"],
  [JetStreamErrorCode.SequenceNotFound, "sequence not found"],
  [JetStreamErrorCode.StreamSubjectOverlap, "subjects overlap with an existing stream"],
  [JetStreamErrorCode.ConsumerNameExists, "consumer name already in use"],
  [JetStreamErrorCode.MaximumConsumersLimit, "maximum consumers limit reached"],
  [JetStreamErrorCode.MaximumStreamsLimit, "maximum number of streams reached"],
  [JetStreamErrorCode.AccountResourcesExceeded, "resource limits exceeded for account"],
  [JetStreamErrorCode.InsufficientResources, "insufficient resources"],
  [JetStreamErrorCode.StorageResourcesExceeded, "insufficient storage resources"],
  [JetStreamErrorCode.MemoryResourcesExceeded, "insufficient memory resources"],
]);

/** Codes with which the server says "I cannot serve now", not "no to this request". */
const unavailableApiCodes = new Map<number, UnavailableReason>([
  [JetStreamErrorCode.ClusterTemporarilyUnavailable, "cluster_unavailable"],
  [JetStreamErrorCode.JetStreamNotEnabledForAccount, "jetstream_disabled"],
  [JetStreamErrorCode.JetStreamNotEnabled, "jetstream_disabled"],
]);

/**
 * JetStream answered and refused the request. `code` is the JetStream
 * `err_code` (see {@link JetStreamErrorCode}); `status` the HTTP-like status
 * the server attached (400, 404, 500, 503 …). Cores decide what a code means
 * for them (10071 → conflict, 10077 → capacity, …). Resource exhaustion
 * (10077, 10047, 10023 …) lands here, not in BrokerUnavailableError: the
 * broker is up and said no.
 */
export class JetStreamRejectedError extends BrokerError {
  override readonly name = "JetStreamRejectedError";
  readonly kind = "jetstream" as const;

  constructor(
    readonly code: number,
    readonly status: number,
    options?: ErrorOptions,
  ) {
    super(
      `JetStream rejected the request: ${knownDescriptions.get(code) ?? "error"} (${code})`,
      options,
    );
  }
}

/**
 * The server denied a publish or subscription under the connection's
 * permissions (e.g. a swarm-scoped user outside its subjects). The subject
 * is a field, not part of the message: it may name another tenant.
 */
export class BrokerPermissionError extends BrokerError {
  override readonly name = "BrokerPermissionError";
  readonly kind = "permission" as const;

  constructor(
    readonly operation: "publish" | "subscription",
    readonly subject: string,
    options?: ErrorOptions,
  ) {
    super(`message broker denied the ${operation}`, options);
  }
}

/**
 * The client refused the call before sending it: a malformed subject or
 * argument, or a payload above the server's `max_payload`. A programming
 * or validation gap in the caller, not a broker condition.
 */
export class BrokerInvalidRequestError extends BrokerError {
  override readonly name = "BrokerInvalidRequestError";
  readonly kind = "invalid" as const;

  constructor(
    readonly reason: "invalid_subject" | "max_payload_exceeded" | "invalid_argument",
    options?: ErrorOptions,
  ) {
    super(`invalid message broker request: ${reason.replaceAll("_", " ")}`, options);
  }
}

/** Anything the classifier does not recognise. Callers treat it as internal. */
export class UnclassifiedBrokerError extends BrokerError {
  override readonly name = "UnclassifiedBrokerError";
  readonly kind = "unknown" as const;

  constructor(options?: ErrorOptions) {
    super("unexpected message broker error", options);
  }
}

/** Every error {@link classifyNatsError} can return. */
export type NatsFailure =
  | BrokerUnavailableError
  | BrokerTimeoutError
  | JetStreamRejectedError
  | BrokerPermissionError
  | BrokerInvalidRequestError
  | UnclassifiedBrokerError;

/**
 * Maps any error thrown by a nats.js call (core, JetStream, KV) to a
 * {@link NatsFailure}. Already-classified errors are returned unchanged, so
 * it is safe to apply at every layer. The input becomes `cause` (see the
 * SECURITY note at the top of this file).
 */
export function classifyNatsError(err: unknown): NatsFailure {
  if (isNatsFailure(err)) return err;
  return classifyAs(err, err);
}

/** True for errors this module's classifier produced. */
export function isNatsFailure(err: unknown): err is NatsFailure {
  return err instanceof BrokerError;
}

/**
 * Classifies `err`, recording `original` (the outermost nats.js error) as
 * the cause even when the decision is made on a wrapped inner error.
 */
function classifyAs(err: unknown, original: unknown): NatsFailure {
  const cause = { cause: original };

  if (err instanceof JetStreamApiError) {
    const code = err.code;
    const reason = unavailableApiCodes.get(code);
    if (reason !== undefined) return new BrokerUnavailableError(reason, { ...cause, apiCode: code });
    return new JetStreamRejectedError(code, err.status, cause);
  }
  if (err instanceof jserrors.JetStreamNotEnabled) {
    // nats.js raises it for no responders on a JetStream subject and for
    // 10039; either way the broker cannot serve JetStream right now.
    const api = err.cause instanceof JetStreamApiError ? err.cause.code : undefined;
    return new BrokerUnavailableError(
      api === undefined ? "no_responders" : "jetstream_disabled",
      api === undefined ? cause : { ...cause, apiCode: api },
    );
  }
  if (err instanceof JetStreamStatusError) {
    // Status replies on pull requests and direct gets (HTTP-like codes).
    if (err.code === 503) return new BrokerUnavailableError("no_responders", cause);
    if (err.code === 408) return new BrokerTimeoutError(cause);
    return new UnclassifiedBrokerError(cause);
  }
  if (err instanceof RequestError) {
    if (err.isNoResponders()) return new BrokerUnavailableError("no_responders", cause);
    const inner = err.cause;
    if (inner instanceof TimeoutError) return new BrokerTimeoutError(cause);
    if (inner instanceof PermissionViolationError) {
      return new BrokerPermissionError(inner.operation, inner.subject, cause);
    }
    if (inner instanceof ClosedConnectionError || inner instanceof DrainingConnectionError) {
      return new BrokerUnavailableError("connection_closed", cause);
    }
    // nats.js fails the requests pending on a connection that closes with
    // a RequestError("connection closed") that has no typed cause (or whose
    // cause is another such RequestError): a lost connection, not an
    // unknown failure.
    if ((inner === undefined || inner instanceof RequestError) && /connection (closed|draining)/i.test(`${err.message} ${inner?.message ?? ""}`)) {
      return new BrokerUnavailableError("connection_closed", cause);
    }
    return inner === undefined ? new UnclassifiedBrokerError(cause) : classifyAs(inner, original);
  }
  if (err instanceof NoRespondersError) return new BrokerUnavailableError("no_responders", cause);
  if (err instanceof TimeoutError) return new BrokerTimeoutError(cause);
  if (err instanceof ClosedConnectionError || err instanceof DrainingConnectionError) {
    return new BrokerUnavailableError("connection_closed", cause);
  }
  if (err instanceof AuthorizationError || err instanceof UserAuthenticationExpiredError) {
    return new BrokerUnavailableError("authentication", cause);
  }
  if (err instanceof ConnectionError) return new BrokerUnavailableError("connection_failed", cause);
  if (err instanceof PermissionViolationError) {
    return new BrokerPermissionError(err.operation, err.subject, cause);
  }
  if (err instanceof InvalidSubjectError) return new BrokerInvalidRequestError("invalid_subject", cause);
  if (err instanceof InvalidArgumentError) {
    // The only place this module looks at text: nats.js has no separate
    // class for a payload over the server's max_payload.
    const tooBig = err.message.includes("max_payload");
    return new BrokerInvalidRequestError(tooBig ? "max_payload_exceeded" : "invalid_argument", cause);
  }
  if (err instanceof ProtocolError) return new UnclassifiedBrokerError(cause);
  if (isSocketError(err)) return new BrokerUnavailableError("connection_failed", cause);
  return new UnclassifiedBrokerError(cause);
}

/** Node socket errors (ECONNREFUSED, ECONNRESET, EPIPE …) that escape nats.js unwrapped. */
function isSocketError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as NodeJS.ErrnoException).code;
  return typeof code === "string" && /^E(CONN|PIPE|HOSTUNREACH|NETUNREACH|TIMEDOUT|ADDR)/.test(code);
}

/**
 * Why a live connection to the broker ended, when it can be told. Each is a
 * fixed name, safe to log: the texts it is read from (the server's `-ERR`
 * line, its log) can hold addresses, subjects and user names, and are never
 * logged themselves.
 * - `broker_exited`: the embedded nats-server process ended.
 * - `slow_consumer`: the server cut the connection off because Laneway did
 *   not read what it sent fast enough (only its log says so: the server
 *   sends no `-ERR` for it).
 * - `stale_connection`: the server closed the connection because Laneway
 *   did not answer its pings.
 * - `server_unresponsive`: the server did not answer Laneway's pings.
 * - `authorization_violation`, `authentication_timeout`,
 *   `authentication_expired`, `authentication_revoked`: the server refused
 *   the credential.
 * - `max_connections_exceeded`, `max_payload_violation`,
 *   `max_subscriptions_exceeded`: a server limit.
 * - `protocol_violation`: the server could not parse what it received.
 * - `server_error`: another `-ERR` from the server.
 * - `lame_duck_mode`: the server announced that it is shutting down.
 * - `closed_by_server`: the server closed the socket without saying why.
 * - `socket_error`: the socket failed (reset, broken pipe, timeout).
 */
export type DisconnectReason =
  | "broker_exited"
  | "slow_consumer"
  | "stale_connection"
  | "server_unresponsive"
  | "authorization_violation"
  | "authentication_timeout"
  | "authentication_expired"
  | "authentication_revoked"
  | "max_connections_exceeded"
  | "max_payload_violation"
  | "max_subscriptions_exceeded"
  | "protocol_violation"
  | "server_error"
  | "lame_duck_mode"
  | "closed_by_server"
  | "socket_error"
  /** Laneway left a node whose JetStream stopped answering while the connection was up (cut off from its peers). */
  | "jetstream_unresponsive";

/** Reasons that mean the broker cut Laneway off or is gone, not an ordinary server restart. */
const severeDisconnects: ReadonlySet<DisconnectReason> = new Set<DisconnectReason>([
  "broker_exited",
  "slow_consumer",
  "stale_connection",
  "server_unresponsive",
  "authorization_violation",
  "authentication_timeout",
  "authentication_expired",
  "authentication_revoked",
  "max_connections_exceeded",
  "max_payload_violation",
  "max_subscriptions_exceeded",
  "protocol_violation",
  "server_error",
]);

/** Whether a lost connection with this reason is logged as an error (otherwise a warning). */
export function isSevereDisconnect(reason: DisconnectReason | undefined): boolean {
  return reason !== undefined && severeDisconnects.has(reason);
}

/** The server's texts (`-ERR` lines of nats-server 2.9 and later, and its log messages), in the order they are tried. */
const serverTexts: readonly (readonly [RegExp, DisconnectReason])[] = [
  [/slow consumer/i, "slow_consumer"],
  [/stale (client )?connection/i, "stale_connection"],
  [/authorization violation/i, "authorization_violation"],
  [/authentication timeout/i, "authentication_timeout"],
  [/authentication revoked/i, "authentication_revoked"],
  [/authentication expired/i, "authentication_expired"],
  [/maximum (account )?connections exceeded/i, "max_connections_exceeded"],
  [/maximum payload/i, "max_payload_violation"],
  [/maximum subscriptions exceeded/i, "max_subscriptions_exceeded"],
  [/parser error|unknown protocol operation|invalid client protocol/i, "protocol_violation"],
];

/**
 * Classifies the text of a server `-ERR` that ended a connection (as nats.js
 * reports it: the quoted text without its quotes). Unknown texts are
 * `server_error`. Only the returned name may be logged, never the text.
 */
export function classifyServerError(text: string): DisconnectReason {
  return classifyServerText(text) ?? "server_error";
}

/**
 * Classifies one message of the server's own log about a client connection
 * (e.g. `Slow Consumer Detected: WriteDeadline of 10s exceeded …`);
 * undefined for a message that does not explain a disconnect.
 */
export function classifyServerText(text: string): DisconnectReason | undefined {
  for (const [pattern, reason] of serverTexts) if (pattern.test(text)) return reason;
  return undefined;
}
