// The Kweb worker's entry point. A worker thread cannot load a .ts file by
// itself (it does not inherit vitest's transform, and under bin/laneway.js
// tsx is registered only on the main thread), so this plain module
// registers tsx's loader in the worker and then imports the real worker.
import { register } from "tsx/esm/api";

register();
await import("./kweb-worker.ts");
