// Mocha root hooks: one stack per test run, never one per test.
import { Runtime, makeTelemetryFilterString } from '@temporalio/worker';
import { startStack, stopStack } from './support/stack.ts';

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(240_000);
    // Keep the SDK's own logs out of the test report unless asked for.
    if (!process.env.TEST_VERBOSE) {
      Runtime.install({
        logger: {
          log: () => undefined,
          trace: () => undefined,
          debug: () => undefined,
          info: () => undefined,
          warn: () => undefined,
          error: () => undefined,
        },
        telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } },
      });
    }
    await startStack();
  },
  async afterAll(this: Mocha.Context) {
    this.timeout(60_000);
    await stopStack();
  },
};
