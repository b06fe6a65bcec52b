// The Temporal client used by the API (starting workflows) and by tests and scripts. With
// tracing on (api/observability/tracing.ts, started before this), each workflow start is a
// span whose context travels to the workflow in its headers.
import { Client, Connection } from '@temporalio/client';
import { temporalClientInterceptors } from '../api/observability/tracing.ts';

export async function connectClient(address: string, namespace: string): Promise<Client> {
  const connection = await Connection.connect({ address, connectTimeout: '5 seconds' });
  return new Client({ connection, namespace, interceptors: { workflow: temporalClientInterceptors() } });
}
