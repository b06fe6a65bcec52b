// The bare baseline of bench/throughput.ts: a workflow that runs one activity, which POSTs the
// body to the same upstream the gateway's agent points at and returns the answer's status.
// The activity options are the gateway's performInvocation ones (workflows/invocation.ts), so
// the two differ only in what the gateway adds: the API, the stored body, the rows, the search
// attributes, the activity's checks and observability.
import { proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
import { InvocationStatus } from '../temporal/search-attributes.ts';
import { invocationActivityOptions } from '../workflows/invocation.ts';

export type EchoInput = {
  url: string;
  body: string;
  /** Diagnostic (bench:throughput --bare-attributes): upsert the status before and after, as the gateway's workflow does. */
  upserts?: boolean;
};
export type EchoActivities = { echo(input: EchoInput): Promise<number> };

const { echo } = proxyActivities<EchoActivities>(invocationActivityOptions);

export async function EchoWorkflow(input: EchoInput): Promise<number> {
  if (input.upserts) upsertSearchAttributes([{ key: InvocationStatus, value: 'running' }]);
  const status = await echo({ url: input.url, body: input.body });
  if (input.upserts) upsertSearchAttributes([{ key: InvocationStatus, value: 'succeeded' }]);
  return status;
}
