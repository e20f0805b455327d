import { mkdtemp, readdir, readFile, rm, stat, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { createPrivateFile, createPrivateFileSync, readOptionalFile, writePrivateFile } from "../../src/files/index.js";

/**
 * The one atomic write: exact modes whatever the umask, replace versus
 * create-once, and no temporary file left behind.
 */

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function folder(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "laneway-files-"));
  dirs.push(dir);
  return dir;
}

test("a write replaces the file with mode 0600 (or the mode given), creating its folder 0700, and leaves no temporary file", async () => {
  const dir = await folder();
  const path = join(dir, "hive", "seed");
  const umask = process.umask(0);
  try {
    await writePrivateFile(path, "one\n");
    await writePrivateFile(path, "two\n");
    await writePrivateFile(join(dir, "lanes.json"), "{}\n", 0o644);
  } finally {
    process.umask(umask);
  }
  expect(await readFile(path, "utf8")).toBe("two\n");
  expect((await stat(path)).mode & 0o777).toBe(0o600);
  expect((await stat(join(dir, "hive"))).mode & 0o777).toBe(0o700);
  expect((await stat(join(dir, "lanes.json"))).mode & 0o777).toBe(0o644);
  expect(await readdir(join(dir, "hive"))).toEqual(["seed"]);
});

test("a create-once write creates the file only when nothing is there, even a dangling symlink", async () => {
  const dir = await folder();
  const path = join(dir, "tokens.env");
  expect(await createPrivateFile(path, "first\n")).toBe(true);
  expect(await createPrivateFile(path, "second\n")).toBe(false);
  expect(await readFile(path, "utf8")).toBe("first\n");
  expect((await stat(path)).mode & 0o777).toBe(0o600);
  const dangling = join(dir, "dangling");
  await symlink(join(dir, "nowhere"), dangling);
  expect(await createPrivateFile(dangling, "x\n")).toBe(false);
  expect((await readdir(dir)).sort()).toEqual(["dangling", "tokens.env"]);
});

test("the synchronous create-once write follows the same rule: exact mode, folder 0700, first content wins, no temporary file", async () => {
  const dir = await folder();
  const path = join(dir, "kmap", "signing-key.pem");
  const umask = process.umask(0o077);
  try {
    expect(createPrivateFileSync(path, "first\n", 0o640)).toBe(true);
  } finally {
    process.umask(umask);
  }
  expect(createPrivateFileSync(path, new TextEncoder().encode("second\n"))).toBe(false);
  expect(await readFile(path, "utf8")).toBe("first\n");
  expect((await stat(path)).mode & 0o777).toBe(0o640);
  expect((await stat(join(dir, "kmap"))).mode & 0o777).toBe(0o700);
  expect(await readdir(join(dir, "kmap"))).toEqual(["signing-key.pem"]);
});

test("an optional read is undefined for a missing file and throws other failures", async () => {
  const dir = await folder();
  expect(await readOptionalFile(join(dir, "absent"))).toBeUndefined();
  await expect(readOptionalFile(dir)).rejects.toMatchObject({ code: "EISDIR" });
});
