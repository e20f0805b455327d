/**
 * The embedded nats-server's own log file, and what Laneway reads in it.
 *
 * Why the server writes it itself (`log_file`, `logfile_size_limit`): its log
 * then never depends on Laneway reading a pipe — a busy or stopped Laneway
 * cannot make the broker block on a full stderr pipe, and the lines around
 * a crash or a cut-off connection are on disk for an operator. nats-server
 * 2.9.10 rotates by size (the full file is renamed to
 * `<file>.<yyyy.mm.dd.hh.mm.ss.nnnnnnnnn>` and a new one begun, verified) but
 * has no limit on the number of rotated files (`logfile_max_num` arrived in
 * 2.10 and 2.9.10 refuses it), so Laneway removes all but the newest few
 * whenever one appears.
 *
 * What Laneway reads back: the lines of one server process (they begin with
 * `[<pid>]`), for a failed start's diagnostics; and the server's message
 * about one client connection (`- cid:<n> -`), to tell why the server closed
 * Laneway's own connection when it sent no `-ERR` (a slow consumer).
 * The file holds addresses and user names: it stays in the data directory
 * (mode 0700) and nothing read from it is logged except a classified reason.
 */
import { watch, type FSWatcher } from "node:fs";
import { open, readdir, rm } from "node:fs/promises";
import { join } from "node:path";

import { classifyServerText, type DisconnectReason } from "./broker-errors.js";

/** The log file's name in the server's store directory. */
export const SERVER_LOG_FILE = "nats-server.log";
/** Size at which the server rotates its log file (10 MiB). */
export const DEFAULT_LOG_FILE_BYTES = 10 * 1024 * 1024;
/** Rotated files kept beside the current one: at most 5 files, 50 MiB, with the defaults. */
export const DEFAULT_ROTATED_LOG_FILES = 4;

/** How much of a file's end is read back (diagnostics, a connection's last message). */
const TAIL_BYTES = 256 * 1024;

const rotatedSuffix = /^\.\d{4}(\.\d+)+$/;

/** The rotated copies of `base` in `dir`, oldest first (their suffix is a timestamp that sorts as text). */
export async function rotatedLogFiles(dir: string, base = SERVER_LOG_FILE): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return [];
  }
  return names.filter((name) => name.startsWith(base) && rotatedSuffix.test(name.slice(base.length))).sort();
}

/** Removes all but the newest `keep` rotated copies; resolves with how many it removed. */
export async function pruneRotatedLogs(dir: string, keep: number, base = SERVER_LOG_FILE): Promise<number> {
  const rotated = await rotatedLogFiles(dir, base);
  const excess = rotated.slice(0, Math.max(0, rotated.length - Math.max(0, keep)));
  for (const name of excess) await rm(join(dir, name), { force: true });
  return excess.length;
}

/**
 * Keeps the rotated copies of `base` at `keep` while the server runs: prunes
 * when a file appears in `dir` (inotify), and once a minute in case an event
 * was missed. Never keeps the process alive; `close` stops it.
 */
export function keepRotatedLogsBounded(dir: string, keep: number, base = SERVER_LOG_FILE): { close(): void } {
  let running: Promise<void> | undefined;
  let again = false;
  const prune = (): void => {
    if (running !== undefined) {
      again = true;
      return;
    }
    running = pruneRotatedLogs(dir, keep, base)
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          prune();
        }
      });
  };
  let watcher: FSWatcher | undefined;
  try {
    // A rotation renames the full file: only renames matter (not every write to the log).
    watcher = watch(dir, { persistent: false }, (event, name) => {
      if (event === "rename" && (name === null || name.startsWith(`${base}.`))) prune();
    });
    watcher.on("error", () => {});
  } catch {
    watcher = undefined;
  }
  const timer = setInterval(prune, 60_000);
  timer.unref();
  prune();
  return {
    close() {
      clearInterval(timer);
      watcher?.close();
    },
  };
}

/** One parsed log line: `[<pid>] <date> <time> [<level>] <message>`. */
interface LogLine {
  readonly pid: number;
  readonly message: string;
}

const linePattern = /^\[(\d+)\] \S+ \S+ \[[A-Z]+\] (.*)$/;

function parseLine(line: string): LogLine | undefined {
  const match = linePattern.exec(line);
  return match === null ? undefined : { pid: Number(match[1]), message: match[2]! };
}

/** The complete lines among the last `maxBytes` of a file (none when it cannot be read). */
async function tailLines(path: string, maxBytes = TAIL_BYTES): Promise<string[]> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch {
    return [];
  }
  try {
    const { size } = await handle.stat();
    const length = Math.min(size, maxBytes);
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, size - length);
    const lines = buffer.subarray(0, bytesRead).toString("utf8").split("\n");
    // The first line is cut when the read did not start at the beginning.
    if (length < size) lines.shift();
    return lines.filter((line) => line !== "");
  } catch {
    return [];
  } finally {
    await handle.close();
  }
}

/** The current file's tail, preceded by the newest rotated copy's when the current one is short. */
async function recentLines(dir: string, base: string): Promise<string[]> {
  const current = await tailLines(join(dir, base));
  const newestRotated = (await rotatedLogFiles(dir, base)).at(-1);
  if (newestRotated === undefined) return current;
  return [...(await tailLines(join(dir, newestRotated))), ...current];
}

/** The last lines the server process `pid` wrote (oldest first, at most `limit`), for diagnostics only. */
export async function serverLogLines(dir: string, pid: number, limit: number, base = SERVER_LOG_FILE): Promise<string[]> {
  const lines = (await recentLines(dir, base)).filter((line) => parseLine(line)?.pid === pid);
  return lines.slice(-Math.max(1, limit));
}

/**
 * Why server process `pid` closed client connection `clientId`, when its
 * log says so (the newest such message wins); undefined otherwise.
 */
export async function clientCloseReason(dir: string, pid: number, clientId: number, base = SERVER_LOG_FILE): Promise<DisconnectReason | undefined> {
  const marker = ` - cid:${clientId} - `;
  const lines = await recentLines(dir, base);
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = parseLine(lines[i]!);
    if (line === undefined || line.pid !== pid) continue;
    const at = line.message.indexOf(marker);
    if (at < 0) continue;
    const reason = classifyServerText(line.message.slice(at + marker.length));
    if (reason !== undefined) return reason;
  }
  return undefined;
}
