// The Temporal client used by the API (starting workflows) and by tests and scripts. With
// tracing on (api/observability/tracing.ts, started before this), each workflow start is a
// span whose context travels to the workflow in its headers.
import { Client, Connection } from '@temporalio/client';
import { temporalClientInterceptors } from '../api/observability/tracing.ts';

export async function connectClient(address: string, namespace: string): Promise<Client> {
  const connection = await Connection.connect({
    address,
    connectTimeout: '5 seconds',
    // After Temporal comes back, reconnect within ~2 s. grpc-js backs off up to 2 minutes by
    // default, so a 45 s outage left the API answering 503 for ~25 s more after Temporal was up
    // (found by `npm run chaos -- temporal-restart`, docs/CHAOS.md).
    channelArgs: { 'grpc.initial_reconnect_backoff_ms': 500, 'grpc.max_reconnect_backoff_ms': 2_000 },
  });
  return new Client({ connection, namespace, interceptors: { workflow: temporalClientInterceptors() } });
}
