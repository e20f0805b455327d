import { createHash, timingSafeEqual } from "node:crypto";
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Secret } from "../config/index.js";
import type { Authenticate, ErrorDomainSpec, Principal, PrincipalKind } from "./core-binding.js";
import { lanewayError } from "./error-mapping.js";

export type { Principal } from "./core-binding.js";

/** The server's own principal: the operator token. */
export const OPERATOR: PrincipalKind = "operator";

/** The authenticated principal of the current call, set by the request gate. */
export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "authenticated Laneway principal",
});

/**
 * What each service requires, from the core bindings: a principal kind, or
 * `none` for the public health and reflection services, which reveal no
 * data. Services absent from the table are refused (fail closed).
 */
export interface ServiceAccess {
  readonly principal: PrincipalKind | "none";
  readonly errors: ErrorDomainSpec;
}

/** The secrets the server knows, who recognizes the others, and what each service requires. */
export interface Credentials {
  readonly operatorToken?: Secret | undefined;
  /** Each opened core's `authenticate`, in the order of the bindings. */
  readonly authenticators?: readonly Authenticate[];
  /** Principal kind → how a message names its credential ("a project token"). */
  readonly kinds?: ReadonlyMap<PrincipalKind, string>;
  /** Service type name → its requirement and error domain; a service not listed is refused. */
  readonly access?: ReadonlyMap<string, ServiceAccess>;
}

function digestOf(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/**
 * An `authenticate` over a table of secrets (a core's configured tokens).
 * Tokens are compared as SHA-256 digests with `timingSafeEqual`, and every
 * secret is compared on every call, so the time taken reveals neither a
 * token's prefix nor which token matched.
 */
export function secretAuthenticator(kind: PrincipalKind, secrets: ReadonlyMap<string, Secret>): (token: string) => Principal | undefined {
  const known = [...secrets].map(([id, secret]) => ({ digest: digestOf(secret.reveal()), principal: Object.freeze({ kind, id }) }));
  return (token) => {
    const digest = digestOf(token);
    let found: Principal | undefined;
    for (const entry of known) {
      if (timingSafeEqual(entry.digest, digest) && found === undefined) found = entry.principal;
    }
    return found;
  };
}

/**
 * Authenticates calls: the operator token, then every core's
 * `authenticate`. Each is asked on every call, whichever recognizes the
 * token, so the time taken does not say which principal a token is.
 */
export class Authenticator {
  private readonly operator: ((token: string) => Principal | undefined) | undefined;
  private readonly authenticators: readonly Authenticate[];
  private readonly kinds: ReadonlyMap<PrincipalKind, string>;
  private readonly access: ReadonlyMap<string, ServiceAccess>;

  constructor(credentials: Credentials) {
    this.access = credentials.access ?? new Map();
    this.operator = credentials.operatorToken ? secretAuthenticator(OPERATOR, new Map([["", credentials.operatorToken]])) : undefined;
    this.authenticators = credentials.authenticators ?? [];
    this.kinds = new Map([[OPERATOR, "the operator token"], ...(credentials.kinds ?? [])]);
  }

  /** The principal of a token, if any core (or the operator token) recognizes it. */
  async resolveToken(token: string): Promise<Principal | undefined> {
    let found = this.operator?.(token);
    for (const authenticate of this.authenticators) {
      const principal = await authenticate(token);
      found ??= principal;
    }
    return found;
  }

  /**
   * The Connect request gate: runs after the request headers arrive and
   * before the body is read, so unauthenticated callers cost no decoding.
   * It stores the principal in the call's context values.
   */
  readonly gate = async (ctx: HandlerContext): Promise<void> => {
    const typeName = ctx.service.typeName;
    const access = this.access.get(typeName);
    if (access?.principal === "none") return;
    const domain = access?.errors.domain ?? "server";
    if (access === undefined) throw lanewayError("forbidden", `${typeName} is not open to any caller`, domain);
    const required = access.principal;
    const token = bearerToken(ctx.requestHeader.get("authorization"), domain);
    const principal = await this.resolveToken(token);
    if (principal === undefined) throw lanewayError("unauthorized", "unknown bearer token", domain);
    if (principal.kind !== required) {
      throw lanewayError("forbidden", `${this.#named(principal.kind)} cannot call ${typeName}: it needs ${this.#named(required)}`, domain);
    }
    ctx.values.set(principalKey, principal);
  };

  #named(kind: PrincipalKind): string {
    return this.kinds.get(kind) ?? `a ${kind} credential`;
  }
}

function bearerToken(header: string | null, domain: ErrorDomainSpec["domain"]): string {
  if (header === null || header === "") {
    throw lanewayError("unauthorized", "missing bearer token: send Authorization: Bearer <token>", domain);
  }
  const match = /^Bearer +(\S+)$/i.exec(header);
  if (!match?.[1]) throw lanewayError("unauthorized", "the Authorization header must be 'Bearer <token>'", domain);
  return match[1];
}

/** The principal of the current call; the gate guarantees its kind. */
export function principalOf(ctx: HandlerContext, kind: PrincipalKind): Principal {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== kind) {
    // Unreachable when the gate ran; refuse rather than act unauthenticated.
    throw lanewayError("unauthorized", "the call was not authenticated", "server");
  }
  return principal;
}
