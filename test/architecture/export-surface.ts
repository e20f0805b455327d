import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

/**
 * Which names of a folder's `index.ts` are used outside the folder: read
 * with the TypeScript parser (syntax only, no type check), from the import
 * and export-from declarations of every TypeScript file of the project
 * (src/, test/, bench/, examples/, scripts/).
 * `export *` in the index is followed to the names it re-exports.
 */

/** The exported names of a module, `export *` followed. */
export function exportedNames(root: string, file: string, seen = new Set<string>()): Set<string> {
  const names = new Set<string>();
  if (seen.has(file)) return names;
  seen.add(file);
  const source = parse(join(root, file), readFileSync(join(root, file), "utf8"));
  const exported = (node: ts.Node) => ts.canHaveModifiers(node) && (ts.getModifiers(node) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
  for (const statement of source.statements) {
    if (ts.isExportDeclaration(statement)) {
      const target = statement.moduleSpecifier && ts.isStringLiteral(statement.moduleSpecifier) ? resolveSpecifier(root, file, statement.moduleSpecifier.text) : undefined;
      if (statement.exportClause === undefined) {
        if (target !== undefined) for (const name of exportedNames(root, target, seen)) names.add(name);
      } else if (ts.isNamedExports(statement.exportClause)) {
        for (const element of statement.exportClause.elements) names.add(element.name.text);
      } else {
        names.add(statement.exportClause.name.text);
      }
    } else if (exported(statement)) {
      if (ts.isVariableStatement(statement)) {
        for (const declaration of statement.declarationList.declarations) if (ts.isIdentifier(declaration.name)) names.add(declaration.name.text);
      } else if ((ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement) || ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement) || ts.isEnumDeclaration(statement)) && statement.name) {
        names.add(statement.name.text);
      }
    }
  }
  return names;
}

/** Names imported from `target` (a path relative to the root) by the project's files for which `counts` holds; `*` for a namespace import. */
export function namesUsedFrom(root: string, target: string, counts: (path: string) => boolean): Set<string> {
  const used = new Set<string>();
  for (const { path, imports } of projectImports(root)) {
    if (!counts(path)) continue;
    for (const name of imports.get(target) ?? []) used.add(name);
  }
  return used;
}

/**
 * The names `folder/index.ts` exports that nothing outside `folder/`
 * imports. `notUsers` names more folders whose uses do not count, and the
 * files among them that count all the same (an index that passes names on).
 */
export function unusedIndexExports(root: string, folder: string, notUsers: { folders: readonly string[]; except: readonly string[] } = { folders: [], except: [] }): string[] {
  const index = `${folder}/index.ts`;
  const inside = (path: string) => [folder, ...notUsers.folders].some((f) => path.startsWith(`${f}/`)) && !notUsers.except.includes(path);
  const used = namesUsedFrom(root, index, (path) => !inside(path));
  if (used.has("*")) return [];
  return [...exportedNames(root, index)].filter((name) => !used.has(name)).sort();
}

const folders = ["src", "test", "bench", "examples", "scripts"];
let cached: { root: string; files: { path: string; imports: Map<string, Set<string>> }[] } | undefined;

/** Every .ts file of the project with the names it imports from each project file (`*`: all of them). */
function projectImports(root: string): { path: string; imports: Map<string, Set<string>> }[] {
  if (cached?.root === root) return cached.files;
  const files: { path: string; imports: Map<string, Set<string>> }[] = [];
  for (const folder of folders) {
    if (!existsSync(join(root, folder))) continue;
    for (const entry of readdirSync(join(root, folder), { recursive: true, withFileTypes: true }) as import("node:fs").Dirent[]) {
      if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
      const path = relative(root, join(entry.parentPath, entry.name));
      files.push({ path, imports: importsOf(root, path, readFileSync(join(root, path), "utf8")) });
    }
  }
  cached = { root, files };
  return files;
}

function importsOf(root: string, path: string, text: string): Map<string, Set<string>> {
  const imports = new Map<string, Set<string>>();
  const add = (specifier: string, name: string) => {
    const target = resolveSpecifier(root, path, specifier);
    if (target === undefined) return;
    const names = imports.get(target) ?? new Set<string>();
    names.add(name);
    imports.set(target, names);
  };
  for (const statement of parse(join(root, path), text).statements) {
    if (!(ts.isImportDeclaration(statement) || ts.isExportDeclaration(statement)) || !statement.moduleSpecifier || !ts.isStringLiteral(statement.moduleSpecifier)) continue;
    const specifier = statement.moduleSpecifier.text;
    if (ts.isImportDeclaration(statement)) {
      const bindings = statement.importClause?.namedBindings;
      if (bindings === undefined) continue;
      if (ts.isNamespaceImport(bindings)) add(specifier, "*");
      else for (const element of bindings.elements) add(specifier, (element.propertyName ?? element.name).text);
    } else if (statement.exportClause === undefined || !ts.isNamedExports(statement.exportClause)) {
      add(specifier, "*");
    } else {
      for (const element of statement.exportClause.elements) add(specifier, (element.propertyName ?? element.name).text);
    }
  }
  // import("…/index.js").Name in type positions
  for (const match of text.matchAll(/import\(["']([^"']+)["']\)\.(\w+)/g)) add(match[1]!, match[2]!);
  return imports;
}

function parse(path: string, text: string): ts.SourceFile {
  return ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
}

/** A relative specifier as a path from the root (`.js` read as `.ts`); undefined for packages. */
function resolveSpecifier(root: string, from: string, specifier: string): string | undefined {
  if (!specifier.startsWith(".")) return undefined;
  return relative(root, resolve(root, dirname(from), specifier)).replace(/\.js$/, ".ts");
}
