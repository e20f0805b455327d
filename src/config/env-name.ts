/**
 * Environment variable names as the configuration accepts them.
 *
 * Credentials reach Laneway only through environment variables that the
 * configuration *names* (`token_env`, `credentials_env`), so the
 * configuration file itself holds no secrets. The name is validated before
 * use so that a value pasted where a name belongs is rejected instead of
 * being looked up (and later echoed) as a name.
 */

/** POSIX-portable variable name: what a shell's `export NAME=…` accepts. */
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The pattern's source, as error messages quote it. */
export const ENV_NAME_RULE = "^[A-Za-z_][A-Za-z0-9_]*$";

export function isEnvName(value: string): boolean {
  return ENV_NAME_PATTERN.test(value);
}

/** The environment the loaders read: `process.env` or a plain record in tests. */
export type Env = Readonly<Record<string, string | undefined>>;

/**
 * A variable's value, treating an empty value as unset. `FOO=` in a shell
 * or compose file usually means "cleared", and an empty token or path is
 * never usable anyway.
 */
export function envValue(env: Env, name: string): string | undefined {
  const value = Object.hasOwn(env, name) ? env[name] : undefined;
  return value === undefined || value === "" ? undefined : value;
}
