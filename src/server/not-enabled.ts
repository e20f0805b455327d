import type { ConnectError } from "@connectrpc/connect";
import type { ErrorDomain } from "../errors/core-error.js";
import { lanewayError } from "./error-mapping.js";

/**
 * The honest answer of an RPC whose core this server was not configured to
 * run: `unimplemented` with a message naming the missing capability and what
 * turns it on. Never a fake success.
 */
export function notEnabled(domain: ErrorDomain, capability: string, enable: string): ConnectError {
  return lanewayError("unimplemented", `${capability} is not enabled on this server: ${enable}`, domain);
}
