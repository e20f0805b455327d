/**
 * Another process holding a SQLite file's write lock, as a backup job or a
 * `sqlite3` shell could: a separate node process opens the file, runs BEGIN
 * IMMEDIATE, says so on stdout, and holds the lock until it is told to let
 * go (or is killed).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { repoRoot } from "./laneway.js";

const script = `
import Database from "better-sqlite3";
const db = new Database(process.argv[1], { timeout: 30000 });
db.exec("BEGIN IMMEDIATE");
process.stdout.write("locked\\n");
process.stdin.resume();
process.stdin.on("end", () => { db.exec("ROLLBACK"); db.close(); process.exit(0); });
`;

export interface ExternalLock {
  readonly pid: number;
  /** Rolls back and lets the process exit; resolves once it has. */
  release(): Promise<void>;
}

/** Starts the process and resolves once it holds the write lock of `path`. */
export async function holdWriteLockInProcess(path: string): Promise<ExternalLock> {
  const child: ChildProcess = spawn(process.execPath, ["--input-type=module", "-e", script, path], {
    cwd: repoRoot,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let out = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (chunk: string) => {
      out += chunk;
      if (out.includes("locked\n")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`the lock holder exited with ${code} before locking`)));
  });
  return {
    pid: child.pid!,
    async release() {
      child.stdin!.end();
      await exited;
    },
  };
}
