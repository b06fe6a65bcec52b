// Prometheus metrics (prom-client): the means every process shares. One registry per process,
// prom-client's default process metrics, the HTTP metrics the shared middleware records
// (lib/observability/http.ts), and the helpers each service defines its own metrics with
// (gateway/metrics.ts, api/metrics.ts, facilitator/metrics.ts). Labels are bounded sets (route
// templates, status codes, error classes, actions); never a tenant, user, id, URL path or
// anything a caller chose.
import {
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type CounterConfiguration,
  type GaugeConfiguration,
  type HistogramConfiguration,
} from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

// A metric is defined once per process: when two services share one (the tests run the API,
// the gateway's worker and the facilitator together) and both define a metric they both feed
// (settlements_total), the second definition gets the first's metric.

/** A counter of the process registry, or the one already defined under its name. */
export function counter<T extends string>(config: Omit<CounterConfiguration<T>, 'registers'>): Counter<T> {
  return (
    (registry.getSingleMetric(config.name) as Counter<T> | undefined) ??
    new Counter({ ...config, registers: [registry] })
  );
}

/** A gauge of the process registry, or the one already defined under its name. */
export function gauge<T extends string>(config: Omit<GaugeConfiguration<T>, 'registers'>): Gauge<T> {
  return (
    (registry.getSingleMetric(config.name) as Gauge<T> | undefined) ?? new Gauge({ ...config, registers: [registry] })
  );
}

/** A histogram of the process registry, or the one already defined under its name. */
export function histogram<T extends string>(config: Omit<HistogramConfiguration<T>, 'registers'>): Histogram<T> {
  return (
    (registry.getSingleMetric(config.name) as Histogram<T> | undefined) ??
    new Histogram({ ...config, registers: [registry] })
  );
}

export const httpRequests = counter({
  name: 'http_requests_total',
  help: 'HTTP requests served, by service, method, route template and status',
  labelNames: ['service', 'method', 'route', 'status'] as const,
});

export const httpDuration = histogram({
  name: 'http_request_duration_seconds',
  help: 'HTTP request latency (until the response head is written), by service, method, route template and status',
  labelNames: ['service', 'method', 'route', 'status'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
});
