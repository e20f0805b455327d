/**
 * Validation of NATS server URLs (`url` in a core's configuration,
 * `--nats-url` for the server).
 *
 * A URL is a comma-separated list of `nats://` or `tls://` servers, the
 * form the NATS clients accept for a cluster. Credentials are never
 * accepted inside a URL: a URL is printed in logs and `ps` output and
 * pasted into tickets, so user info in it would leak. Credentials go
 * through a credentials file named by an environment variable instead.
 *
 * Problems are reported as reasons that never contain the URL itself, so
 * callers can put them in error messages safely.
 */

const SCHEMES = new Set(["nats:", "tls:"]);

export type NatsUrlResult =
  | { readonly ok: true; readonly servers: readonly string[] }
  | { readonly ok: false; readonly reason: string };

/**
 * Split and check a server list. On success `servers` holds the trimmed
 * entries in their original order. On failure `reason` completes a sentence
 * whose subject is the setting, e.g. `must not contain credentials (user info)`,
 * and locates the entry by position only.
 */
export function parseNatsServers(value: string): NatsUrlResult {
  const entries = value.split(",").map((entry) => entry.trim());
  const servers: string[] = [];
  for (const [index, entry] of entries.entries()) {
    const where = entries.length > 1 ? ` (entry ${index + 1} of ${entries.length})` : "";
    const fail = (problem: string): NatsUrlResult => ({ ok: false, reason: `${problem}${where}` });
    if (entry === "") return fail("must not be empty");
    // Checked on the raw text first: any '@' before a path would be user info,
    // and the check must not depend on how a URL parser splits it.
    if (entry.includes("@")) return fail("must not contain credentials (user info)");
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      return fail("must be a nats:// or tls:// URL with a valid host and port");
    }
    if (!SCHEMES.has(url.protocol)) return fail("must use the nats:// or tls:// scheme");
    if (url.username !== "" || url.password !== "") {
      return fail("must not contain credentials (user info)");
    }
    if (url.hostname === "") return fail("must name a host");
    if ((url.pathname !== "" && url.pathname !== "/") || url.search !== "" || url.hash !== "") {
      return fail("must not have a path, query or fragment");
    }
    servers.push(entry);
  }
  return { ok: true, servers };
}
