/**
 * Laneway's NATS layer, shared by the cores: the self-healing broker
 * connection (reconnect buffering off), the typed classification of broker
 * failures, and the embedded nats-server child process that `laneway serve`
 * starts when no NATS URL is given.
 */
export {
  backoffDelay,
  BrokerConnection,
  type BackoffOptions,
  type BrokerConnectionOptions,
  type BrokerState,
  type BrokerStateChange,
} from "./broker-connection.js";
export {
  BrokerError,
  BrokerInvalidRequestError,
  BrokerPermissionError,
  BrokerTimeoutError,
  BrokerUnavailableError,
  classifyNatsError,
  isNatsFailure,
  JetStreamErrorCode,
  JetStreamRejectedError,
  LanewayNatsError,
  UnclassifiedBrokerError,
  type NatsFailure,
  type NatsFailureKind,
  type UnavailableReason,
} from "./broker-errors.js";
export { DEFAULT_MAX_PAYLOAD, EmbeddedNatsServer, type EmbeddedNatsServerOptions, type ServerExit } from "./embedded-server.js";
export {
  EmbeddedServerConfigError,
  EmbeddedServerError,
  EmbeddedServerExitedError,
  EmbeddedServerStartTimeoutError,
  NatsServerNotInstalledError,
} from "./embedded-server-errors.js";
export { NATS_SERVER_BIN_ENV } from "./nats-server-binary.js";
export { renderNatsConfig, type NatsConfig } from "./nats-config.js";
export { adoptGlobalAccountStore } from "./jetstream-store.js";
export { loadOrCreateServiceCredential, serviceAuthorization, type ServiceCredential } from "./service-credentials.js";
