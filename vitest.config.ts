import { defineConfig } from "vitest/config";

// Tests start real nats-server processes and SQLite files; two cores are
// shared by everything, so files run in a small fork pool.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
