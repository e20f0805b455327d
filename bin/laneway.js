#!/usr/bin/env node
// The `laneway` command: runs the TypeScript sources through tsx's loader,
// so the installed package needs no separate build step.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../src/cli/main.ts");
await main();
