import { readFileSync } from "node:fs";

/** Laneway's version, from package.json (read once, at the call). */
export function lanewayVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}
