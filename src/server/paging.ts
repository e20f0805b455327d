import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Page sizes and page tokens of the list RPCs. A token is the position of
 * the last item of the previous page; clients must treat it as opaque.
 *
 * A token that is not one this server returned is an invalid argument; the
 * error mapping gives it the invalid reason of the service's domain
 * (each domain's own invalid reason).
 */
export const DEFAULT_PAGE_SIZE = 100;

/** 0 selects the default; the contract bounds the maximum. */
export function pageSize(requested: number): number {
  return requested === 0 ? DEFAULT_PAGE_SIZE : requested;
}

export function encodePageToken(position: number | string): string {
  return String(position);
}

function invalidToken(): ConnectError {
  return new ConnectError("page_token is not a token returned by this RPC", Code.InvalidArgument);
}

/** The position a token stands for (0 for the first page), as a number. */
export function decodePageToken(token: string): number {
  if (token === "") return 0;
  if (!/^\d{1,15}$/.test(token)) throw invalidToken();
  return Number(token);
}

/** The id a token stands for ("" for the first page), for lists ordered by id. */
export function decodeIdPageToken(token: string, pattern: RegExp): string {
  if (token === "") return "";
  if (!pattern.test(token)) throw invalidToken();
  return token;
}
