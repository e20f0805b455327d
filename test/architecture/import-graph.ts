import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

/**
 * The import graph of a source tree, read from its files' import and
 * export-from statements (type-only imports included: a loop through types
 * is still a loop a reader has to untangle).
 */
export interface ImportGraph {
  /** File (relative to the root) → the files it imports, relative to the root. */
  readonly edges: ReadonlyMap<string, readonly string[]>;
  /** File → every module specifier it names, as written. */
  readonly specifiers: ReadonlyMap<string, readonly string[]>;
}

const importPattern = /^\s*(?:import|export)\s[^;]*?\sfrom\s+["']([^"']+)["']/gm;

export function readImportGraph(root: string, folder: string): ImportGraph {
  const edges = new Map<string, string[]>();
  const specifiers = new Map<string, string[]>();
  const files = (readdirSync(join(root, folder), { recursive: true, withFileTypes: true }) as import("node:fs").Dirent[])
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => relative(root, join(e.parentPath, e.name)));
  for (const file of files) {
    const text = readFileSync(join(root, file), "utf8");
    const named = [...text.matchAll(importPattern)].map((m) => m[1]!);
    specifiers.set(file, named);
    edges.set(
      file,
      named.filter((s) => s.startsWith(".")).map((s) => relative(root, resolve(root, dirname(file), s)).replace(/\.js$/, ".ts")),
    );
  }
  return { edges, specifiers };
}

/** Every strongly connected component with more than one file (or a file importing itself). */
export function importCycles(graph: ImportGraph): string[][] {
  let index = 0;
  const indices = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (file: string) => {
    indices.set(file, index);
    low.set(file, index);
    index++;
    stack.push(file);
    onStack.add(file);
    for (const next of graph.edges.get(file) ?? []) {
      if (!graph.edges.has(next)) continue;
      if (!indices.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(file, Math.min(low.get(file)!, indices.get(next)!));
      }
    }
    if (low.get(file) === indices.get(file)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      if (component.length > 1 || (graph.edges.get(file) ?? []).includes(file)) cycles.push(component.sort());
    }
  };
  for (const file of graph.edges.keys()) if (!indices.has(file)) visit(file);
  return cycles;
}
