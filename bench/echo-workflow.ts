// The bare baseline of bench/throughput.ts: a workflow that runs one activity, which POSTs the
// body to the same upstream the gateway's agent points at and returns the answer's status.
// The activity options are the gateway's performInvocation ones (workflows/invocation.ts), so
// the two differ only in what the gateway adds: the API, the stored body, the rows, the search
// attributes, the activity's checks and observability.
import { proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
import { InvocationStatus } from '../temporal/search-attributes.ts';

export type EchoInput = {
  url: string;
  body: string;
  /** Diagnostic (bench:throughput --bare-attributes): upsert the status before and after, as the gateway's workflow does. */
  upserts?: boolean;
};
export type EchoActivities = { echo(input: EchoInput): Promise<number> };

const { echo } = proxyActivities<EchoActivities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '10 seconds',
  retry: {
    initialInterval: '200 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '10 seconds',
    maximumAttempts: 20,
  },
});

export async function EchoWorkflow(input: EchoInput): Promise<number> {
  if (input.upserts) upsertSearchAttributes([{ key: InvocationStatus, value: 'running' }]);
  const status = await echo({ url: input.url, body: input.body });
  if (input.upserts) upsertSearchAttributes([{ key: InvocationStatus, value: 'succeeded' }]);
  return status;
}
