// The tuning every worker of the project runs with, apart from what it runs. bench/throughput.ts
// runs its bare baseline worker with the same options, so a comparison is between workflows,
// not settings.
import type { WorkerOptions } from '@temporalio/worker';

export const workerTuning = {
  maxCachedWorkflows: 1000,
  shutdownForceTime: '10 seconds',
} satisfies Partial<WorkerOptions>;
