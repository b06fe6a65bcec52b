// The facilitator process's metrics listener and its gas balance gauge. The v1 contract gives the
// facilitator exactly three endpoints, so /metrics is not added to either of its API
// listeners: it has a port of its own (FACILITATOR_METRICS_PORT, default 9465; 0 = off).
import type { Server } from 'node:http';
import type { JsonRpcProvider } from 'ethers';
import { registerGasBalance } from '../lib/observability/metrics.ts';
import { startMetricsServer, type ExtraMetrics } from '../lib/observability/http.ts';

export async function startFacilitatorMetrics(opts: {
  provider: JsonRpcProvider;
  gasWallet: string;
  env?: NodeJS.ProcessEnv;
  /** Where to listen instead of FACILITATOR_METRICS_PORT (the separate worker's own port). */
  listener?: { port: number; host: string };
  /** The embedded worker's Temporal SDK metrics, served on the same listener. */
  extra?: ExtraMetrics;
}): Promise<Server | null> {
  const env = opts.env ?? process.env;
  registerGasBalance(() => opts.provider.getBalance(opts.gasWallet));
  const port = opts.listener?.port ?? Number(env.FACILITATOR_METRICS_PORT ?? 9465);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error('invalid configuration: FACILITATOR_METRICS_PORT');
  if (port === 0) return null;
  return startMetricsServer(port, opts.listener?.host ?? env.METRICS_HOST ?? '127.0.0.1', opts.extra);
}
