// The Temporal client used by the API (starting workflows) and by tests and scripts. With
// tracing on (lib/observability/tracing.ts, started before this), each workflow start is a
// span whose context travels to the workflow in its headers.
import { Client, Connection } from '@temporalio/client';
import { temporalClientInterceptors } from '../lib/observability/tracing.ts';
import type { TemporalConnectionOptions } from '../lib/temporal-connection.ts';

/** A client on `target`: an address (plain gRPC) or the full settings (TLS, API key). */
export async function connectClient(target: string | TemporalConnectionOptions, namespace: string): Promise<Client> {
  const connection = await WatchedConnection.connect({
    ...(typeof target === 'string' ? { address: target } : target),
    connectTimeout: '5 seconds',
    // After Temporal comes back, reconnect within ~1 s. grpc-js backs off up to 2 minutes by
    // default, so a 45 s outage left the API answering 503 for ~25 s more after Temporal was up
    // (found by `npm run chaos -- temporal-restart`, docs/CHAOS.md); until it reconnects the API
    // refuses transactional calls at once (temporalKnownDown), so the cap is that window.
    channelArgs: { 'grpc.initial_reconnect_backoff_ms': 500, 'grpc.max_reconnect_backoff_ms': 1_000 },
  });
  return new Client({ connection, namespace, interceptors: { workflow: temporalClientInterceptors() } });
}

/** grpc-js `connectivityState.TRANSIENT_FAILURE` (grpc-js is the SDK's dependency, not ours). */
const TRANSIENT_FAILURE = 3;

/** A connection that can tell whether its gRPC channel is failing (the SDK keeps the channel to itself). */
class WatchedConnection extends Connection {
  channelFailing(): boolean {
    return this.client.getChannel().getConnectivityState(false) === TRANSIENT_FAILURE;
  }
}

/**
 * True while the client's channel has failed to connect and not connected since (grpc-js keeps
 * the channel in TRANSIENT_FAILURE, reconnecting in the background every 0.5–1 s, until a
 * connection succeeds): a call made now would only wait out its deadline. A channel that is
 * idle or was never used is not known down, so the first call after an outage still tries.
 */
export function temporalKnownDown(client: Client): boolean {
  const connection = client.connection;
  return connection instanceof WatchedConnection && connection.channelFailing();
}

/** A call to Temporal that did not settle within its deadline (it may still have reached the server). */
class CallDeadlineExceeded extends Error {
  constructor(ms: number) {
    super(`no answer from Temporal within ${ms} ms`);
    this.name = 'CallDeadlineExceeded';
  }
}

/**
 * Runs `fn`'s calls to Temporal with a deadline `ms` from now: the SDK retries an unavailable
 * server for ~20 s by default. The gRPC deadline ends the attempt in flight; the timer ends the
 * wait, since the SDK's back-off between attempts runs past the deadline (measured: a 2 s
 * deadline settled after 2.0–3.3 s). A call cut off this way may still have reached the server.
 */
export async function withCallDeadline<T>(client: Client, ms: number, fn: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CallDeadlineExceeded(ms)), ms);
  });
  try {
    return await Promise.race([client.connection.withDeadline(Date.now() + ms, fn), expired]);
  } finally {
    clearTimeout(timer);
  }
}
