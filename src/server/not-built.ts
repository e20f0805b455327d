import { Code, type ConnectError } from "@connectrpc/connect";
import { lanewayError, type ErrorDomain } from "./error-mapping.js";

/**
 * The honest answer of an RPC whose core is not in this version: `unimplemented`
 * with a message naming the missing capability. Never a fake success.
 */
export function notBuilt(domain: ErrorDomain, capability: string): ConnectError {
  return lanewayError(Code.Unimplemented, `${capability} is not available in this version of Laneway`, "unimplemented", domain);
}
