/**
 * The `KEY=value` files a hive member holds, and the variables in them.
 *
 * The invite (written by `laneway hive invite --out`, mode 0600) names the
 * member, carries its invite secret (its bearer token for join and
 * refresh) and the hub's address, the NATS address it reaches, the
 * `AGENTIHOOKS_BUS_SCOPED=1` marker when the hub record had a
 * member_swarms field at invite time, and its Redis URL when the hive has
 * one.
 *
 * `hive.env` (written by `laneway hive join`/`refresh` beside `hive.creds`)
 * selects the NATS backend for the member's processes: `AGENTIHOOKS_BUS=nats`,
 * `AGENTIHOOKS_BUS_URL`, `AGENTIHOOKS_BUS_CREDENTIALS` (the path of
 * hive.creds), `AGENTIHOOKS_BUS_SCOPED=1` when the grant is scoped,
 * `AGENTIHOOKS_BUS_BIND=1` (members bind existing streams and consumers:
 * they hold no create grant), and `AGENTIHOOKS_REDIS_URL` with the freshly
 * rotated password when the hive has Redis.
 */

/** Variable names (the specification's spelling where it names them). */
export const HIVE_ENV = Object.freeze({
  bus: "AGENTIHOOKS_BUS",
  busUrl: "AGENTIHOOKS_BUS_URL",
  busCredentials: "AGENTIHOOKS_BUS_CREDENTIALS",
  busScoped: "AGENTIHOOKS_BUS_SCOPED",
  busBind: "AGENTIHOOKS_BUS_BIND",
  redisUrl: "AGENTIHOOKS_REDIS_URL",
  member: "AGENTIHOOKS_HIVE_MEMBER",
  secret: "AGENTIHOOKS_HIVE_SECRET",
  /** In hive.env: the invite file, whose secret `hive refresh` authenticates with. */
  invite: "AGENTIHOOKS_HIVE_INVITE",
  /** In the invite: the hub's Laneway address (the CLI's own variable). */
  hubAddress: "LANEWAY_ADDRESS",
});

/** The credential file saved beside hive.env. */
export const HIVE_CREDS_FILE = "hive.creds";
export const HIVE_ENV_FILE = "hive.env";

/** The invite lines the hub returns (the CLI adds the hub's address). */
export function inviteEnvLines(invite: {
  memberId: string;
  secret: string;
  busUrl: string;
  scoped: boolean;
  redisUrl: string | undefined;
}): string[] {
  return [
    `${HIVE_ENV.member}=${invite.memberId}`,
    `${HIVE_ENV.secret}=${invite.secret}`,
    `${HIVE_ENV.bus}=nats`,
    `${HIVE_ENV.busUrl}=${invite.busUrl}`,
    ...(invite.scoped ? [`${HIVE_ENV.busScoped}=1`] : []),
    ...(invite.redisUrl === undefined ? [] : [`${HIVE_ENV.redisUrl}=${invite.redisUrl}`]),
  ];
}

/**
 * The hive.env lines of a minted credential. `credentialsPath` is where
 * hive.creds is saved (the hub says `hive.creds`; the CLI writes the
 * absolute path).
 */
export function hiveEnvLines(credential: { busUrl: string; scoped: boolean; redisUrl: string | undefined; credentialsPath?: string }): string[] {
  return [
    `${HIVE_ENV.bus}=nats`,
    `${HIVE_ENV.busUrl}=${credential.busUrl}`,
    `${HIVE_ENV.busCredentials}=${credential.credentialsPath ?? HIVE_CREDS_FILE}`,
    ...(credential.scoped ? [`${HIVE_ENV.busScoped}=1`] : []),
    `${HIVE_ENV.busBind}=1`,
    ...(credential.redisUrl === undefined ? [] : [`${HIVE_ENV.redisUrl}=${credential.redisUrl}`]),
  ];
}
