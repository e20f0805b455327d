import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

/**
 * The console's assets: `console/index.html`, `console/console.css` and
 * `app.js`, the bundle of `console/src/main.ts` (the generated client of
 * gen/ on @connectrpc/connect-web) that esbuild builds in memory the first
 * time it is asked for. Nothing is written to disk, so `npm start` serves
 * the console of the checked-out sources without a build step; the build
 * takes about a second once per process.
 */

export interface ConsoleAsset {
  readonly contentType: string;
  readonly body: Uint8Array;
}

export interface ConsoleAssets {
  /** The asset at a path under /console/ ("" is the page); undefined when there is none. */
  get(path: string): Promise<ConsoleAsset | undefined>;
}

const root = fileURLToPath(new URL("../../../console/", import.meta.url));

export function consoleAssets(directory: string = root): ConsoleAssets {
  let bundle: Promise<Uint8Array> | undefined;
  const statics: Record<string, { file: string; contentType: string }> = {
    "": { file: "index.html", contentType: "text/html; charset=utf-8" },
    "index.html": { file: "index.html", contentType: "text/html; charset=utf-8" },
    "console.css": { file: "console.css", contentType: "text/css; charset=utf-8" },
  };
  return {
    async get(path) {
      if (path === "app.js") {
        bundle ??= build(directory).catch((error: unknown) => {
          bundle = undefined; // a later request tries again
          throw error;
        });
        return { contentType: "text/javascript; charset=utf-8", body: await bundle };
      }
      const known = statics[path];
      if (known === undefined) return undefined;
      return { contentType: known.contentType, body: await readFile(directory + known.file) };
    },
  };
}

async function build(directory: string): Promise<Uint8Array> {
  const esbuild = await import("esbuild");
  const result = await esbuild.build({
    entryPoints: [directory + "src/main.ts"],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    target: "es2022",
    minify: true,
    legalComments: "none",
    logLevel: "silent",
  });
  return result.outputFiles[0]!.contents;
}
