import type { ConnectError } from "@connectrpc/connect";
import type { ErrorDomain } from "../errors/core-error.js";
import { lanewayError } from "./error-mapping.js";

/**
 * The honest answer of an RPC whose core is not in this version: `unimplemented`
 * with a message naming the missing capability. Never a fake success.
 */
export function notBuilt(domain: ErrorDomain, capability: string): ConnectError {
  return lanewayError("unimplemented", `${capability} is not available in this version of Laneway`, domain);
}
