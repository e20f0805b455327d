import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";

/**
 * Keeps the embedded nats-server's lifetime tied to Laneway's.
 *
 * The server runs in its own process group, so a Ctrl-C or a signal sent to
 * Laneway's group does not stop it before Laneway has drained its
 * connection. That leaves one gap — Laneway killed outright (SIGKILL, the
 * OOM killer) would orphan the server, which keeps holding the JetStream
 * store and the port — closed twice over:
 *
 * - a watchdog (`sh`, reading a pipe whose only writer is Laneway) sends the
 *   server SIGTERM when that pipe closes, which the kernel does when
 *   Laneway dies however it dies;
 * - a restart finds the predecessor through the server's pid file and stops
 *   it before starting anew, in case the watchdog itself was killed.
 */

/** Starts the watchdog for `pid`; kill the returned process to disarm it. */
export function watchParentLifetime(pid: number): ChildProcess {
  const watchdog = spawn("/bin/sh", ["-c", 'read _ignored; kill -TERM "$1" 2>/dev/null', "laneway-nats-watchdog", String(pid)], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true,
  });
  watchdog.on("error", () => {});
  watchdog.stdin?.on("error", () => {});
  // Neither the watchdog nor its pipe may keep Laneway's event loop alive.
  watchdog.unref();
  (watchdog.stdin as unknown as { _handle?: { unref?: () => void } })?._handle?.unref?.();
  return watchdog;
}

/**
 * Stops a nats-server left running by a killed predecessor: the process
 * named in `pidFile`, only if its command line names `configPath` (so an
 * unrelated process that reused the pid is never touched).
 */
export async function stopStalePredecessor(pidFile: string, configPath: string, timeoutMs = 10_000): Promise<boolean> {
  let pid: number;
  try {
    pid = Number.parseInt((await readFile(pidFile, "utf8")).trim(), 10);
  } catch {
    return false;
  }
  if (!Number.isSafeInteger(pid) || pid <= 1 || !(await commandLineNames(pid, configPath))) return false;
  signal(pid, "SIGCONT");
  signal(pid, "SIGTERM");
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await commandLineNames(pid, configPath))) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  signal(pid, "SIGKILL");
  while (await commandLineNames(pid, configPath)) await new Promise((r) => setTimeout(r, 20));
  return true;
}

async function commandLineNames(pid: number, configPath: string): Promise<boolean> {
  try {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8");
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // A zombie (state Z) has exited; only its parent's wait is pending.
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z" && cmdline.split("\0").includes(configPath);
  } catch {
    return false;
  }
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Already gone.
  }
}

/**
 * Whether process `pid` has ended: gone from /proc, or a zombie (exited,
 * its parent not yet told). The kernel closes a dying process's sockets
 * before it turns zombie, so a peer that reads the end of a connection can
 * ask this at once and be answered correctly.
 */
export async function processHasEnded(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return true;
  }
}
