import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, test } from "vitest";
import { coreSettings } from "../src/server/cores/index.js";
import { loadStartupConfig } from "../src/startup/index.js";
import { silentLogger } from "../src/log/logger.js";
import { LanewayServer } from "../src/server/laneway-server.js";
import { repoRoot } from "./helpers/laneway.js";

/**
 * The README and docs/ cannot rot: their examples run here against a real
 * Laneway started exactly like `npm start` (demo mode, embedded
 * nats-server), one fresh server per page.
 *
 * - A ```` ```sh test ```` block runs with bash in the repository (so
 *   `npx laneway` and `npx buf` resolve as they do for a reader), with the
 *   documented address `http://127.0.0.1:7600` replaced by the test
 *   server's and `.laneway/` by its data directory. When the next
 *   block is ```` ```json ````, the output must contain it (objects may have
 *   more fields; arrays match element by element).
 * - A ```` ```ts <path> ```` block must be exactly the file at that path
 *   (an example in examples/), which is run with node and tsx under the
 *   `laneway-source` condition (so `laneway/client` and
 *   `laneway/participant` resolve to the sources, as the installed package
 *   resolves them to its build); a following ```` ```text ```` block is its
 *   expected output.
 * - A ```` ```ts fragment ```` block is a piece of code that is not run
 *   (a shape, a signature). Every other TypeScript or JavaScript block
 *   fails this test: a block is either run or marked a fragment.
 */

const run = promisify(execFile);

interface Block {
  readonly info: string;
  readonly body: string;
  readonly line: number;
}

function blocksOf(markdown: string): Block[] {
  const blocks: Block[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i] !== "```"; i++) body.push(lines[i]!);
    blocks.push({ info: open[1]!.trim(), body: body.join("\n") + "\n", line: start + 1 });
  }
  return blocks;
}

/** Blocks of TypeScript or JavaScript that are neither run (`ts <path>`) nor marked `ts fragment`. */
function unmarkedCodeBlocks(markdown: string): Block[] {
  return blocksOf(markdown).filter((b) => {
    const [language, ...rest] = b.info.split(/\s+/);
    if (!["ts", "typescript", "tsx", "js", "javascript", "mjs"].includes(language ?? "")) return false;
    return !(language === "ts" && rest.length === 1 && (rest[0] === "fragment" || rest[0]!.startsWith("examples/")));
  });
}

const isExample = (b: Block) => b.info.startsWith("ts examples/");

const pages = ["README.md", ...(await readdir(join(repoRoot, "docs"))).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
const scratch: string[] = [];

afterAll(async () => {
  for (const dir of scratch) await rm(dir, { recursive: true, force: true });
});

async function startDemo(): Promise<{ server: LanewayServer; cwd: string }> {
  const cwd = await mkdtemp(join(tmpdir(), "laneway-docs-"));
  scratch.push(cwd);
  const startup = await loadStartupConfig(["--demo", "--listen", "127.0.0.1:0"], { PATH: process.env.PATH }, { cwd, cores: coreSettings });
  const server = await LanewayServer.start({ startup, logger: silentLogger });
  return { server, cwd };
}

for (const page of pages) {
  const markdown = await readFile(join(repoRoot, page), "utf8");
  const blocks = blocksOf(markdown);
  const runnable = blocks.filter((b) => b.info === "sh test" || isExample(b));
  if (runnable.length === 0) continue;

  describe(page, () => {
    let demo: { server: LanewayServer; cwd: string };

    // A hang guard, not a speed bound: each block starts processes (npx,
    // node with tsx), which on a busy machine take many seconds each.
    test("its examples run as printed", { timeout: 60_000 + 30_000 * runnable.length }, async () => {
      demo = await startDemo();
      try {
        const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: demo.cwd, LANEWAY_ADDRESS: demo.server.url };
        for (let i = 0; i < blocks.length; i++) {
          const block = blocks[i]!;
          const next = blocks[i + 1];
          const where = `${page}:${block.line}`;
          if (block.info === "sh test") {
            const script = block.body.replaceAll("http://127.0.0.1:7600", demo.server.url).replaceAll(".laneway/", `${demo.cwd}/.laneway/`);
            const { stdout } = await run("bash", ["-euo", "pipefail", "-c", script], { cwd: repoRoot, env }).catch((error: { stderr?: string }) => {
              throw new Error(`${where} failed: ${error.stderr ?? String(error)}`);
            });
            if (next?.info === "json") {
              expect(JSON.parse(stdout), where).toMatchObject(JSON.parse(next.body));
            }
          } else if (isExample(block)) {
            const path = block.info.slice(3).trim();
            expect(block.body, `${where} must equal ${path}`).toBe(await readFile(join(repoRoot, path), "utf8"));
            const tokens = Object.fromEntries(
              (await readFile(join(demo.cwd, ".laneway/tokens.env"), "utf8"))
                .trim()
                .split("\n")
                .map((l) => l.split("=", 2) as [string, string]),
            );
            const { stdout } = await run(process.execPath, ["--conditions=laneway-source", "--import", "tsx", join(repoRoot, path)], {
              cwd: repoRoot,
              env: { ...env, ...tokens },
            }).catch((error: { stderr?: string }) => {
              throw new Error(`${where} failed: ${error.stderr ?? String(error)}`);
            });
            if (next?.info === "text") expect(stdout, where).toBe(next.body);
          }
        }
      } finally {
        await demo.server.close();
      }
    });
  });
}

test("every TypeScript block of the README and docs/ is run or marked ```ts fragment", async () => {
  const unmarked: string[] = [];
  for (const page of pages) {
    for (const block of unmarkedCodeBlocks(await readFile(join(repoRoot, page), "utf8"))) unmarked.push(`${page}:${block.line} (\`\`\`${block.info})`);
  }
  expect(unmarked).toEqual([]);
});

test("a bare ```ts block is caught; a named example and a fragment are not", () => {
  const page = ["```ts", "await lanes.getRegistry({});", "```", "```ts fragment", "type A = 1;", "```", "```ts examples/registry.ts", "x", "```", "```js", "x", "```"].join("\n");
  expect(unmarkedCodeBlocks(page).map((b) => [b.line, b.info])).toEqual([
    [1, "ts"],
    [10, "js"],
  ]);
});

test("every example in examples/ is shown and run by a page", async () => {
  const shown = new Set<string>();
  for (const page of pages) for (const block of blocksOf(await readFile(join(repoRoot, page), "utf8"))) if (isExample(block)) shown.add(block.info.slice(3));
  const examples = (await readdir(join(repoRoot, "examples"))).filter((f) => f.endsWith(".ts")).map((f) => `examples/${f}`);
  expect(examples.filter((e) => !shown.has(e))).toEqual([]);
});
