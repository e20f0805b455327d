/**
 * The account JWTs of decentralized NATS auth, and how the hub pushes the
 * hive account's changes (a new signing key, a revocation) to the server.
 *
 * Every account is signed by the operator key. The hive account lists the
 * signing keys that sign member credentials and the revocation list: a
 * user key in it is refused for every JWT issued at or before its time.
 * The server resolves accounts with the `full` resolver, so an updated
 * account JWT published on `$SYS.REQ.CLAIMS.UPDATE` by a system account
 * user applies at once: the server disconnects the revoked users and
 * refuses them from then on, while every other member stays connected.
 */
import type { KeyPair } from "@nats-io/nkeys";
import { encodeAccount, encodeOperator, type OperatorLimits } from "@nats-io/jwt";
import type { BrokerConnection } from "../nats/index.js";
import { SwarmError } from "../swarm-bus/index.js";

/** Unlimited connections, subscriptions and payloads. */
const UNLIMITED: OperatorLimits = {
  subs: -1,
  conn: -1,
  leaf: -1,
  imports: -1,
  exports: -1,
  data: -1,
  payload: -1,
  wildcards: true,
};

/** JetStream enabled without limits (the streams carry their own). */
const JETSTREAM: OperatorLimits = { mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 };

/** The keys of a hive's trust chain (public halves suffice except where noted). */
export interface TrustKeys {
  /** Signs every account JWT. */
  readonly operator: KeyPair;
  readonly systemAccount: KeyPair;
  readonly hiveAccount: KeyPair;
  readonly lanewayAccount: KeyPair;
}

/** What changes in the hive account over time. */
export interface HiveAccountState {
  /** Public keys of the signing keys that may sign member credentials. */
  readonly signingKeys: readonly string[];
  /** User public key → unix seconds: JWTs of that key issued at or before are refused. */
  readonly revocations: Readonly<Record<string, number>>;
}

export const OPERATOR_NAME = "laneway-hive";
export const SYSTEM_ACCOUNT_NAME = "SYS";
export const HIVE_ACCOUNT_NAME = "HIVE";
export const LANEWAY_ACCOUNT_NAME = "LANEWAY";

export function encodeOperatorJwt(keys: TrustKeys): Promise<string> {
  return encodeOperator(OPERATOR_NAME, keys.operator, { system_account: keys.systemAccount.getPublicKey() });
}

export function encodeSystemAccountJwt(keys: TrustKeys): Promise<string> {
  return encodeAccount(SYSTEM_ACCOUNT_NAME, keys.systemAccount, { limits: UNLIMITED }, { signer: keys.operator });
}

/** Laneway's own account: its lanes' streams live here, out of every hive member's reach. */
export function encodeLanewayAccountJwt(keys: TrustKeys): Promise<string> {
  return encodeAccount(LANEWAY_ACCOUNT_NAME, keys.lanewayAccount, { limits: { ...UNLIMITED, ...JETSTREAM } }, { signer: keys.operator });
}

/** The hive account: members and the hub connect here. */
export function encodeHiveAccountJwt(keys: TrustKeys, state: HiveAccountState): Promise<string> {
  return encodeAccount(
    HIVE_ACCOUNT_NAME,
    keys.hiveAccount,
    {
      limits: { ...UNLIMITED, ...JETSTREAM },
      signing_keys: [...state.signingKeys],
      ...(Object.keys(state.revocations).length > 0 ? { revocations: { ...state.revocations } } : {}),
    },
    { signer: keys.operator },
  );
}

/** The subject a system account user publishes account JWT updates on. */
export const CLAIMS_UPDATE_SUBJECT = "$SYS.REQ.CLAIMS.UPDATE";

/** Pushes hive account updates through a system account connection. */
export class HiveAccountPublisher {
  constructor(
    private readonly keys: TrustKeys,
    private readonly system: BrokerConnection,
    private readonly timeoutMs = 5_000,
  ) {}

  /** Publishes the hive account JWT for `state`; resolves once the server accepted it. */
  async publish(state: HiveAccountState): Promise<void> {
    const jwt = await encodeHiveAccountJwt(this.keys, state);
    let answer: unknown;
    try {
      const reply = await this.system.connection().request(CLAIMS_UPDATE_SUBJECT, jwt, { timeout: this.timeoutMs });
      answer = reply.json();
    } catch (error) {
      throw new SwarmError("swarm_unavailable", "the NATS server could not be reached to update the hive account", { cause: error });
    }
    const code = (answer as { data?: { code?: unknown } } | undefined)?.data?.code;
    if (code !== 200) {
      throw new SwarmError("swarm_unavailable", "the NATS server did not accept the hive account update (does it run the full account resolver?)");
    }
  }
}
