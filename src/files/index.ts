/** Files written whole or not at all, with one fsync rule (private-files.ts). */
export { createPrivateFile, createPrivateFileSync, errnoCode, readOptionalFile, writePrivateFile } from "./private-files.js";
