// An accepted transactional call's workflow, read through Temporal. The 202 follows the accept
// commit and the start travels beside it (docs/PROXY.md, the accept outbox), so right after a
// 202 the workflow may not exist yet: these wait for it to.
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import type { PolicyDecisionRetentionWorkflow, RetentionInput } from '../../workflows/retention.ts';
import { stack } from './stack.ts';
import { waitFor } from './wait.ts';

/** Resolves once the workflow `id` exists (up to `timeoutMs`), with its handle. */
export async function startedWorkflow(id: string, client: Client = stack().temporal, timeoutMs = 10_000) {
  const handle = client.workflow.getHandle(id);
  await waitFor(
    () =>
      handle.describe().then(
        () => true,
        (err: Error) => {
          if (err.name !== 'WorkflowNotFoundError') throw err;
          return false;
        },
      ),
    { timeoutMs, everyMs: 50, what: `workflow ${id} to exist` },
  );
  return handle;
}

/** The result of the workflow `id`, once it exists. */
export async function workflowResult(id: string, client: Client = stack().temporal): Promise<any> {
  return (await startedWorkflow(id, client)).result();
}

/**
 * One run of the retention workflow (workflows/retention.ts) on the stack's worker with `input`
 * (workflow id `{name}-…`), awaited, then its history replayed against the workflow bundle.
 */
export async function retentionRun(name: string, input: RetentionInput): Promise<void> {
  const s = stack();
  const handle = await s.temporal.workflow.start<typeof PolicyDecisionRetentionWorkflow>(
    'PolicyDecisionRetentionWorkflow',
    { taskQueue: s.config.temporal.taskQueue, workflowId: `${name}-${randomUUID()}`, args: [input] },
  );
  await handle.result();
  await Worker.runReplayHistory({ workflowBundle: s.workflowBundle }, await handle.fetchHistory(), name);
}
