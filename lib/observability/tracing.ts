// OpenTelemetry tracing, off by default. A process turns it on with `startTracing(env)` before it
// builds its Temporal client, worker or HTTP app: when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, or OTEL_TRACES_ENABLED=true, a tracer provider
// with an OTLP/HTTP (JSON) exporter is registered globally, with the W3C trace-context
// propagator. Otherwise nothing is registered: the OpenTelemetry API stays a no-op, no
// interceptor is installed and `propagation.inject` writes nothing.
//
// Versions: the SDK is the 2.x line; @temporalio/interceptors-opentelemetry 1.24 keeps its own
// 1.x copy for the workflow isolate, whose spans reach the worker through a sink in the 1.x
// shape. `temporalSpanProcessor` adapts them before they join the 2.x pipeline.
import { createRequire } from 'node:module';
import { trace, context, propagation, type SpanContext } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import {
  NodeTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import {
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
  OpenTelemetryWorkflowClientInterceptor,
  makeWorkflowExporter,
} from '@temporalio/interceptors-opentelemetry';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { ActivityInterceptorsFactory, WorkerOptions } from '@temporalio/worker';
import { z } from 'zod';
import { parseEnv } from '../config.ts';

const TracingEnv = z.object({
  OTEL_TRACES_ENABLED: z.enum(['true', 'false']).optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z.string().url().optional(),
  OTEL_SERVICE_NAME: z.string().min(1).optional(),
});

export type TracingSettings = { enabled: boolean; tracesUrl?: string; serviceName: string };

/** Reads the standard OTel variables; an explicit OTEL_TRACES_ENABLED=false wins over an endpoint. */
export function tracingSettings(env: NodeJS.ProcessEnv, defaultServiceName: string): TracingSettings {
  const e = parseEnv(TracingEnv, env);
  const endpoint = e.OTEL_EXPORTER_OTLP_ENDPOINT;
  // The signal-specific variable is the full URL; the generic one is a base the path is appended to.
  const tracesUrl =
    e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? (endpoint ? `${endpoint.replace(/\/+$/, '')}/v1/traces` : undefined);
  const enabled = e.OTEL_TRACES_ENABLED === 'true' || (e.OTEL_TRACES_ENABLED !== 'false' && tracesUrl !== undefined);
  return { enabled, tracesUrl, serviceName: e.OTEL_SERVICE_NAME ?? defaultServiceName };
}

type Active = { provider: NodeTracerProvider; processor: SpanProcessor; resource: Resource };
let active: Active | null = null;

/** Whether this process has a tracer provider (decides which interceptors to install). */
export function tracingActive(): boolean {
  return active !== null;
}

/**
 * Starts tracing when the environment asks for it; returns whether it did. Idempotent: a process
 * running the API and the worker together starts one provider.
 */
export function startTracing(env: NodeJS.ProcessEnv, defaultServiceName: string): boolean {
  if (active) return true;
  const settings = tracingSettings(env, defaultServiceName);
  if (!settings.enabled) return false;
  const resource = resourceFromAttributes({ 'service.name': settings.serviceName });
  // No url: the exporter falls back to http://localhost:4318/v1/traces (OTEL_TRACES_ENABLED alone).
  const exporter = new OTLPTraceExporter(settings.tracesUrl ? { url: settings.tracesUrl } : {});
  const processor = new BatchSpanProcessor(exporter);
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  // Trace context only: no baggage propagator, so the gateway adds no header a caller did not send.
  provider.register({ propagator: new W3CTraceContextPropagator() });
  active = { provider, processor, resource };
  return true;
}

/** Sends what is buffered (tests, and before a process exits). */
export async function flushTracing(): Promise<void> {
  await active?.provider.forceFlush();
}

/** Flushes, shuts the provider down and returns the global API to its no-op state. */
export async function stopTracing(): Promise<void> {
  if (!active) return;
  const { provider } = active;
  active = null;
  await provider.shutdown().catch(() => undefined);
  trace.disable();
  context.disable();
  propagation.disable();
}

/** The Temporal client's interceptors: the workflow start becomes a span whose context travels in the workflow's headers. */
export function temporalClientInterceptors(): WorkflowClientInterceptor[] {
  return active ? [new OpenTelemetryWorkflowClientInterceptor()] : [];
}

/**
 * The workflow interceptor module that makes the workflow spans inside the isolate. A prebuilt
 * workflow bundle (`npm run build`) always includes it, so one bundle serves tracing on and off.
 */
export const tracingWorkflowModules: readonly string[] = [
  createRequire(import.meta.url).resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors'),
];

/**
 * With tracing off, a bundle built with `tracingWorkflowModules` still hands its workflow spans
 * to the `exporter` sink: this one drops them (an unregistered sink would be an error per call).
 */
const droppedWorkflowSpans = { exporter: { export: { fn: () => undefined, callDuringReplay: false } } };

/**
 * The worker's part: activity interceptors (a span per activity run, continuing the workflow's
 * context from the activity headers), the workflow interceptor module for the bundle (spans
 * for the workflow run and the activities it schedules, made inside the isolate) and the sink
 * that carries those workflow spans out to this process's exporter. When tracing is off: no
 * interceptor, and a sink that drops what a prebuilt traced bundle sends it.
 */
export function temporalWorkerTracing(): {
  activity: ActivityInterceptorsFactory[];
  workflowModules: string[];
  sinks: WorkerOptions['sinks'];
} {
  if (!active) return { activity: [], workflowModules: [], sinks: droppedWorkflowSpans };
  const processor = temporalSpanProcessor(active.processor);
  return {
    activity: [
      (ctx) => ({
        inbound: new OpenTelemetryActivityInboundInterceptor(ctx),
        outbound: new OpenTelemetryActivityOutboundInterceptor(ctx),
      }),
    ],
    workflowModules: [...tracingWorkflowModules],
    // The interceptors package types its arguments with its own 1.x SDK copy.
    sinks: { exporter: makeWorkflowExporter(processor as never, active.resource as never) },
  };
}

/** Spans from the workflow isolate, as the 1.x SDK shapes them. */
type LegacySpan = ReadableSpan & {
  parentSpanId?: string;
  instrumentationLibrary?: { name: string; version?: string; schemaUrl?: string };
};

/**
 * The 2.x exporter reads `parentSpanContext` and `instrumentationScope`; the workflow isolate's
 * 1.x spans carry `parentSpanId` and `instrumentationLibrary`. Without this the workflow spans
 * would lose their parent (or fail to serialise).
 */
function temporalSpanProcessor(next: SpanProcessor): SpanProcessor {
  return {
    onStart: () => undefined,
    onEnd(span) {
      const legacy = span as LegacySpan;
      if (legacy.instrumentationScope) return next.onEnd(span);
      const own = span.spanContext();
      const parentSpanContext: SpanContext | undefined = legacy.parentSpanId
        ? { traceId: own.traceId, spanId: legacy.parentSpanId, traceFlags: own.traceFlags }
        : undefined;
      next.onEnd({
        ...span,
        parentSpanContext,
        instrumentationScope: legacy.instrumentationLibrary ?? { name: '@temporalio/interceptor-workflow' },
      });
    },
    forceFlush: () => next.forceFlush(),
    shutdown: async () => undefined,
  };
}
