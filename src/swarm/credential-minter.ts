/**
 * Minting a member credential: a fresh user key pair, and a user JWT that
 * carries the member's grant, issued for the hive account and signed by
 * the signer record's signing key. The result is a `.creds` file (the JWT
 * and the user seed) that only the member receives: the hub keeps the
 * user's public key (to revoke it later) and never the seed.
 */
import { fromPublic, type KeyPair } from "@nats-io/nkeys";
import { encodeUser, fmtCreds } from "@nats-io/jwt";
import type { NatsGrant } from "./member-grant.js";
import { NativeKeyPair } from "../nats/index.js";

/** How long a member credential is valid by default: refresh before then. */
export const DEFAULT_CREDENTIAL_LIFETIME_MS = 7 * 24 * 60 * 60 * 1000;

export interface MintRequest {
  readonly memberId: string;
  readonly grant: NatsGrant;
  /** The signer record's signing key. */
  readonly signingKey: KeyPair;
  /** The hive account's public key (the credential's issuer account). */
  readonly hiveAccount: string;
  /** Unix milliseconds. */
  readonly now: number;
  readonly lifetimeMs: number;
}

export interface MintedCredential {
  /** The `.creds` file contents: user JWT and seed. A secret. */
  readonly creds: string;
  readonly userPublicKey: string;
  readonly issuedAt: number;
  /** Unix milliseconds (whole seconds, as the JWT says). */
  readonly expiresAt: number;
}

/** The user JWT claims of a grant. */
export function userClaims(grant: NatsGrant) {
  return {
    pub: { allow: [...grant.publishAllow], deny: [...grant.publishDeny] },
    sub: { allow: [...grant.subscribeAllow], deny: [...grant.subscribeDeny] },
  };
}

/** Mints a member credential. */
export async function mintMemberCredential(request: MintRequest): Promise<MintedCredential> {
  const user = NativeKeyPair.create("user");
  const exp = Math.floor((request.now + request.lifetimeMs) / 1000);
  const jwt = await encodeUser(request.memberId, user, fromPublic(request.hiveAccount), userClaims(request.grant), {
    signer: request.signingKey,
    exp,
  });
  return {
    creds: new TextDecoder().decode(fmtCreds(jwt, user)),
    userPublicKey: user.getPublicKey(),
    issuedAt: request.now,
    expiresAt: exp * 1000,
  };
}
