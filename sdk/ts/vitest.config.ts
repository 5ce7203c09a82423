import { defineConfig } from 'vitest/config';

// Unit tests: no network, fake server, fake timers. Fast and deterministic.
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts'],
    environment: 'node',
    testTimeout: 10_000,
  },
});
