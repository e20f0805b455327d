import { defineConfig } from "vitest/config";

// Tests start real nats-server processes and SQLite files; two cores are
// shared by everything, so files run in a small fork pool.
//
// `npm test` runs with --coverage: the lanes core (src/lanes/) is held to
// 90% of its lines, as the lanes specification's CI holds its packages.
// Code that runs only inside `laneway serve` child processes is not counted,
// so the in-process tests carry the gate.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    coverage: {
      provider: "v8",
      include: ["src/lanes/**/*.ts"],
      reporter: ["text-summary", "text"],
      thresholds: { lines: 90 },
    },
  },
});
