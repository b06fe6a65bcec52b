// Prometheus metrics (prom-client). One registry per process: when the API and the worker
// share a process (the tests), they share it too, so every metric is defined exactly once,
// here. Labels are bounded sets (route templates, status codes, error classes, actions);
// never a tenant, user, id, URL path or anything a caller chose.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

export const httpRequests = new Counter({
  name: 'http_requests_total',
  help: 'HTTP requests served, by service, method, route template and status',
  labelNames: ['service', 'method', 'route', 'status'] as const,
  registers: [registry],
});

export const httpDuration = new Histogram({
  name: 'http_request_duration_seconds',
  help: 'HTTP request latency (until the response head is written), by service, method, route template and status',
  labelNames: ['service', 'method', 'route', 'status'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

const upstreamOutcomes = new Counter({
  name: 'gateway_upstream_outcomes_total',
  help: 'Completed upstream calls by mode and error class (`none` when the upstream answered below 400)',
  labelNames: ['mode', 'error_class'] as const,
  registers: [registry],
});

const upstreamLatency = new Histogram({
  name: 'gateway_upstream_latency_seconds',
  help: 'Upstream call latency of completed invocations, by mode',
  labelNames: ['mode'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [registry],
});

// Breakers are per tenant and upstream origin, both chosen by tenants: no label may carry
// either, so the process reports how many breakers are in each state.
const breakerStates = new Gauge({
  name: 'gateway_circuit_breakers',
  help: 'Circuit breakers of this process (one per tenant and upstream origin), by state',
  labelNames: ['state'] as const,
  registers: [registry],
});
for (const state of ['closed', 'half_open', 'open']) breakerStates.set({ state }, 0);

export const readinessChecks = new Counter({
  name: 'gateway_readiness_checks_total',
  help: 'Database and Temporal checks run for /readyz (at most one per second, whatever the probe rate)',
  registers: [registry],
});

export const rateLimitRejections = new Counter({
  name: 'gateway_rate_limit_rejections_total',
  help: 'Requests rejected with 429, by limiter (agent: per-agent invocation limit; analytics: per-caller analytics limit)',
  labelNames: ['limiter'] as const,
  registers: [registry],
});

export const policyDecisions = new Counter({
  name: 'gateway_policy_decisions_total',
  help: 'Policy evaluations by resulting action and what decided it (rule, default, on_error)',
  labelNames: ['action', 'source'] as const,
  registers: [registry],
});

export const settlements = new Counter({
  name: 'settlements_total',
  help: 'Settlements by service (gateway client or facilitator) and outcome',
  labelNames: ['service', 'outcome'] as const,
  registers: [registry],
});

export const failedGasWei = new Counter({
  name: 'facilitator_failed_gas_wei_total',
  help: 'Gas (wei) the gas wallet spent on settlements that reverted on chain after passing simulation, by facilitator account',
  labelNames: ['account'] as const,
  registers: [registry],
});

export const receiptsIssued = new Counter({
  name: 'gateway_receipts_issued_total',
  help: 'Trust receipts signed, by signing key id',
  labelNames: ['kid'] as const,
  registers: [registry],
});

// One series per worker version this process runs (a deployment and its build id: one or two
// per process), so an alert can fire on a version left behind: 0 means it gets no new workflows.
export const workerVersionCurrent = new Gauge({
  name: 'worker_version_current',
  help: "1 when this process's worker version is its Worker Deployment's current version, else 0; by deployment and build id",
  labelNames: ['deployment', 'build_id'] as const,
  registers: [registry],
});

/** A breaker's move between states: from null when created, to null when dropped. */
export function recordBreakerTransition(
  from: 'closed' | 'half_open' | 'open' | null,
  to: 'closed' | 'half_open' | 'open' | null,
): void {
  if (from) breakerStates.dec({ state: from });
  if (to) breakerStates.inc({ state: to });
}

/** One completed upstream call (the worker records transactional ones itself; the streaming route calls this). */
export function recordUpstreamOutcome(
  mode: 'transactional' | 'streaming',
  errorClass: string | null,
  latencyMs: number | null,
): void {
  upstreamOutcomes.inc({ mode, error_class: errorClass ?? 'none' });
  if (latencyMs !== null) upstreamLatency.observe({ mode }, latencyMs / 1000);
}

/**
 * The facilitator's gas wallet balance, read on each scrape (with a deadline, so a slow RPC
 * cannot hang the scrape). Call once per process with the reader for its wallet.
 */
export function registerGasBalance(read: () => Promise<bigint>, timeoutMs = 2_000): void {
  if (registry.getSingleMetric('facilitator_gas_balance_wei')) return;
  new Gauge({
    name: 'facilitator_gas_balance_wei',
    help: 'Gas wallet balance in wei at scrape time (absent when the RPC did not answer in time)',
    registers: [registry],
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
