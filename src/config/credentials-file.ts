/**
 * Resolution of a NATS credentials file named indirectly by an environment
 * variable (`credentials_env` in a core's configuration,
 * `--nats-credentials-env` for the server).
 *
 * The variable holds the file's PATH, not its contents (a core's
 * specification is explicit about this), so the configuration stays free
 * of secrets and the file keeps its own OS protection. The file is checked
 * at startup so a typo fails then, not at the first broker operation; its
 * contents are never read here, and failure reasons name only the variable.
 */
import { accessSync, constants, statSync } from "node:fs";
import { resolve } from "node:path";
import { envValue, type Env } from "./env-name.js";

export type CredentialsFileResult =
  | { readonly ok: true; readonly path: string }
  | { readonly ok: false; readonly reason: string };

/**
 * Look up `envName` in `env`, resolve its value against `cwd` and check that
 * it is an existing, readable regular file. `reason` is a full clause such
 * as `CRUX_NATS_CREDENTIALS_FILE is not set`.
 */
export function resolveCredentialsFile(envName: string, env: Env, cwd: string): CredentialsFileResult {
  const raw = envValue(env, envName);
  if (raw === undefined) {
    return { ok: false, reason: `${envName} is not set (it must hold the path of a NATS credentials file)` };
  }
  const path = resolve(cwd, raw);
  const subject = `the credentials file named by ${envName}`;
  let stats;
  try {
    stats = statSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return { ok: false, reason: code === "ENOENT" ? `${subject} does not exist` : `${subject} cannot be read (${code ?? "error"})` };
  }
  if (!stats.isFile()) return { ok: false, reason: `${subject} is not a regular file` };
  try {
    accessSync(path, constants.R_OK);
  } catch {
    return { ok: false, reason: `${subject} is not readable` };
  }
  return { ok: true, path };
}
