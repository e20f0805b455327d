/**
 * Laneway's NATS layer, shared by the cores: the self-healing broker
 * connection (reconnect buffering off), the typed classification of broker
 * failures, and the embedded nats-server child process that `laneway serve`
 * starts when no NATS URL is given, with the supervisor that restarts it.
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
  classifyServerError,
  isNatsFailure,
  isSevereDisconnect,
  JetStreamErrorCode,
  JetStreamRejectedError,
  LanewayNatsError,
  UnclassifiedBrokerError,
  type DisconnectReason,
  type NatsFailure,
  type NatsFailureKind,
  type UnavailableReason,
} from "./broker-errors.js";
export { DEFAULT_MAX_PAYLOAD, EmbeddedNatsServer, type EmbeddedNatsServerOptions, type ServerExit } from "./embedded-server.js";
export {
  EmbeddedServerConfigError,
  EmbeddedServerError,
  EmbeddedServerExitedError,
  EmbeddedServerRestartError,
  EmbeddedServerStartTimeoutError,
  NatsServerNotInstalledError,
} from "./embedded-server-errors.js";
export {
  DEFAULT_RESTART_POLICY,
  restartDelay,
  SupervisedNatsServer,
  type RestartPolicy,
  type SupervisedNatsServerOptions,
  type SupervisorState,
} from "./supervised-server.js";
export { logBrokerState } from "./broker-state-log.js";
export { DEFAULT_LOG_FILE_BYTES, DEFAULT_ROTATED_LOG_FILES, SERVER_LOG_FILE } from "./server-log-file.js";
export { NATS_SERVER_BIN_ENV } from "./nats-server-binary.js";
export { renderNatsConfig, type NatsConfig } from "./nats-config.js";
export { adoptGlobalAccountStore } from "./jetstream-store.js";
export { loadOrCreateServiceCredential, serviceAuthorization, type ServiceCredential } from "./service-credentials.js";
export { bootBroker, type BootedBroker, type BrokerBootOptions, type BrokerPreparation } from "./broker-boot.js";
