// Observability settings. Metrics: every process serves /metrics on a listener of its own, on
// METRICS_HOST (loopback by default), never on the public API port (0 turns a listener off).
// Tracing: off unless an OTLP endpoint is configured.
import { z } from 'zod';
import { parseEnv } from '../config.ts';

const ObservabilityEnv = z.object({
  WORKER_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(9464),
  API_METRICS_PORT: z.coerce.number().int().min(0).max(65535).default(9466),
  METRICS_HOST: z.string().default('127.0.0.1'),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  OTEL_SERVICE_NAME: z.string().optional(),
});

export type ObservabilityConfig = {
  workerMetricsPort: number;
  apiMetricsPort: number;
  metricsHost: string;
  otlpEndpoint?: string;
  serviceName?: string;
};

export function loadObservabilityConfig(env: NodeJS.ProcessEnv): ObservabilityConfig {
  const e = parseEnv(ObservabilityEnv, env);
  return {
    workerMetricsPort: e.WORKER_METRICS_PORT,
    apiMetricsPort: e.API_METRICS_PORT,
    metricsHost: e.METRICS_HOST,
    otlpEndpoint: e.OTEL_EXPORTER_OTLP_ENDPOINT,
    serviceName: e.OTEL_SERVICE_NAME,
  };
}
