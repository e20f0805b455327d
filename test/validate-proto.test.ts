import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

import { test, expect } from "vitest";

import {
  OUTPUT_PATH,
  bufBuild,
  checkValidateProto,
} from "../scripts/rebuild-validate-proto.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const thirdParty = path.join(root, "third_party/proto");

test("third_party/proto/buf/validate/validate.proto compiles to exactly the descriptor embedded in @bufbuild/protovalidate", () => {
  const result = checkValidateProto();
  expect(result.problems).toEqual([]);
  expect(result.ok).toBe(true);
});

test("the check catches a one-character change in a CEL expression", () => {
  const text = fs.readFileSync(OUTPUT_PATH, "utf8");
  const changed = text.replace('id: "float.const"\n', 'id: "float.konst"\n');
  expect(changed).not.toBe(text);
  const result = checkValidateProto(changed);
  expect(result.ok).toBe(false);
  expect(result.problems.join("\n")).toContain("float.konst");
});

test("--check exits 0", () => {
  const out = execFileSync(
    process.execPath,
    ["--import", "tsx", path.join(root, "scripts/rebuild-validate-proto.ts"), "--check"],
    { cwd: root, encoding: "utf8" },
  );
  expect(out).toMatch(/^ok: .*byte-identical/);
});

test("all of third_party/proto compiles with buf", () => {
  const files: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".proto")) files[path.relative(thirdParty, p)] = fs.readFileSync(p, "utf8");
    }
  };
  walk(thirdParty);
  expect(Object.keys(files).sort()).toEqual([
    "buf/validate/validate.proto",
    "grpc/health/v1/health.proto",
    "grpc/reflection/v1/reflection.proto",
    "grpc/reflection/v1alpha/reflection.proto",
  ]);
  const names = bufBuild(files).map((f) => f.name);
  expect(names).toEqual(expect.arrayContaining(Object.keys(files)));
});
