/**
 * Canonical JSON: `JSON.stringify` with object keys sorted at every level
 * and no insignificant whitespace, so equal values always have equal bytes.
 * Laneway hashes, compares and signs these bytes (the lanes registry
 * generation, Kmap submissions and signed transactions).
 */
export type Json = string | number | boolean | null | readonly Json[] | { readonly [key: string]: Json };

export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${(value as readonly Json[]).map(canonicalJson).join(",")}]`;
  const object = value as { readonly [key: string]: Json };
  const keys = Object.keys(object).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key] as Json)}`).join(",")}}`;
}
