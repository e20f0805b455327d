import { Code } from "@connectrpc/connect";
import { lanewayError, type ErrorDomain } from "./error-mapping.js";

/**
 * Page sizes and page tokens of the list RPCs. A token is the position of
 * the last item of the previous page; clients must treat it as opaque.
 */
export const DEFAULT_PAGE_SIZE = 100;

/** 0 selects the default; the contract bounds the maximum. */
export function pageSize(requested: number): number {
  return requested === 0 ? DEFAULT_PAGE_SIZE : requested;
}

export function encodePageToken(position: number | string): string {
  return String(position);
}

/** The position a token stands for (0 for the first page), as a number. */
export function decodePageToken(token: string, domain: ErrorDomain): number {
  if (token === "") return 0;
  if (!/^\d{1,15}$/.test(token)) {
    throw lanewayError(Code.InvalidArgument, "page_token is not a token returned by this RPC", domain === "kmap" ? "invalid_input" : "invalid_argument", domain);
  }
  return Number(token);
}

/** The id a token stands for ("" for the first page), for lists ordered by id. */
export function decodeIdPageToken(token: string, pattern: RegExp, domain: ErrorDomain): string {
  if (token === "") return "";
  if (!pattern.test(token)) {
    throw lanewayError(Code.InvalidArgument, "page_token is not a token returned by this RPC", domain === "kmap" ? "invalid_input" : "invalid_argument", domain);
  }
  return token;
}
