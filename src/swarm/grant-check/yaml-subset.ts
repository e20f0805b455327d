/**
 * A reader for the YAML of Helm values and users files: block mappings,
 * block sequences (also at their key's indentation, and `- key: value`
 * items), plain, single- and double-quoted scalars, flow sequences and
 * flow mappings, comments, and a leading `---`. Anything else (anchors,
 * aliases, tags, block scalars, several documents) is refused with the
 * line number, rather than read wrongly.
 *
 * Scalars: `true`/`false` become booleans, `null`/`~` null, decimal numbers
 * numbers, everything else (and every quoted scalar) a string.
 */

export class YamlSubsetError extends Error {
  override readonly name = "YamlSubsetError";
}

interface Line {
  indent: number;
  text: string;
  readonly no: number;
}

/** Parses `text`; throws {@link YamlSubsetError}. */
export function parseYamlSubset(text: string): unknown {
  const lines: Line[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const no = index + 1;
    if (raw.includes("\t") && /^\s*\t/.test(raw)) throw new YamlSubsetError(`line ${no}: tabs cannot indent YAML`);
    const content = stripComment(raw, no).trimEnd();
    if (content.trim() === "") return;
    const indent = content.length - content.trimStart().length;
    const body = content.trimStart();
    if (indent === 0 && (body === "---" || body === "...")) {
      if (body === "---" && lines.length > 0) throw new YamlSubsetError(`line ${no}: only one YAML document is read`);
      return;
    }
    if (/^[&*!|>]/.test(body) || /:\s+[&*!|>]/.test(body) || /^-\s+[&*!|>]/.test(body)) {
      throw new YamlSubsetError(`line ${no}: anchors, aliases, tags and block scalars are not read`);
    }
    lines.push({ indent, text: body, no });
  });
  if (lines.length === 0) return null;
  const [value, next] = parseBlock(lines, 0, lines[0]!.indent);
  if (next < lines.length) throw new YamlSubsetError(`line ${lines[next]!.no}: unexpected indentation`);
  return value;
}

function isSequenceItem(text: string): boolean {
  return text === "-" || text.startsWith("- ");
}

function parseBlock(lines: Line[], index: number, indent: number): [unknown, number] {
  const line = lines[index]!;
  if (line.indent !== indent) throw new YamlSubsetError(`line ${line.no}: unexpected indentation`);
  return isSequenceItem(line.text) ? parseSequence(lines, index, indent) : parseMapping(lines, index, indent);
}

function parseSequence(lines: Line[], index: number, indent: number): [unknown[], number] {
  const items: unknown[] = [];
  let i = index;
  while (i < lines.length && lines[i]!.indent === indent && isSequenceItem(lines[i]!.text)) {
    const line = lines[i]!;
    const rest = line.text.slice(1).trimStart();
    if (rest === "") {
      const next = lines[i + 1];
      if (next === undefined || next.indent <= indent) {
        items.push(null);
        i += 1;
      } else {
        const [value, after] = parseBlock(lines, i + 1, next.indent);
        items.push(value);
        i = after;
      }
      continue;
    }
    if (mappingKey(rest) !== undefined) {
      // `- key: value`: a mapping whose keys line up with `key`.
      const offset = line.text.length - rest.length;
      line.indent = indent + offset;
      line.text = rest;
      const [value, after] = parseMapping(lines, i, line.indent);
      items.push(value);
      i = after;
      continue;
    }
    items.push(parseScalar(rest, line.no));
    i += 1;
  }
  return [items, i];
}

function parseMapping(lines: Line[], index: number, indent: number): [Record<string, unknown>, number] {
  const map: Record<string, unknown> = {};
  let i = index;
  while (i < lines.length && lines[i]!.indent === indent && !isSequenceItem(lines[i]!.text)) {
    const line = lines[i]!;
    const split = mappingKey(line.text);
    if (split === undefined) throw new YamlSubsetError(`line ${line.no}: expected key: value`);
    const [key, valueText] = split;
    if (Object.hasOwn(map, key)) throw new YamlSubsetError(`line ${line.no}: the key ${key} appears twice`);
    if (valueText !== "") {
      map[key] = parseScalar(valueText, line.no);
      i += 1;
      continue;
    }
    const next = lines[i + 1];
    if (next !== undefined && next.indent > indent) {
      const [value, after] = parseBlock(lines, i + 1, next.indent);
      map[key] = value;
      i = after;
    } else if (next !== undefined && next.indent === indent && isSequenceItem(next.text)) {
      const [value, after] = parseSequence(lines, i + 1, indent);
      map[key] = value;
      i = after;
    } else {
      map[key] = null;
      i += 1;
    }
  }
  if (i < lines.length && lines[i]!.indent > indent) throw new YamlSubsetError(`line ${lines[i]!.no}: unexpected indentation`);
  return [map, i];
}

/** Splits `key: value` (or `key:`); undefined when the text is not a mapping entry. */
function mappingKey(text: string): [string, string] | undefined {
  let key: string;
  let rest: string;
  if (text.startsWith('"') || text.startsWith("'")) {
    const end = quotedEnd(text, 0);
    if (end === undefined) return undefined;
    key = String(parseScalar(text.slice(0, end + 1), 0));
    rest = text.slice(end + 1);
    if (!rest.startsWith(":")) return undefined;
    rest = rest.slice(1);
    if (rest !== "" && !/^\s/.test(rest)) return undefined;
  } else {
    if (text.startsWith("[") || text.startsWith("{")) return undefined;
    const match = /^([^:]+?):(?:\s+(.*)|$)/.exec(text);
    if (!match) return undefined;
    key = match[1]!.trim();
    rest = match[2] ?? "";
  }
  return [key, rest.trim()];
}

function quotedEnd(text: string, start: number): number | undefined {
  const quote = text[start];
  for (let i = start + 1; i < text.length; i++) {
    if (quote === '"' && text[i] === "\\") {
      i += 1;
      continue;
    }
    if (text[i] === quote) {
      if (quote === "'" && text[i + 1] === "'") {
        i += 1;
        continue;
      }
      return i;
    }
  }
  return undefined;
}

function stripComment(raw: string, no: number): string {
  let quote: string | undefined;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (quote !== undefined) {
      if (quote === '"' && c === "\\") i += 1;
      else if (c === quote) quote = undefined;
      continue;
    }
    if ((c === '"' || c === "'") && (i === 0 || /[\s:[{,-]/.test(raw[i - 1]!))) quote = c;
    else if (c === "#" && (i === 0 || /\s/.test(raw[i - 1]!))) return raw.slice(0, i);
  }
  if (quote !== undefined) throw new YamlSubsetError(`line ${no}: an unterminated quoted string`);
  return raw;
}

function parseScalar(text: string, no: number): unknown {
  const t = text.trim();
  if (t.startsWith("[") || t.startsWith("{")) {
    const parser = new FlowParser(t, no);
    const value = parser.value();
    parser.end();
    return value;
  }
  if (t.startsWith('"')) {
    if (quotedEnd(t, 0) !== t.length - 1) throw new YamlSubsetError(`line ${no}: text after a quoted string`);
    try {
      return JSON.parse(t) as string;
    } catch {
      throw new YamlSubsetError(`line ${no}: an invalid double-quoted string`);
    }
  }
  if (t.startsWith("'")) {
    if (quotedEnd(t, 0) !== t.length - 1) throw new YamlSubsetError(`line ${no}: text after a quoted string`);
    return t.slice(1, -1).replaceAll("''", "'");
  }
  return plain(t);
}

function plain(t: string): unknown {
  if (t === "true" || t === "True") return true;
  if (t === "false" || t === "False") return false;
  if (t === "null" || t === "~" || t === "Null") return null;
  if (/^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/.test(t)) return Number(t);
  return t;
}

/** `[a, "b", {c: d}]` and `{a: b}` on one line. */
class FlowParser {
  #i = 0;

  constructor(
    private readonly text: string,
    private readonly no: number,
  ) {}

  value(): unknown {
    this.#space();
    const c = this.text[this.#i];
    if (c === "[") return this.#sequence();
    if (c === "{") return this.#mapping();
    if (c === '"' || c === "'") return this.#quoted();
    return this.#plain();
  }

  end(): void {
    this.#space();
    if (this.#i < this.text.length) throw this.#error("text after a flow collection");
  }

  #sequence(): unknown[] {
    this.#i += 1;
    const items: unknown[] = [];
    this.#space();
    if (this.text[this.#i] === "]") {
      this.#i += 1;
      return items;
    }
    for (;;) {
      items.push(this.value());
      this.#space();
      const c = this.text[this.#i++];
      if (c === "]") return items;
      if (c !== ",") throw this.#error("expected , or ]");
      this.#space();
      if (this.text[this.#i] === "]") {
        this.#i += 1;
        return items;
      }
    }
  }

  #mapping(): Record<string, unknown> {
    this.#i += 1;
    const map: Record<string, unknown> = {};
    this.#space();
    if (this.text[this.#i] === "}") {
      this.#i += 1;
      return map;
    }
    for (;;) {
      this.#space();
      const key = this.text[this.#i] === '"' || this.text[this.#i] === "'" ? this.#quoted() : this.#plainUntil(/[:,}]/);
      this.#space();
      if (this.text[this.#i++] !== ":") throw this.#error("expected : in a flow mapping");
      map[String(key)] = this.value();
      this.#space();
      const c = this.text[this.#i++];
      if (c === "}") return map;
      if (c !== ",") throw this.#error("expected , or }");
    }
  }

  #quoted(): string {
    const end = quotedEnd(this.text, this.#i);
    if (end === undefined) throw this.#error("an unterminated quoted string");
    const value = parseScalar(this.text.slice(this.#i, end + 1), this.no) as string;
    this.#i = end + 1;
    return value;
  }

  #plain(): unknown {
    return plain(String(this.#plainUntil(/[,\]}]/)));
  }

  #plainUntil(stop: RegExp): string {
    const start = this.#i;
    while (this.#i < this.text.length && !stop.test(this.text[this.#i]!)) this.#i += 1;
    const value = this.text.slice(start, this.#i).trim();
    if (value === "") throw this.#error("an empty flow entry");
    return value;
  }

  #space(): void {
    while (this.#i < this.text.length && /\s/.test(this.text[this.#i]!)) this.#i += 1;
  }

  #error(problem: string): YamlSubsetError {
    return new YamlSubsetError(`line ${this.no}: ${problem}`);
  }
}
