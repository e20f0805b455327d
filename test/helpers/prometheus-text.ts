/**
 * A strict parser of the Prometheus text exposition format 0.0.4, for
 * tests: every line must be a `# HELP`, a `# TYPE` or a sample of the
 * family declared before it (empty lines are ignored, as the format says); names, label names and values, escapes and
 * numbers are checked; a family appears once; histogram buckets are
 * cumulative and end with `+Inf` equal to `_count`. Anything else throws
 * with the line number.
 */

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram" | "summary" | "untyped";
  readonly samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  if (!text.endsWith("\n")) throw new Error("the exposition must end with a newline");
  const lines = text.slice(0, -1).split("\n");
  let current: { name: string; help?: string; type?: Family["type"]; samples: Sample[] } | undefined;
  const close = () => {
    if (current === undefined) return;
    if (current.type === undefined || current.help === undefined) throw new Error(`family ${current.name} lacks HELP or TYPE`);
    if (families.has(current.name)) throw new Error(`family ${current.name} appears twice`);
    const family: Family = { name: current.name, help: current.help, type: current.type, samples: current.samples };
    checkFamily(family);
    families.set(current.name, family);
    current = undefined;
  };
  lines.forEach((line, index) => {
    const at = `line ${index + 1}: ${JSON.stringify(line.slice(0, 120))}`;
    if (line === "") return; // the format ignores empty lines
    if (/^\s|\s$/.test(line)) throw new Error(`${at}: leading or trailing whitespace`);
    if (line.startsWith("# HELP ")) {
      const rest = line.slice(7);
      const space = rest.indexOf(" ");
      const name = space < 0 ? rest : rest.slice(0, space);
      if (!NAME.test(name)) throw new Error(`${at}: bad metric name`);
      if (current?.name !== name) {
        close();
        current = { name, samples: [] };
      }
      if (current.help !== undefined) throw new Error(`${at}: second HELP`);
      const help = space < 0 ? "" : rest.slice(space + 1);
      if (/\\(?![\\n])/.test(help)) throw new Error(`${at}: bad escape in HELP`);
      current.help = help;
      return;
    }
    if (line.startsWith("# TYPE ")) {
      const [name, type, extra] = line.slice(7).split(" ");
      if (extra !== undefined || name === undefined || !NAME.test(name)) throw new Error(`${at}: bad TYPE line`);
      if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(type ?? "")) throw new Error(`${at}: unknown type`);
      if (current?.name !== name) {
        close();
        current = { name, samples: [] };
      }
      if (current.type !== undefined || current.samples.length > 0) throw new Error(`${at}: TYPE after samples or twice`);
      current.type = type as Family["type"];
      return;
    }
    if (line.startsWith("#")) return; // a comment
    if (current === undefined) throw new Error(`${at}: sample outside a family`);
    const sample = parseSample(line, at);
    const suffixes = current.type === "histogram" ? ["_bucket", "_sum", "_count"] : current.type === "summary" ? ["", "_sum", "_count"] : [""];
    if (!suffixes.some((s) => sample.name === current!.name + s)) throw new Error(`${at}: sample ${sample.name} does not belong to ${current.name}`);
    current.samples.push(sample);
  });
  close();
  return families;
}

function parseSample(line: string, at: string): Sample {
  const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)( -?\d+)?$/.exec(line);
  if (!match) throw new Error(`${at}: not a sample`);
  const labels: Record<string, string> = {};
  const body = match[2];
  if (body !== undefined) {
    let i = 1;
    while (i < body.length - 1) {
      const eq = body.indexOf("=", i);
      if (eq < 0) throw new Error(`${at}: label without value`);
      const name = body.slice(i, eq);
      if (!LABEL.test(name) || name in labels) throw new Error(`${at}: bad or repeated label ${name}`);
      if (body[eq + 1] !== '"') throw new Error(`${at}: unquoted label value`);
      let j = eq + 2;
      let value = "";
      for (;;) {
        const c = body[j];
        if (c === undefined) throw new Error(`${at}: unterminated label value`);
        if (c === '"') break;
        if (c === "\\") {
          const next = body[j + 1];
          if (next === "n") value += "\n";
          else if (next === "\\" || next === '"') value += next;
          else throw new Error(`${at}: bad escape in label value`);
          j += 2;
          continue;
        }
        if (c === "\n") throw new Error(`${at}: newline in label value`);
        value += c;
        j += 1;
      }
      labels[name] = value;
      i = j + 1;
      if (body[i] === ",") i += 1;
      else if (i !== body.length - 1) throw new Error(`${at}: expected , or } after a label`);
    }
  }
  // Values as Prometheus reads them (Go's ParseFloat): decimal or exponent forms, and Inf or NaN in any case.
  const raw = match[3]!;
  const special = raw.toLowerCase();
  const value = special === "+inf" || special === "inf" ? Infinity : special === "-inf" ? -Infinity : special === "nan" ? NaN : Number(raw);
  if (!/^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$/.test(raw) && !["+inf", "-inf", "inf", "nan"].includes(special)) throw new Error(`${at}: bad value ${raw}`);
  return { name: match[1]!, labels, value };
}

function checkFamily(family: Family): void {
  const seen = new Set<string>();
  for (const s of family.samples) {
    const key = `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`;
    if (seen.has(key)) throw new Error(`${family.name}: sample ${key} appears twice`);
    seen.add(key);
    if (family.type === "counter" && !(s.value >= 0)) throw new Error(`${family.name}: negative counter`);
  }
  if (family.type !== "histogram") return;
  const series = new Map<string, { buckets: [number, number][]; count?: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const entry = series.get(key) ?? { buckets: [] };
    series.set(key, entry);
    if (s.name.endsWith("_bucket")) {
      if (le === undefined) throw new Error(`${family.name}: bucket without le`);
      entry.buckets.push([le === "+Inf" ? Infinity : Number(le), s.value]);
    } else if (s.name.endsWith("_count")) entry.count = s.value;
  }
  for (const [key, { buckets, count }] of series) {
    for (let i = 1; i < buckets.length; i++) {
      if (!(buckets[i]![0] > buckets[i - 1]![0]) || buckets[i]![1] < buckets[i - 1]![1]) throw new Error(`${family.name}${key}: buckets not cumulative`);
    }
    const last = buckets[buckets.length - 1];
    if (last === undefined || last[0] !== Infinity || last[1] !== count) throw new Error(`${family.name}${key}: +Inf bucket differs from _count`);
  }
}

/** The value of one sample (0 when absent): `name` with exactly these labels among its own. */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  const familyName = [...families.keys()].find((f) => name === f || name === `${f}_count` || name === `${f}_sum` || name === `${f}_bucket`);
  const family = familyName === undefined ? undefined : families.get(familyName);
  const sample = family?.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v) && Object.keys(s.labels).length === Object.keys(labels).length);
  return sample?.value ?? 0;
}
