import { defineConfig } from 'vitest/config';

// Integration tests: a real herald process per file (HERALD_BIN), so files run one at a time.
export default defineConfig({
  test: {
    include: ['test/integration/**/*.test.ts'],
    environment: 'node',
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 60_000,
  },
});
