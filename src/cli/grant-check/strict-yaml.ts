/**
 * The YAML of Helm values and users files, read with the `yaml` package
 * (YAML 1.2, core schema), with one policy on top: anchors, aliases, tags,
 * block scalars and several documents are refused with the line number,
 * rather than read in a way the file's author may not have meant (a bare
 * `>` or `*` is a NATS subject to them, and a block scalar or an alias to
 * YAML). Duplicate keys and every syntax error are refused as well.
 */
import { LineCounter, parseAllDocuments, visit, type Document } from "yaml";

export class YamlRefusedError extends Error {
  override readonly name = "YamlRefusedError";
}

/** Parses `text` into plain values; throws {@link YamlRefusedError}. */
export function parseStrictYaml(text: string): unknown {
  const lines = new LineCounter();
  const at = (offset: number) => `line ${lines.linePos(offset).line}`;
  const parsed = parseAllDocuments(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const documents: Document[] = Array.isArray(parsed) ? parsed : [];
  if (documents.length > 1) throw new YamlRefusedError(`${at(documents[1]!.range?.[0] ?? 0)}: only one YAML document is read`);
  const document = documents[0];
  if (document === undefined) return null;
  const problem = document.errors[0] ?? document.warnings[0];
  if (problem !== undefined) throw new YamlRefusedError(`${at(problem.pos[0])}: ${problem.message}`);
  const refused = (offset: number | undefined) => new YamlRefusedError(`${at(offset ?? 0)}: anchors, aliases, tags and block scalars are not read`);
  visit(document, {
    Alias(_, node) {
      throw refused(node.range?.[0]);
    },
    Node(_, node) {
      if (node.anchor !== undefined || node.tag !== undefined) throw refused(node.range?.[0]);
      if ("type" in node && (node.type === "BLOCK_LITERAL" || node.type === "BLOCK_FOLDED")) throw refused(node.range?.[0]);
    },
  });
  return document.toJS();
}
