/**
 * Rebuilds third_party/proto/buf/validate/validate.proto from the file
 * descriptor that @bufbuild/protovalidate embeds in its generated code, and
 * proves that the rebuilt source is exact.
 *
 *   node --import tsx scripts/rebuild-validate-proto.ts          # write, then check
 *   node --import tsx scripts/rebuild-validate-proto.ts --check  # check only
 *   node --import tsx scripts/rebuild-validate-proto.ts --stdout # print, write nothing
 *
 * Why: no npm or Debian package ships buf/validate/validate.proto and the Buf
 * Schema Registry is unreachable, but protoc-gen-es embeds the compiled
 * FileDescriptorProto (base64) in validate_pb.js.
 *
 * The check compiles the .proto on disk with buf, runs the result through
 * the very function protoc-gen-es uses to embed descriptors (embedFileDesc
 * from @bufbuild/protobuf/codegenv2) and compares the bytes with the literal
 * in validate_pb.js. embedFileDesc strips exactly three things:
 *   - `dependency` (the import list): compared separately, against the
 *     import list protoc-gen-es passes to fileDesc() next to the literal;
 *   - `source_code_info` (comments, spans): not comparable;
 *   - `json_name` of message fields when it equals protoCamelCase(name)
 *     (the compiler's default): stripped on both sides; a custom json_name
 *     survives and is compared. Extension json_names are not stripped.
 * Not in the embedding either: options with `retention = RETENTION_SOURCE`
 * (protoc-gen-es embeds CodeGeneratorRequest.proto_file, from which the
 * compiler removes them). The rebuilt file can only contain options present
 * in the embedding, so none can exist on either side.
 *
 * Comments are restored from the JSDoc in validate_pb.d.ts (protoc-gen-es
 * copies leading and trailing comments there); they are not part of the
 * descriptor and not checked.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import {
  ScalarType,
  clearField,
  clone,
  createRegistry,
  fromBinary,
  getExtension,
  isFieldSet,
  toBinary,
  toJson,
  type DescEnum,
  type DescExtension,
  type DescField,
  type DescFile,
  type DescMessage,
  type Message,
} from "@bufbuild/protobuf";
import { embedFileDesc } from "@bufbuild/protobuf/codegenv2";
import {
  isReflectList,
  isReflectMap,
  isReflectMessage,
  protoCamelCase,
  reflect,
  type ReflectMessage,
} from "@bufbuild/protobuf/reflect";
import {
  EnumOptionsSchema,
  EnumValueOptionsSchema,
  ExtensionRangeOptionsSchema,
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FieldDescriptorProtoSchema,
  FieldOptionsSchema,
  FileDescriptorProtoSchema,
  FileDescriptorSetSchema,
  FileOptionsSchema,
  MessageOptionsSchema,
  MethodOptionsSchema,
  OneofOptionsSchema,
  ServiceOptionsSchema,
  type DescriptorProto,
  type EnumDescriptorProto,
  type FieldDescriptorProto,
  type FileDescriptorProto,
  type ServiceDescriptorProto,
} from "@bufbuild/protobuf/wkt";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const OUTPUT_PATH = path.join(repoRoot, "third_party/proto/buf/validate/validate.proto");
const GEN_SPECIFIER = "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
const BUF = path.join(repoRoot, "node_modules/.bin/buf");

// ---------------------------------------------------------------------------
// Inputs from the installed @bufbuild/protovalidate package
// ---------------------------------------------------------------------------

interface GeneratedSources {
  /** validate_pb.js as shipped (CommonJS build; the ESM build has the same literal) */
  js: string;
  /** validate_pb.d.ts, for doc comments */
  dts: string | undefined;
  version: string;
}

function readGeneratedSources(): GeneratedSources {
  const require = createRequire(import.meta.url);
  const jsPath = require.resolve(GEN_SPECIFIER);
  const dtsPath = jsPath.replace(/\.js$/, ".d.ts");
  // package.json is not in the package's "exports": walk up from the module
  // (past dist/cjs/package.json, which only sets the module type).
  let version: string | undefined;
  for (let dir = path.dirname(jsPath); !version; dir = path.dirname(dir)) {
    const file = path.join(dir, "package.json");
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, "utf8")) as { name?: string; version?: string };
      if (pkg.name === "@bufbuild/protovalidate") version = pkg.version ?? "unknown";
    }
    if (path.dirname(dir) === dir) throw new Error("cannot find @bufbuild/protovalidate/package.json");
  }
  return {
    js: fs.readFileSync(jsPath, "utf8"),
    dts: fs.existsSync(dtsPath) ? fs.readFileSync(dtsPath, "utf8") : undefined,
    version,
  };
}

/** The base64 literal protoc-gen-es wrote into validate_pb.js. */
export function embeddedBase64(js: string): string {
  const matches = [...js.matchAll(/fileDesc\)?\("([A-Za-z0-9+/=]+)"/g)];
  if (matches.length !== 1 || !matches[0]?.[1]) {
    throw new Error(`expected one fileDesc("…") literal in validate_pb.js, found ${matches.length}`);
  }
  return matches[0][1];
}

/** The `// Copyright …` block at the top of validate_pb.js. */
function licenseHeader(js: string): string[] {
  const lines = js.split("\n");
  let i = 0;
  while (i < lines.length && !lines[i]!.startsWith("//")) i++;
  const out: string[] = [];
  for (; i < lines.length && lines[i]!.startsWith("//"); i++) out.push(lines[i]!);
  return out;
}

// ---------------------------------------------------------------------------
// Doc comments from validate_pb.d.ts
// ---------------------------------------------------------------------------

/**
 * Maps "message:pkg.Msg", "field:pkg.Msg.name", "oneof:pkg.Msg.name",
 * "enum:pkg.Enum", "value:pkg.Enum.NAME", "extension:pkg.name" to comment
 * text. protoc-gen-es joins leading and trailing comments, drops one leading
 * space per line and escapes "*\/"; detached comments are lost.
 */
export function parseDocComments(dts: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (dts === undefined) return out;
  let message = "";
  let enumName = "";
  for (const block of dts.matchAll(/\/\*\*\n([\s\S]*?)\*\//g)) {
    const lines = block[1]!
      .split("\n")
      .map((l) => l.replace(/^\s*\* ?/, "").replace(/\*\\\//g, "*/"))
      .filter((l, i, a) => !(i === a.length - 1 && l.trim() === ""));
    const genIdx = lines.findIndex((l) => l.startsWith("@generated from "));
    if (genIdx < 0) continue;
    const gen = lines[genIdx]!.slice("@generated from ".length);
    const textLines = lines.slice(0, genIdx);
    while (textLines.length && textLines[textLines.length - 1] === "") textLines.pop();
    const text = textLines.join("\n");
    let key: string | undefined;
    let m: RegExpMatchArray | null;
    if ((m = gen.match(/^message (\S+)$/))) {
      message = m[1]!;
      key = `message:${message}`;
    } else if ((m = gen.match(/^enum value: (\w+) = -?\d+;$/))) {
      key = `value:${enumName}.${m[1]}`;
    } else if ((m = gen.match(/^enum (\S+)$/))) {
      enumName = m[1]!;
      key = `enum:${enumName}`;
    } else if ((m = gen.match(/^oneof (\S+)$/))) {
      key = `oneof:${m[1]}`;
    } else if ((m = gen.match(/^field: .*?(\w+) = (\d+)(?: \[.*\])?;$/))) {
      key = `field:${message}.${m[1]}#${m[2]}`;
    } else if ((m = gen.match(/^extension: .*?(\w+) = (\d+)(?: \[.*\])?;$/))) {
      key = `extension:${m[1]}#${m[2]}`;
    }
    if (key !== undefined && text !== "") out.set(key, text);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Rendering .proto source from a FileDescriptorProto
// ---------------------------------------------------------------------------

class Unsupported extends Error {
  constructor(what: string) {
    super(`cannot render ${what}: not supported by this script (extend it)`);
  }
}

const MAX_FIELD_NUMBER = 536870911; // 2^29 - 1
const MAX_ENUM_NUMBER = 2147483647;

const scalarTypeNames: Partial<Record<FieldDescriptorProto_Type, string>> = {
  [FieldDescriptorProto_Type.DOUBLE]: "double",
  [FieldDescriptorProto_Type.FLOAT]: "float",
  [FieldDescriptorProto_Type.INT64]: "int64",
  [FieldDescriptorProto_Type.UINT64]: "uint64",
  [FieldDescriptorProto_Type.INT32]: "int32",
  [FieldDescriptorProto_Type.FIXED64]: "fixed64",
  [FieldDescriptorProto_Type.FIXED32]: "fixed32",
  [FieldDescriptorProto_Type.BOOL]: "bool",
  [FieldDescriptorProto_Type.STRING]: "string",
  [FieldDescriptorProto_Type.BYTES]: "bytes",
  [FieldDescriptorProto_Type.UINT32]: "uint32",
  [FieldDescriptorProto_Type.SFIXED32]: "sfixed32",
  [FieldDescriptorProto_Type.SFIXED64]: "sfixed64",
  [FieldDescriptorProto_Type.SINT32]: "sint32",
  [FieldDescriptorProto_Type.SINT64]: "sint64",
};

/** A proto / text-format string literal. Non-ASCII stays raw UTF-8. */
function quote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === '"') out += '\\"';
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || c === 0x7f) out += "\\" + c.toString(8).padStart(3, "0");
    else out += ch;
  }
  return out + '"';
}

function quoteBytes(b: Uint8Array): string {
  let out = '"';
  for (const c of b) {
    if (c === 0x5c) out += "\\\\";
    else if (c === 0x22) out += '\\"';
    else if (c >= 0x20 && c < 0x7f) out += String.fromCharCode(c);
    else out += "\\" + c.toString(8).padStart(3, "0");
  }
  return out + '"';
}

function formatFloat(n: number): string {
  if (Number.isNaN(n)) return "nan";
  if (n === Infinity) return "inf";
  if (n === -Infinity) return "-inf";
  if (Object.is(n, -0)) return "-0";
  return String(n);
}

type OptionsSchema =
  | typeof FileOptionsSchema
  | typeof MessageOptionsSchema
  | typeof FieldOptionsSchema
  | typeof OneofOptionsSchema
  | typeof EnumOptionsSchema
  | typeof EnumValueOptionsSchema
  | typeof ServiceOptionsSchema
  | typeof MethodOptionsSchema
  | typeof ExtensionRangeOptionsSchema;

interface RenderInput {
  file: DescFile;
  comments: Map<string, string>;
  header: string[];
}

export function renderProto({ file, comments, header }: RenderInput): string {
  const proto = file.proto;
  const registry = createRegistry(file);
  const symbols = collectSymbols(file);
  const out: string[] = [];
  const pkg = proto.package;
  const qualify = (scope: string, name: string) => (scope ? `${scope}.${name}` : name);
  const parentScope = (scope: string) => scope.slice(0, Math.max(scope.lastIndexOf("."), 0));

  // --- names ---------------------------------------------------------------

  /**
   * Shortest suffix of `fullName` that resolves back to it from every scope
   * in `scopes` under protobuf's scoping rules. Conservative: any symbol kind
   * (field, enum value, …) shadows the first name component.
   */
  function ref(fullName: string, scopes: string[]): string {
    if (!fullName.startsWith(".")) throw new Error(`unqualified reference ${fullName}`);
    const target = fullName.slice(1);
    const parts = target.split(".");
    for (let k = 1; k <= parts.length; k++) {
      const candidate = parts.slice(-k).join(".");
      if (scopes.every((s) => resolve(candidate, s) === target)) return candidate;
    }
    return fullName;
  }
  function resolve(candidate: string, scope: string): string | undefined {
    const first = candidate.split(".")[0]!;
    for (let s = scope; ; s = parentScope(s)) {
      if (symbols.has(qualify(s, first))) {
        const full = qualify(s, candidate);
        return symbols.has(full) ? full : undefined;
      }
      if (s === "") return undefined;
    }
  }

  // --- comments ------------------------------------------------------------

  /** A blank line before the next member, unless right after an opening brace. */
  function separate(): void {
    const last = out[out.length - 1];
    if (last !== undefined && last !== "" && !last.endsWith("{")) out.push("");
  }

  function comment(key: string, indent: string): void {
    const text = comments.get(key);
    if (text === undefined) return;
    for (const line of text.split("\n")) out.push(line === "" ? `${indent}//` : `${indent}// ${line}`);
  }

  // --- option values -------------------------------------------------------

  /** Text-format value of a field of a message literal. */
  function literal(field: DescField | DescExtension, value: unknown, indent: string): string {
    if (isReflectMessage(value)) return messageLiteral(value, indent);
    const scalar = field.fieldKind === "list" ? field.listKind : field.fieldKind;
    if (scalar === "enum") {
      const e = field.enum as DescEnum;
      return e.values.find((v) => v.number === value)?.name ?? String(value);
    }
    if (scalar !== "scalar") throw new Unsupported(`value of ${field.toString()}`);
    const st = field.scalar as ScalarType;
    switch (st) {
      case ScalarType.STRING:
        return quote(value as string);
      case ScalarType.BYTES:
        return quoteBytes(value as Uint8Array);
      case ScalarType.BOOL:
        return value ? "true" : "false";
      case ScalarType.DOUBLE:
      case ScalarType.FLOAT:
        return formatFloat(value as number);
      default:
        return String(value);
    }
  }

  function messageLiteral(msg: ReflectMessage, indent: string): string {
    const unknown = (msg.message as Message).$unknown;
    if (unknown?.length) throw new Unsupported(`unknown fields / extensions inside ${msg.desc.typeName}`);
    const inner = indent + "  ";
    const lines: string[] = [];
    for (const f of msg.sortedFields) {
      if (!msg.isSet(f)) continue;
      const v = msg.get(f);
      if (isReflectList(v)) {
        for (const item of v) lines.push(`${inner}${f.name}: ${literal(f, item, inner)}`);
      } else if (isReflectMap(v)) {
        throw new Unsupported(`map field ${f.toString()} in an option value`);
      } else {
        lines.push(`${inner}${f.name}: ${literal(f, v, inner)}`);
      }
    }
    return lines.length ? `{\n${lines.join("\n")}\n${indent}}` : "{}";
  }

  /**
   * `name = value` assignments for an options message: known fields first
   * (by name; their order does not change the encoding), then extensions in
   * the order of their unknown-field records. A message-typed extension is
   * written as one assignment per field / list element, e.g.
   * `(buf.validate.predefined).cel = {…}` once per rule.
   */
  function optionAssignments(
    schema: OptionsSchema,
    opts: Message | undefined,
    scopes: string[],
    indent: string,
  ): string[] {
    if (!opts) return [];
    const out: string[] = [];
    const r = reflect(schema as DescMessage, opts);
    const known = [...r.fields].sort((a, b) => a.name.localeCompare(b.name));
    for (const f of known) {
      if (!r.isSet(f)) continue;
      if (f.name === "uninterpreted_option" || f.name === "features") {
        throw new Unsupported(`option ${f.name}`);
      }
      const v = r.get(f);
      if (isReflectList(v)) for (const item of v) out.push(`${f.name} = ${literal(f, item, indent)}`);
      else if (isReflectMap(v)) throw new Unsupported(`map option ${f.name}`);
      else out.push(`${f.name} = ${literal(f, v, indent)}`);
    }
    const seen = new Set<number>();
    for (const u of opts.$unknown ?? []) {
      if (seen.has(u.no)) continue;
      seen.add(u.no);
      const ext = registry.getExtensionFor(schema as DescMessage, u.no);
      if (!ext) throw new Unsupported(`unknown option field ${u.no} on ${schema.typeName}`);
      out.push(...extensionAssignments(ext, opts, scopes, indent));
    }
    return out;
  }

  function extensionAssignments(ext: DescExtension, opts: Message, scopes: string[], indent: string): string[] {
    const name = `(${ref("." + ext.typeName, scopes)})`;
    const value = getExtension(opts as never, ext) as unknown;
    if (ext.fieldKind === "message") {
      const r = reflect(ext.message, value as Message);
      if ((value as Message).$unknown?.length) throw new Unsupported(`unknown fields inside option ${name}`);
      const out: string[] = [];
      for (const f of r.sortedFields) {
        if (!r.isSet(f)) continue;
        const v = r.get(f);
        if (isReflectList(v)) for (const item of v) out.push(`${name}.${f.name} = ${literal(f, item, indent)}`);
        else if (isReflectMap(v)) throw new Unsupported(`map field in option ${name}`);
        else out.push(`${name}.${f.name} = ${literal(f, v, indent)}`);
      }
      return out.length ? out : [`${name} = {}`];
    }
    if (ext.fieldKind === "list") {
      return (value as unknown[]).map((item) => `${name} = ${literal(ext, item, indent)}`);
    }
    return [`${name} = ${literal(ext, value, indent)}`];
  }

  function optionStatements(
    schema: OptionsSchema,
    opts: Message | undefined,
    scopes: string[],
    indent: string,
  ): void {
    for (const a of optionAssignments(schema, opts, scopes, indent)) out.push(`${indent}option ${a};`);
  }

  /**
   * ` [a]` or ` [a, b]` on one line; several options of which any spans lines
   * go one per line (values were rendered for `indent`, so shift them).
   */
  function bracket(assignments: string[], indent: string): string {
    if (!assignments.length) return "";
    if (assignments.length === 1 || !assignments.some((a) => a.includes("\n"))) {
      return ` [${assignments.join(", ")}]`;
    }
    const inner = indent + "  ";
    const items = assignments.map((a) => inner + a.replace(/\n/g, "\n  "));
    return ` [\n${items.join(",\n")}\n${indent}]`;
  }

  // --- fields ----------------------------------------------------------------

  const isProto3 = proto.syntax === "proto3";

  function fieldType(f: FieldDescriptorProto, scopes: string[]): string {
    if (f.type === FieldDescriptorProto_Type.MESSAGE || f.type === FieldDescriptorProto_Type.ENUM) {
      return ref(f.typeName, scopes);
    }
    if (f.type === FieldDescriptorProto_Type.GROUP) throw new Unsupported(`group field ${f.name}`);
    const t = scalarTypeNames[f.type];
    if (!t) throw new Unsupported(`field type ${f.type}`);
    return t;
  }

  function defaultLiteral(f: FieldDescriptorProto): string {
    const v = f.defaultValue;
    switch (f.type) {
      case FieldDescriptorProto_Type.STRING:
        return quote(v);
      case FieldDescriptorProto_Type.BYTES:
        return `"${v}"`; // already C-escaped in the descriptor
      default:
        return v; // numbers, inf/-inf/nan, true/false, enum value names
    }
  }

  function fieldLine(
    f: FieldDescriptorProto,
    scopes: string[],
    indent: string,
    ctx: { inOneof: boolean; isExtension: boolean; mapEntry?: DescriptorProto },
  ): string {
    let decl: string;
    if (ctx.mapEntry) {
      const [k, v] = ctx.mapEntry.field;
      if (!k || !v) throw new Error(`malformed map entry ${ctx.mapEntry.name}`);
      decl = `map<${fieldType(k, scopes)}, ${fieldType(v, scopes)}>`;
    } else {
      let label = "";
      if (f.label === FieldDescriptorProto_Label.REPEATED) label = "repeated ";
      else if (f.label === FieldDescriptorProto_Label.REQUIRED) label = "required ";
      else if (!ctx.inOneof && (!isProto3 || f.proto3Optional)) label = "optional ";
      decl = label + fieldType(f, scopes);
    }
    const pseudo: string[] = [];
    if (isFieldSet(f, FieldDescriptorProtoSchema.field.defaultValue)) pseudo.push(`default = ${defaultLiteral(f)}`);
    if (
      !ctx.isExtension &&
      isFieldSet(f, FieldDescriptorProtoSchema.field.jsonName) &&
      f.jsonName !== protoCamelCase(f.name)
    ) {
      pseudo.push(`json_name = ${quote(f.jsonName)}`);
    }
    const opts = optionAssignments(FieldOptionsSchema, f.options, scopes, indent);
    return `${indent}${decl} ${f.name} = ${f.number}${bracket([...pseudo, ...opts], indent)};`;
  }

  function extendBlocks(exts: FieldDescriptorProto[], scope: string, indent: string, commentScope: string): void {
    let i = 0;
    while (i < exts.length) {
      const extendee = exts[i]!.extendee;
      separate();
      out.push(`${indent}extend ${ref(extendee, [scope])} {`);
      for (; i < exts.length && exts[i]!.extendee === extendee; i++) {
        const e = exts[i]!;
        if (isFieldSet(e, FieldDescriptorProtoSchema.field.oneofIndex)) throw new Unsupported(`extension ${e.name} in a oneof`);
        const key = commentScope === pkg ? `extension:${e.name}#${e.number}` : "";
        if (comments.has(key)) separate();
        comment(key, indent + "  ");
        out.push(fieldLine(e, [scope], indent + "  ", { inOneof: false, isExtension: true }));
      }
      out.push(`${indent}}`);
    }
  }

  // --- ranges ------------------------------------------------------------------

  function range(start: number, endInclusive: number, max: number): string {
    if (start === endInclusive) return String(start);
    return `${start} to ${endInclusive === max ? "max" : endInclusive}`;
  }

  function reservedLines(
    ranges: { start: number; end: number }[],
    names: string[],
    endExclusive: boolean,
    max: number,
    indent: string,
  ): void {
    if (ranges.length) {
      out.push(
        `${indent}reserved ${ranges.map((r) => range(r.start, endExclusive ? r.end - 1 : r.end, max)).join(", ")};`,
      );
    }
    if (names.length) out.push(`${indent}reserved ${names.map(quote).join(", ")};`);
  }

  // --- messages, enums, services -------------------------------------------------

  function message(m: DescriptorProto, scope: string, indent: string): void {
    const full = qualify(scope, m.name);
    const inner = indent + "  ";
    comment(`message:${full}`, indent);
    out.push(`${indent}message ${m.name} {`);
    // Option names resolve from the message or its parent scope depending on
    // the compiler; a name must work for both.
    optionStatements(MessageOptionsSchema, m.options, [full, scope], inner);

    const mapEntries = new Map<string, DescriptorProto>();
    const nestedOrder: DescriptorProto[] = [];
    for (const n of m.nestedType) {
      if (n.options?.mapEntry) mapEntries.set(`.${full}.${n.name}`, n);
      nestedOrder.push(n);
    }
    const emitted = new Set<DescriptorProto>();
    const emitNestedUpTo = (stop: DescriptorProto | undefined) => {
      for (const n of nestedOrder) {
        if (n === stop) return;
        if (emitted.has(n) || n.options?.mapEntry) continue;
        emitted.add(n);
        separate();
        message(n, full, inner);
      }
    };

    // Fields, with oneofs opened at their first member. Real oneofs must be
    // contiguous in the descriptor (source order) to be expressible.
    const closedOneofs = new Set<number>();
    let openOneof: number | undefined;
    let fieldIndent = inner;
    const closeOneof = () => {
      if (openOneof !== undefined) {
        out.push(`${inner}}`);
        closedOneofs.add(openOneof);
        openOneof = undefined;
        fieldIndent = inner;
      }
    };
    for (const f of m.field) {
      if (f.type === FieldDescriptorProto_Type.GROUP) throw new Unsupported(`group ${full}.${f.name}`);
      const entry =
        f.label === FieldDescriptorProto_Label.REPEATED && f.type === FieldDescriptorProto_Type.MESSAGE
          ? mapEntries.get(f.typeName)
          : undefined;
      if (entry) {
        if (openOneof === undefined) emitNestedUpTo(entry);
        emitted.add(entry);
      }
      const oneof =
        isFieldSet(f, FieldDescriptorProtoSchema.field.oneofIndex) && !f.proto3Optional ? f.oneofIndex : undefined;
      if (oneof !== openOneof) {
        closeOneof();
        if (oneof !== undefined) {
          if (closedOneofs.has(oneof)) throw new Unsupported(`non-contiguous oneof in ${full}`);
          const o = m.oneofDecl[oneof]!;
          separate();
          comment(`oneof:${full}.${o.name}`, inner);
          out.push(`${inner}oneof ${o.name} {`);
          optionStatements(OneofOptionsSchema, o.options, [full], inner + "  ");
          openOneof = oneof;
          fieldIndent = inner + "  ";
        }
      }
      const key = `field:${full}.${f.name}#${f.number}`;
      if (comments.has(key)) separate();
      comment(key, fieldIndent);
      out.push(fieldLine(f, [full], fieldIndent, { inOneof: openOneof !== undefined, isExtension: false, mapEntry: entry }));
    }
    closeOneof();
    // Oneofs without fields cannot be written in source.
    m.oneofDecl.forEach((o, i) => {
      const synthetic = m.field.some((f) => f.proto3Optional && f.oneofIndex === i);
      if (!synthetic && !closedOneofs.has(i)) throw new Unsupported(`oneof ${full}.${o.name} without fields`);
    });
    emitNestedUpTo(undefined);
    for (const e of m.enumType) {
      separate();
      enumDecl(e, full, inner);
    }
    if (m.extension.length) {
      separate();
      extendBlocks(m.extension, full, inner, full);
    }
    if (m.extensionRange.length) {
      separate();
      for (const r of m.extensionRange) {
        const opts = optionAssignments(ExtensionRangeOptionsSchema, r.options, [full], inner);
        out.push(`${inner}extensions ${range(r.start, r.end - 1, MAX_FIELD_NUMBER)}${bracket(opts, inner)};`);
      }
    }
    if (m.reservedRange.length || m.reservedName.length) {
      separate();
      reservedLines(m.reservedRange, m.reservedName, true, MAX_FIELD_NUMBER, inner);
    }
    out.push(`${indent}}`);
  }

  function enumDecl(e: EnumDescriptorProto, scope: string, indent: string): void {
    const full = qualify(scope, e.name);
    const inner = indent + "  ";
    comment(`enum:${full}`, indent);
    out.push(`${indent}enum ${e.name} {`);
    optionStatements(EnumOptionsSchema, e.options, [full, scope], inner);
    for (const v of e.value) {
      const key = `value:${full}.${v.name}`;
      if (comments.has(key)) separate();
      comment(key, inner);
      const opts = optionAssignments(EnumValueOptionsSchema, v.options, [full, scope], inner);
      out.push(`${inner}${v.name} = ${v.number}${bracket(opts, inner)};`);
    }
    if (e.reservedRange.length || e.reservedName.length) {
      out.push("");
      reservedLines(e.reservedRange, e.reservedName, false, MAX_ENUM_NUMBER, inner);
    }
    out.push(`${indent}}`);
  }

  function service(s: ServiceDescriptorProto, indent: string): void {
    const full = qualify(pkg, s.name);
    const inner = indent + "  ";
    comment(`service:${full}`, indent);
    out.push(`${indent}service ${s.name} {`);
    optionStatements(ServiceOptionsSchema, s.options, [full, pkg], inner);
    for (const m of s.method) {
      const input = (m.clientStreaming ? "stream " : "") + ref(m.inputType, [full, pkg]);
      const output = (m.serverStreaming ? "stream " : "") + ref(m.outputType, [full, pkg]);
      const opts = optionAssignments(MethodOptionsSchema, m.options, [full, pkg], inner + "  ");
      if (opts.length) {
        out.push(`${inner}rpc ${m.name}(${input}) returns (${output}) {`);
        for (const a of opts) out.push(`${inner}  option ${a};`);
        out.push(`${inner}}`);
      } else {
        out.push(`${inner}rpc ${m.name}(${input}) returns (${output});`);
      }
    }
    out.push(`${indent}}`);
  }

  // --- file ----------------------------------------------------------------------

  if (proto.syntax !== "" && proto.syntax !== "proto2" && proto.syntax !== "proto3") {
    throw new Unsupported(`syntax "${proto.syntax}" (editions)`);
  }
  if (proto.optionDependency.length) throw new Unsupported("option imports");
  out.push(...header, "");
  out.push(`syntax = "${isProto3 ? "proto3" : "proto2"}";`, "");
  if (pkg) out.push(`package ${pkg};`, "");
  if (proto.dependency.length) {
    proto.dependency.forEach((d, i) => {
      const kind = proto.publicDependency.includes(i) ? "public " : proto.weakDependency.includes(i) ? "weak " : "";
      out.push(`import ${kind}${quote(d)};`);
    });
    out.push("");
  }
  const fileOpts = optionAssignments(FileOptionsSchema, proto.options, [pkg], "");
  if (fileOpts.length) {
    for (const a of fileOpts) out.push(`option ${a};`);
  }
  if (proto.extension.length) extendBlocks(proto.extension, pkg, "", pkg);
  for (const m of proto.messageType) {
    out.push("");
    message(m, pkg, "");
  }
  for (const e of proto.enumType) {
    out.push("");
    enumDecl(e, pkg, "");
  }
  for (const s of proto.service) {
    out.push("");
    service(s, "");
  }
  return out.join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n";
}

/** Every fully-qualified name visible to the file (itself and its imports). */
function collectSymbols(file: DescFile): Set<string> {
  const symbols = new Set<string>();
  const seen = new Set<string>();
  const add = (s: string) => symbols.add(s);
  const visitFile = (f: DescFile) => {
    if (seen.has(f.name)) return;
    seen.add(f.name);
    const p = f.proto;
    const parts = p.package ? p.package.split(".") : [];
    for (let i = 1; i <= parts.length; i++) add(parts.slice(0, i).join("."));
    const scope = p.package;
    const q = (s: string, n: string) => (s ? `${s}.${n}` : n);
    const visitEnum = (e: EnumDescriptorProto, s: string) => {
      add(q(s, e.name));
      for (const v of e.value) {
        add(q(s, v.name)); // enum values are siblings of their enum...
        add(q(q(s, e.name), v.name)); // ...and protoc also checks them inside it
      }
    };
    const visitMessage = (m: DescriptorProto, s: string) => {
      const full = q(s, m.name);
      add(full);
      for (const f of m.field) add(q(full, f.name));
      for (const o of m.oneofDecl) add(q(full, o.name));
      for (const x of m.extension) add(q(full, x.name));
      for (const n of m.nestedType) visitMessage(n, full);
      for (const e of m.enumType) visitEnum(e, full);
    };
    for (const m of p.messageType) visitMessage(m, scope);
    for (const e of p.enumType) visitEnum(e, scope);
    for (const x of p.extension) add(q(scope, x.name));
    for (const s of p.service) {
      add(q(scope, s.name));
      for (const m of s.method) add(q(q(scope, s.name), m.name));
    }
    for (const d of f.dependencies) visitFile(d);
  };
  visitFile(file);
  return symbols;
}

export function renderValidateProto(): string {
  const sources = readGeneratedSources();
  const header = [
    ...licenseHeader(sources.js),
    "",
    `// Rebuilt from the descriptor embedded in @bufbuild/protovalidate@${sources.version}`,
    `// (${GEN_SPECIFIER}) by scripts/rebuild-validate-proto.ts.`,
    "// Do not edit: re-run the script. Comments come from the package's JSDoc and",
    "// are approximate; the descriptor is checked to be exact (--check).",
    "// Upstream: https://github.com/bufbuild/protovalidate (proto/protovalidate/buf/validate/validate.proto).",
  ];
  return renderProto({
    file: file_buf_validate_validate,
    comments: parseDocComments(sources.dts),
    header,
  });
}

// ---------------------------------------------------------------------------
// Check: compile with buf, compare with the embedding
// ---------------------------------------------------------------------------

export interface CheckResult {
  ok: boolean;
  problems: string[];
  /** what was compared, for the report */
  summary: string;
}

/** Compile a set of .proto files (path in module → text) with buf, in isolation. */
export function bufBuild(files: Record<string, string>): FileDescriptorProto[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "laneway-bufbuild-"));
  try {
    fs.writeFileSync(path.join(dir, "buf.yaml"), "version: v2\n");
    for (const [name, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
      fs.writeFileSync(path.join(dir, name), text);
    }
    const outFile = path.join(dir, "out.binpb");
    try {
      execFileSync(BUF, ["build", dir, "--as-file-descriptor-set", "-o", outFile], {
        stdio: ["ignore", "pipe", "pipe"],
      });
    } catch (err) {
      const e = err as { stderr?: Buffer; message: string };
      throw new Error(`buf build failed: ${e.stderr?.toString() || e.message}`);
    }
    return fromBinary(FileDescriptorSetSchema, fs.readFileSync(outFile)).file;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export function checkValidateProto(protoText?: string): CheckResult {
  const problems: string[] = [];
  const sources = readGeneratedSources();
  const literal = embeddedBase64(sources.js);
  const runtime = file_buf_validate_validate.proto;
  const name = runtime.name;

  // 0. The object we render from is exactly the embedding.
  if (embedFileDesc(runtime).base64() !== literal) {
    problems.push("internal: file_buf_validate_validate.proto does not re-embed to the literal in validate_pb.js");
  }

  // 1. The file on disk is what this script renders (not stale, not hand-edited).
  const onDisk = protoText ?? (fs.existsSync(OUTPUT_PATH) ? fs.readFileSync(OUTPUT_PATH, "utf8") : undefined);
  if (onDisk === undefined) {
    return { ok: false, problems: [`${OUTPUT_PATH} does not exist`], summary: "" };
  }
  if (protoText === undefined && onDisk !== renderValidateProto()) {
    problems.push(`${path.relative(repoRoot, OUTPUT_PATH)} differs from the script's output: re-run the script`);
  }

  // 2. Compile it with buf.
  let built: FileDescriptorProto | undefined;
  try {
    built = bufBuild({ [name]: onDisk }).find((f) => f.name === name);
    if (!built) problems.push(`buf output has no ${name}`);
  } catch (err) {
    problems.push((err as Error).message);
  }
  if (!built) return { ok: false, problems, summary: "" };

  // 3. Imports: stripped from the literal; protoc-gen-es passes them to fileDesc().
  if (built.dependency.join("\n") !== runtime.dependency.join("\n")) {
    problems.push(`imports differ: built [${built.dependency.join(", ")}] vs embedded [${runtime.dependency.join(", ")}]`);
  }

  // 4. Everything else, byte for byte, after the same stripping protoc-gen-es applies.
  const builtBase64 = embedFileDesc(built).base64();
  if (builtBase64 !== literal) {
    problems.push("descriptor differs from the embedded one:");
    const registry = createRegistry(file_buf_validate_validate);
    const a = toJson(FileDescriptorProtoSchema, embedFileDesc(built).proto(), { registry });
    const b = toJson(FileDescriptorProtoSchema, fromBinary(FileDescriptorProtoSchema, base64ToBytes(literal)), {
      registry,
    });
    const diffs = jsonDiff(a, b, "");
    problems.push(...diffs.slice(0, 30).map((d) => "  " + d));
    if (diffs.length > 30) problems.push(`  … and ${diffs.length - 30} more`);
    if (!diffs.length) problems.push("  (no difference in JSON: encoding / unknown-field order differs)");
  }
  // 5. The same, stated without protoc-gen-es's stripping: the compiled
  //    descriptor minus source_code_info equals the one the runtime restores
  //    (literal + import list + default json_names).
  const unstripped = clone(FileDescriptorProtoSchema, built);
  clearField(unstripped, FileDescriptorProtoSchema.field.sourceCodeInfo);
  const rawEqual = bytesEqual(
    toBinary(FileDescriptorProtoSchema, unstripped),
    toBinary(FileDescriptorProtoSchema, runtime),
  );
  if (!rawEqual) problems.push("compiled descriptor (without source_code_info) differs from the runtime descriptor");

  const summary =
    `${name} from @bufbuild/protovalidate@${sources.version}: buf-compiled descriptor, stripped like protoc-gen-es ` +
    `(source_code_info, default json_name, dependency), is ${builtBase64 === literal ? "byte-identical" : "DIFFERENT"} ` +
    `to the embedded one (${base64ToBytes(literal).length} bytes); imports ` +
    `${built.dependency.join("\n") === runtime.dependency.join("\n") ? "identical" : "DIFFERENT"}; ` +
    `without stripping, it equals the runtime descriptor except source_code_info: ${rawEqual ? "yes" : "NO"}.`;
  return { ok: problems.length === 0, problems, summary };
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function base64ToBytes(b64: string): Uint8Array {
  return new Uint8Array(Buffer.from(b64, "base64"));
}

function jsonDiff(a: unknown, b: unknown, at: string): string[] {
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || a === null || b === null) {
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [`${at || "/"}: built ${short(a)} vs embedded ${short(b)}`];
  }
  if (typeof a !== "object") return a === b ? [] : [`${at || "/"}: built ${short(a)} vs embedded ${short(b)}`];
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const keys = [...new Set([...Object.keys(ao), ...Object.keys(bo)])];
  return keys.flatMap((k) => jsonDiff(ao[k], bo[k], `${at}/${k}`));
}

function short(v: unknown): string {
  const s = JSON.stringify(v) ?? "undefined";
  return s.length > 160 ? s.slice(0, 157) + "…" : s;
}

// ---------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------

function main(argv: string[]): number {
  const args = new Set(argv);
  for (const a of args) {
    if (!["--check", "--stdout"].includes(a)) {
      process.stderr.write(`unknown argument ${a}\nusage: rebuild-validate-proto.ts [--check | --stdout]\n`);
      return 2;
    }
  }
  if (args.has("--stdout")) {
    process.stdout.write(renderValidateProto());
    return 0;
  }
  if (!args.has("--check")) {
    fs.mkdirSync(path.dirname(OUTPUT_PATH), { recursive: true });
    fs.writeFileSync(OUTPUT_PATH, renderValidateProto());
    process.stdout.write(`wrote ${path.relative(process.cwd(), OUTPUT_PATH)}\n`);
  }
  const result = checkValidateProto();
  if (!result.ok) {
    process.stderr.write(`validate.proto check FAILED:\n${result.problems.join("\n")}\n`);
    return 1;
  }
  process.stdout.write(`ok: ${result.summary}\n`);
  return 0;
}

if (process.argv[1] && pathToFileURL(path.resolve(process.argv[1])).href === import.meta.url) {
  process.exitCode = main(process.argv.slice(2));
}
