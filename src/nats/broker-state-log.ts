/**
 * What Laneway's log says about its NATS connection.
 *
 * One line per event an operator acts on, not one per reconnect attempt:
 * the loss of a live connection, with why it ended when that can be told
 * (an error when the broker cut Laneway off or is gone, a warning for an
 * ordinary close such as a server restart); the first failed attempt of an
 * outage (a warning; later ones at debug level); the connection coming
 * back, with how many attempts failed meanwhile. Every field is a fixed
 * name (a classified reason), never an address, a credential or a raw
 * server or socket text.
 */
import type { Logger } from "../log/logger.js";
import type { BrokerConnection, BrokerStateChange } from "./broker-connection.js";
import { BrokerUnavailableError, isSevereDisconnect, type NatsFailure } from "./broker-errors.js";

/** Logs `broker`'s state changes to `log` until the returned function is called. */
export function logBrokerState(broker: BrokerConnection, log: Logger): () => void {
  let failedAttempts = 0;
  return broker.onStateChange((change: BrokerStateChange) => {
    switch (change.state) {
      case "connected":
        log.info("NATS connection is available", { generation: change.generation, ...(failedAttempts > 0 ? { failedAttempts } : {}) });
        failedAttempts = 0;
        return;
      case "closed":
        log.info("NATS connection closed");
        return;
      case "connecting":
        return;
      case "disconnected": {
        if (change.previous === "connected") {
          const fields = { reason: change.disconnect ?? "unknown", failure: failureName(change.failure) };
          if (isSevereDisconnect(change.disconnect)) log.error("NATS connection lost", fields);
          else log.warn("NATS connection lost", fields);
          return;
        }
        failedAttempts += 1;
        const fields = { failure: failureName(change.failure), failedAttempts };
        if (failedAttempts === 1) log.warn("NATS is not reachable; reconnecting with backoff", fields);
        else log.debug("NATS reconnect attempt failed", fields);
        return;
      }
    }
  });
}

/** A classified failure's fixed name: the unavailable reason, or the kind. */
function failureName(failure: NatsFailure | undefined): string | undefined {
  if (failure === undefined) return undefined;
  return failure instanceof BrokerUnavailableError ? failure.reason : failure.kind;
}
