/**
 * The `KEY=value` environment file format of `<dataDir>/tokens.env`.
 *
 * The same file is read by Laneway and sourced by a shell
 * (`set -a; . .laneway/tokens.env`), so the format is the subset on which
 * both agree: one `KEY=value` per line, no quoting, no escapes, no
 * expansion. Values are restricted to characters a shell takes literally
 * in an unquoted word; anything else is rejected rather than read in a way
 * the shell would not. Blank lines and `#` comment lines are allowed.
 * Errors name the line number only — a line may hold a secret.
 */
import { readFile } from "node:fs/promises";
import { isEnvName } from "./env-name.js";
import { EnvFileError } from "./errors.js";

/** Characters a POSIX shell keeps literally in an unquoted assignment value. */
const SAFE_VALUE = /^[A-Za-z0-9_.,:+\/@%-]*$/;

/** Parse env-file text. Duplicate keys are rejected (a shell would silently keep the last). */
export function parseEnvFile(text: string): Readonly<Record<string, string>> {
  const result: Record<string, string> = Object.create(null) as Record<string, string>;
  const lines = text.split("\n");
  lines.forEach((rawLine, index) => {
    const line = rawLine.endsWith("\r") ? rawLine.slice(0, -1) : rawLine;
    const where = `line ${index + 1}`;
    if (line.trim() === "" || line.trimStart().startsWith("#")) return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new EnvFileError(`${where} is not KEY=value`);
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    if (!isEnvName(key)) throw new EnvFileError(`${where}: the key is not a valid environment variable name`);
    if (!SAFE_VALUE.test(value)) {
      throw new EnvFileError(`${where}: the value of ${key} must be unquoted and use only A-Z a-z 0-9 _ . , : + / @ % -`);
    }
    if (Object.hasOwn(result, key)) throw new EnvFileError(`${where}: ${key} is set more than once`);
    result[key] = value;
  });
  return Object.freeze({ ...result });
}

/** Read and parse an env file. */
export async function readEnvFile(path: string): Promise<Readonly<Record<string, string>>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new EnvFileError(`cannot read the environment file (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
  return parseEnvFile(text);
}

/** Render entries as env-file text (one `KEY=value` per line, trailing newline). */
export function formatEnvFile(entries: Readonly<Record<string, string>>): string {
  let text = "";
  for (const [key, value] of Object.entries(entries)) {
    if (!isEnvName(key) || !SAFE_VALUE.test(value)) {
      throw new EnvFileError(`cannot write ${isEnvName(key) ? key : "a key"}: not representable in an environment file`);
    }
    text += `${key}=${value}\n`;
  }
  return text;
}
