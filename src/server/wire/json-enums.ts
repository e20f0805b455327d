import type { DescField, DescMessage } from "@bufbuild/protobuf";

/**
 * Finds an enum *name* in a JSON request that the contract does not define.
 *
 * Unknown fields stay ignored for forward compatibility, but protobuf-es's
 * `ignoreUnknownFields` also drops unknown enum names silently, so a
 * misspelled filter (`"state": "COMMAND_STATE_BOGUS"`) would become no
 * filter. This walk refuses them instead. Numeric enum values are left to
 * the contract's `defined_only` rules. Well-known types (Timestamp,
 * Duration, …) hold no Laneway enums and are not walked.
 *
 * Returns the JSON path of the first offending field, or undefined.
 */
export function unknownEnumName(desc: DescMessage, json: unknown, path = ""): string | undefined {
  if (typeof json !== "object" || json === null || Array.isArray(json)) return undefined;
  const object = json as Record<string, unknown>;
  for (const field of desc.fields) {
    const key = Object.hasOwn(object, field.jsonName) ? field.jsonName : Object.hasOwn(object, field.name) ? field.name : undefined;
    if (key === undefined) continue;
    const found = checkField(field, object[key], path === "" ? field.jsonName : `${path}.${field.jsonName}`);
    if (found !== undefined) return found;
  }
  return undefined;
}

function checkField(field: DescField, value: unknown, path: string): string | undefined {
  if (value === null || value === undefined) return undefined;
  switch (field.fieldKind) {
    case "enum":
      return knownName(field.enum.values, value) ? undefined : path;
    case "message":
      return walk(field.message, value, path);
    case "list":
      if (!Array.isArray(value)) return undefined;
      for (const [i, item] of value.entries()) {
        const found =
          field.listKind === "enum"
            ? knownName(field.enum.values, item)
              ? undefined
              : `${path}[${i}]`
            : field.listKind === "message"
              ? walk(field.message, item, `${path}[${i}]`)
              : undefined;
        if (found !== undefined) return found;
      }
      return undefined;
    case "map":
      if (typeof value !== "object" || Array.isArray(value)) return undefined;
      for (const [k, item] of Object.entries(value as Record<string, unknown>)) {
        const found =
          field.mapKind === "enum"
            ? knownName(field.enum.values, item)
              ? undefined
              : `${path}[${JSON.stringify(k.slice(0, 64))}]`
            : field.mapKind === "message"
              ? walk(field.message, item, `${path}[${JSON.stringify(k.slice(0, 64))}]`)
              : undefined;
        if (found !== undefined) return found;
      }
      return undefined;
    default:
      return undefined;
  }
}

function walk(desc: DescMessage, value: unknown, path: string): string | undefined {
  return desc.typeName.startsWith("google.protobuf.") ? undefined : unknownEnumName(desc, value, path);
}

function knownName(values: readonly { name: string }[], value: unknown): boolean {
  return typeof value !== "string" || values.some((v) => v.name === value);
}
