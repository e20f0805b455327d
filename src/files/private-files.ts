/**
 * Files written whole or not at all: seeds, credentials, the signer record,
 * the hub state, the demo's tokens and lanes configuration, the Kmap
 * signing key, the embedded nats-server's configuration.
 *
 * One rule for every write: the content goes to a temporary file in the
 * target's folder, created exclusively with the target's mode (0600 unless
 * told otherwise, set exactly whatever the umask), written and fsync'd;
 * then it is renamed over the target ({@link writePrivateFile}) or
 * hard-linked to it when nothing is there yet ({@link createPrivateFile}),
 * and the folder is fsync'd. A crash leaves either the old or the new
 * content, never a torn file, and an acknowledged write survives a power
 * loss. Errors carry the file system's error; messages built from them name
 * its errno code only ({@link errnoCode}): a path reveals layout, and these
 * files are secrets.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, fsyncSync, linkSync, mkdirSync, openSync, rmSync, writeSync } from "node:fs";
import { link, mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";

/** Replaces `path` atomically with `content`, creating the folder (0700) if needed. */
export async function writePrivateFile(path: string, content: string | Uint8Array, mode = 0o600): Promise<void> {
  const folder = dirname(path);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const temp = await writeTemporary(path, content, mode);
  try {
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => {});
    throw error;
  }
  await syncFolder(folder);
}

/**
 * Creates `path` with `content` only if nothing (not even a dangling
 * symlink) is there yet, atomically: two processes creating it at once
 * agree on one content. Returns whether this call created it.
 */
export async function createPrivateFile(path: string, content: string | Uint8Array, mode = 0o600): Promise<boolean> {
  const folder = dirname(path);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const temp = await writeTemporary(path, content, mode);
  try {
    await link(temp, path);
  } catch (error) {
    if (errnoCode(error) === "EEXIST") return false;
    throw error;
  } finally {
    await rm(temp, { force: true }).catch(() => {});
  }
  await syncFolder(folder);
  return true;
}

/**
 * {@link createPrivateFile} for code that cannot wait (a worker thread's
 * start): the same steps and the same fsync rule, synchronously.
 */
export function createPrivateFileSync(path: string, content: string | Uint8Array, mode = 0o600): boolean {
  const folder = dirname(path);
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    const fd = openSync(temp, "wx", mode);
    try {
      chmodSync(temp, mode); // the umask may have removed bits; set exactly
      writeSync(fd, typeof content === "string" ? Buffer.from(content, "utf8") : content);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    try {
      linkSync(temp, path);
    } catch (error) {
      if (errnoCode(error) === "EEXIST") return false;
      throw error;
    }
  } finally {
    rmSync(temp, { force: true });
  }
  syncFolderSync(folder);
  return true;
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

/** A temporary file beside `path` holding `content`, fsync'd; removed again if any step fails. */
async function writeTemporary(path: string, content: string | Uint8Array, mode: number): Promise<string> {
  const temp = `${path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    const handle = await open(temp, "wx", mode);
    try {
      await handle.chmod(mode); // the umask may have removed bits; set exactly
      await handle.writeFile(content);
      await handle.sync();
    } finally {
      await handle.close();
    }
    return temp;
  } catch (error) {
    await rm(temp, { force: true }).catch(() => {});
    throw error;
  }
}

function syncFolderSync(folder: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(folder, "r");
    fsyncSync(fd);
  } catch {
    // Some file systems cannot fsync a directory; the link is still atomic.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
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
