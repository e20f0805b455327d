import { execFile } from "node:child_process";
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, expect, test } from "vitest";
import { repoRoot } from "./helpers/laneway.js";

/**
 * The contract checks reviewers run: buf lint (STANDARD and COMMENTS),
 * buf format, buf breaking against the released contract image
 * (contract/released.binpb) and against main, and gen/ being exactly what
 * `npm run gen` produces from proto/.
 */

const run = promisify(execFile);
const buf = join(repoRoot, "node_modules/.bin/buf");
const scratch: string[] = [];

afterAll(async () => {
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

async function bufOk(args: string[], cwd = repoRoot): Promise<{ ok: boolean; output: string }> {
  try {
    const { stdout, stderr } = await run(buf, args, { cwd });
    return { ok: true, output: stdout + stderr };
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    return { ok: false, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
}

async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name))).sort();
}

test("buf lint passes (STANDARD and COMMENTS)", async () => {
  const result = await bufOk(["lint"]);
  expect(result.output).toBe("");
  expect(result.ok).toBe(true);
});

test("proto files are formatted", async () => {
  const result = await bufOk(["format", "-d", "--exit-code", "proto"]);
  expect(result.output).toBe("");
  expect(result.ok).toBe(true);
});

test("gen/ is exactly what npm run gen produces", async () => {
  const out = await mkdtemp(join(tmpdir(), "laneway-gen-"));
  scratch.push(out);
  const result = await bufOk(["generate", "-o", out]);
  expect(result.ok, result.output).toBe(true);
  const generated = join(out, "gen");
  const expected = await listFiles(generated);
  expect(await listFiles(join(repoRoot, "gen"))).toEqual(expected);
  for (const file of expected) {
    const [fresh, committed] = await Promise.all([readFile(join(generated, file), "utf8"), readFile(join(repoRoot, "gen", file), "utf8")]);
    expect(committed, `gen/${file} is stale: run npm run gen`).toBe(fresh);
  }
});

test("no breaking change against main", async () => {
  // CI may check out a detached commit: compare with the local main branch,
  // else the remote one, else the checked-out commit itself.
  const refs = ["main", "origin/main"];
  let against = ".git#ref=HEAD,subdir=proto";
  for (const ref of refs) {
    const found = await run("git", ["rev-parse", "--verify", "--quiet", ref], { cwd: repoRoot }).then(
      () => true,
      () => false,
    );
    if (found) {
      against = ref === "main" ? ".git#branch=main,subdir=proto" : `.git#ref=${ref},subdir=proto`;
      break;
    }
  }
  const result = await bufOk(["breaking", "proto", "--against", against]);
  expect(result.output).toBe("");
  expect(result.ok).toBe(true);
});

const releasedImage = join(repoRoot, "contract/released.binpb");

test("no breaking change against the released contract", async () => {
  const result = await bufOk(["breaking", "proto", "--against", releasedImage]);
  expect(result.output).toBe("");
  expect(result.ok).toBe(true);
});

test("the breaking check bites: a copy of proto/ with a released field removed fails it, on any checkout", async () => {
  const copy = await mkdtemp(join(tmpdir(), "laneway-breaking-"));
  scratch.push(copy);
  await cp(join(repoRoot, "proto"), join(copy, "proto"), { recursive: true });
  await cp(join(repoRoot, "third_party/proto"), join(copy, "third_party/proto"), { recursive: true });
  await cp(join(repoRoot, "buf.yaml"), join(copy, "buf.yaml"));
  const file = join(copy, "proto/laneway/lane/v1/lane_service.proto");
  const text = await readFile(file, "utf8");
  const field = "  // Optional untrusted absolute URI metadata; empty when not given.\n  string provenance = 8;\n";
  expect(text).toContain(field);
  await writeFile(file, text.replace(field, ""));
  const result = await bufOk(["breaking", "proto", "--against", releasedImage], copy);
  expect(result.ok).toBe(false);
  expect(result.output).toContain('Previously present field "8" with name "provenance" on message "LaneRecord" was deleted.');
});
