import { createHash, timingSafeEqual } from "node:crypto";
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Secret } from "../config/index.js";
import type { ErrorDomainSpec, MemberSecretResolver, PrincipalKind } from "./core-binding.js";
import { lanewayError } from "./error-mapping.js";

/**
 * Who is calling. The bearer token alone decides it: never a header other
 * than Authorization, a request field or a URI.
 *
 * - `project`: a configured project token; grants lane capabilities only.
 * - `operator`: `LANEWAY_ADMIN_TOKEN`; grants the Kmap and hive hub RPCs and
 *   no lane access.
 * - `member`: a hive member's invite secret; grants join and refresh.
 */
export type Principal =
  | { readonly kind: "project"; readonly project: string }
  | { readonly kind: "operator" }
  | { readonly kind: "member"; readonly memberId: string };

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

const kindNames: Record<PrincipalKind, string> = {
  project: "a project token",
  operator: "the operator token",
  member: "a hive member's invite secret",
};

/** The secrets the server knows, each bound to its principal, and what each service requires. */
export interface Credentials {
  readonly projectTokens: ReadonlyMap<string, Secret>;
  readonly operatorToken?: Secret | undefined;
  /** Absent until the swarm core is available. */
  readonly members?: MemberSecretResolver | undefined;
  /** Service type name → its requirement and error domain; a service not listed is refused. */
  readonly access?: ReadonlyMap<string, ServiceAccess>;
}

interface KnownToken {
  readonly digest: Buffer;
  readonly principal: Principal;
}

function digestOf(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/**
 * Authenticates calls. Tokens are compared as SHA-256 digests with
 * `timingSafeEqual`, and every known token is compared on every call, so the
 * time taken reveals neither a token's prefix nor which token matched.
 */
export class Authenticator {
  private readonly known: readonly KnownToken[];
  private readonly members: MemberSecretResolver | undefined;
  private readonly access: ReadonlyMap<string, ServiceAccess>;

  constructor(credentials: Credentials) {
    this.access = credentials.access ?? new Map();
    const known: KnownToken[] = [];
    for (const [project, token] of credentials.projectTokens) {
      known.push({ digest: digestOf(token.reveal()), principal: { kind: "project", project } });
    }
    if (credentials.operatorToken) {
      known.push({ digest: digestOf(credentials.operatorToken.reveal()), principal: { kind: "operator" } });
    }
    this.known = known;
    this.members = credentials.members;
  }

  /** The project or operator principal of a token, if it is one. */
  resolveToken(token: string): Principal | undefined {
    const digest = digestOf(token);
    let found: Principal | undefined;
    for (const entry of this.known) {
      if (timingSafeEqual(entry.digest, digest) && found === undefined) found = entry.principal;
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
    if (required === "member" && this.members === undefined) {
      throw lanewayError(
        "unimplemented",
        "hive membership is not available yet: join and refresh need the swarm membership core, which this version does not include",
        domain,
      );
    }
    const token = bearerToken(ctx.requestHeader.get("authorization"), domain);
    let principal = this.resolveToken(token);
    if (principal === undefined && this.members !== undefined) {
      const member = await this.members.resolveMember(token);
      if (member) principal = { kind: "member", memberId: member.memberId };
    }
    if (principal === undefined) throw lanewayError("unauthorized", "unknown bearer token", domain);
    if (principal.kind !== required) {
      throw lanewayError("forbidden", `${kindNames[principal.kind]} cannot call ${typeName}: it needs ${kindNames[required]}`, domain);
    }
    ctx.values.set(principalKey, principal);
  };
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
export function principalOf<K extends PrincipalKind>(ctx: HandlerContext, kind: K): Extract<Principal, { kind: K }> {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== kind) {
    // Unreachable when the gate ran; refuse rather than act unauthenticated.
    throw lanewayError("unauthorized", "the call was not authenticated", "server");
  }
  return principal as Extract<Principal, { kind: K }>;
}
