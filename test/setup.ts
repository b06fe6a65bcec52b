// Mocha root hooks: one stack per test run, never one per test. A shard of the suite
// (test/support/shard.ts) calls the same two functions around the files it runs.
import { Runtime, makeTelemetryFilterString } from '@temporalio/worker';
import { startStack, stopStack } from './support/stack.ts';
import { silentLogger } from './support/facilitator.ts';

let runtimeInstalled = false;

/** Keeps the SDK's own logs out of the test report unless asked for, then starts the stack. */
export async function startRun(): Promise<void> {
  // Once per process: a shard that starts its stack again after a failed start installs nothing twice.
  if (!process.env.TEST_VERBOSE && !runtimeInstalled) {
    runtimeInstalled = true;
    Runtime.install({
      logger: silentLogger,
      telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } },
    });
  }
  await startStack();
}

export const stopRun = stopStack;

export const mochaHooks = {
  async beforeAll(this: Mocha.Context) {
    this.timeout(240_000);
    await startRun();
  },
  async afterAll(this: Mocha.Context) {
    this.timeout(60_000);
    await stopRun();
  },
};
