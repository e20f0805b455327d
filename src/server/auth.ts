import { createHash, timingSafeEqual } from "node:crypto";
import { Code, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Secret } from "../config/index.js";
import { domainOfService, lanewayError } from "./error-mapping.js";

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

export type PrincipalKind = Principal["kind"];

/** The authenticated principal of the current call, set by the request gate. */
export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "authenticated Laneway principal",
});

/** Resolves a hive member's invite secret; provided by the swarm core. */
export interface MemberSecretResolver {
  resolveMember(secret: string): Promise<{ memberId: string } | undefined>;
}

/**
 * Which principal each service requires. Services absent from this table are
 * refused (fail closed); `none` marks the public health and reflection
 * services, which reveal no data.
 */
const requirements: Readonly<Record<string, PrincipalKind | "none">> = {
  "laneway.lane.v1.LaneService": "project",
  "laneway.swarm.v1.HiveHubService": "operator",
  "laneway.swarm.v1.HiveMemberService": "member",
  "laneway.kmap.v1.KmapCommandService": "operator",
  "laneway.kmap.v1.KmapReadService": "operator",
  "grpc.health.v1.Health": "none",
  "grpc.reflection.v1.ServerReflection": "none",
  "grpc.reflection.v1alpha.ServerReflection": "none",
};

const kindNames: Record<PrincipalKind, string> = {
  project: "a project token",
  operator: "the operator token",
  member: "a hive member's invite secret",
};

/** The secrets the server knows, each bound to its principal. */
export interface Credentials {
  readonly projectTokens: ReadonlyMap<string, Secret>;
  readonly operatorToken?: Secret | undefined;
  /** Absent until the swarm core is available. */
  readonly members?: MemberSecretResolver | undefined;
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

  constructor(credentials: Credentials) {
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
    const required = requirements[typeName];
    const domain = domainOfService(typeName);
    if (required === "none") return;
    if (required === undefined) {
      throw lanewayError(Code.PermissionDenied, `${typeName} is not open to any caller`, "forbidden", domain);
    }
    if (required === "member" && this.members === undefined) {
      throw lanewayError(
        Code.Unimplemented,
        "hive membership is not available yet: join and refresh need the swarm membership core, which this version does not include",
        "unimplemented",
        domain,
      );
    }
    const token = bearerToken(ctx.requestHeader.get("authorization"), domain);
    let principal = this.resolveToken(token);
    if (principal === undefined && this.members !== undefined) {
      const member = await this.members.resolveMember(token);
      if (member) principal = { kind: "member", memberId: member.memberId };
    }
    if (principal === undefined) {
      throw lanewayError(Code.Unauthenticated, "unknown bearer token", "unauthorized", domain);
    }
    if (principal.kind !== required) {
      throw lanewayError(
        Code.PermissionDenied,
        `${kindNames[principal.kind]} cannot call ${typeName}: it needs ${kindNames[required]}`,
        "forbidden",
        domain,
      );
    }
    ctx.values.set(principalKey, principal);
  };
}

function bearerToken(header: string | null, domain: ReturnType<typeof domainOfService>): string {
  if (header === null || header === "") {
    throw lanewayError(Code.Unauthenticated, "missing bearer token: send Authorization: Bearer <token>", "unauthorized", domain);
  }
  const match = /^Bearer +(\S+)$/i.exec(header);
  if (!match?.[1]) {
    throw lanewayError(Code.Unauthenticated, "the Authorization header must be 'Bearer <token>'", "unauthorized", domain);
  }
  return match[1];
}

/** The principal of the current call; the gate guarantees its kind. */
export function principalOf<K extends PrincipalKind>(ctx: HandlerContext, kind: K): Extract<Principal, { kind: K }> {
  const principal = ctx.values.get(principalKey);
  if (principal?.kind !== kind) {
    // Unreachable when the gate ran; refuse rather than act unauthenticated.
    throw lanewayError(Code.Unauthenticated, "the call was not authenticated", "unauthorized", domainOfService(ctx.service.typeName));
  }
  return principal as Extract<Principal, { kind: K }>;
}
