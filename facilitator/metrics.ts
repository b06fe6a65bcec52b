// The facilitator's own metrics (docs/OBSERVABILITY.md), defined with
// lib/observability/metrics.ts's helpers, and the process's metrics listener with its gas
// balance gauge. The v1 contract gives the facilitator exactly three endpoints, so /metrics is
// not added to either of its API listeners: it has a port of its own
// (FACILITATOR_METRICS_PORT, default 9465; 0 = off).
import type { Server } from 'node:http';
import type { JsonRpcProvider } from 'ethers';
import { counter, gauge, registry } from '../lib/observability/metrics.ts';
import { startMetricsServer, type ExtraMetrics } from '../lib/observability/http.ts';

// The gateway counts the same metric under service="gateway" (gateway/metrics.ts).
export const settlements = counter({
  name: 'settlements_total',
  help: 'Settlements by service (gateway client or facilitator) and outcome',
  labelNames: ['service', 'outcome'] as const,
});

export const failedGasWei = counter({
  name: 'facilitator_failed_gas_wei_total',
  help: "Gas (wei) the gas wallet spent on settlements that reverted on chain after passing simulation, by facilitator account and the failed-gas budget it was charged to (payers: what the account's payers signed; own: its batch-settlement claims and settles)",
  labelNames: ['account', 'budget'] as const,
});

/**
 * The gas wallet balance, read on each scrape (with a deadline, so a slow RPC cannot hang the
 * scrape). The first reader a process registers is the one read.
 */
function registerGasBalance(read: () => Promise<bigint>, timeoutMs = 2_000): void {
  if (registry.getSingleMetric('facilitator_gas_balance_wei')) return;
  gauge({
    name: 'facilitator_gas_balance_wei',
    help: 'Gas wallet balance in wei at scrape time (absent when the RPC did not answer in time)',
    async collect() {
      this.reset();
      const balance = await Promise.race([
        read(),
        new Promise<null>((r) => setTimeout(() => r(null), timeoutMs).unref()),
      ]).catch(() => null);
      if (balance !== null) this.set(Number(balance));
    },
  });
}

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
