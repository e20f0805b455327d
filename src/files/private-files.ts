/**
 * Files that hold secrets (seeds, credentials, the signer record, the hub
 * state): written whole or not at all, readable by their owner only.
 *
 * A write goes to a temporary file in the same folder (mode 0600), is
 * fsync'd, renamed over the target and the folder fsync'd, so a crash
 * leaves either the old or the new content, never a torn file. Errors name
 * the errno code only: a path reveals layout, and these files are secrets.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";

/** Writes `content` to `path` atomically with mode 0600, creating the folder (0700) if needed. */
export async function writePrivateFile(path: string, content: string | Uint8Array): Promise<void> {
  const folder = dirname(path);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    const handle = await open(temp, "wx", 0o600);
    try {
      await handle.writeFile(content);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => {});
    throw error;
  }
  await syncFolder(folder);
}

/** Reads a file as UTF-8, or undefined when it does not exist. Other errors are thrown. */
export async function readOptionalFile(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/** The errno code of a file system failure, for messages (`ENOENT`, `EACCES`, …). */
export function errnoCode(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? "error";
}

async function syncFolder(folder: string): Promise<void> {
  let handle;
  try {
    handle = await open(folder, "r");
    await handle.sync();
  } catch {
    // Some file systems cannot fsync a directory; the rename is still atomic.
  } finally {
    await handle?.close();
  }
}
