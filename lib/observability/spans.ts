// The gateway's own spans: one server span per HTTP request (API and facilitator) and one client
// span per upstream call, whose context is what the upstream receives as `traceparent`.
// Attributes are bounded, non-secret facts: method, route template, status, host and port,
// ids the gateway made. Never a URL path or query, a header value, a body or a credential.
// With tracing off (lib/observability/tracing.ts) both are pass-throughs.
import { SpanKind, SpanStatusCode, context, propagation, trace, type Span } from '@opentelemetry/api';
import type { Context, Next } from 'koa';
import { tracingActive } from './tracing.ts';
import { UNMATCHED, routeTemplate } from './route.ts';

const tracer = trace.getTracer('agent-gateway');

/** The trace id of the active span, for log lines (undefined with tracing off). */
export function activeTraceId(): string | undefined {
  const span = trace.getSpan(context.active());
  return span?.isRecording() ? span.spanContext().traceId : undefined;
}

function routeOf(ctx: Context): string | undefined {
  const route = routeTemplate(ctx);
  return route === UNMATCHED ? undefined : route;
}

/** Koa middleware: continues the caller's W3C trace (traceparent/tracestate) with a server span. */
export function traceRequests(service: string) {
  return async function traceRequest(ctx: Context, next: Next): Promise<void> {
    if (!tracingActive()) return next();
    const parent = propagation.extract(context.active(), ctx.req.headers);
    const span = tracer.startSpan(
      ctx.method,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': ctx.method, 'gateway.service': service } },
      parent,
    );
    try {
      await context.with(trace.setSpan(parent, span), next);
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw err;
    } finally {
      const route = routeOf(ctx);
      span.updateName(route ? `${ctx.method} ${route}` : ctx.method);
      if (route) span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', ctx.status);
      if (ctx.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      const requestId = ctx.state.requestId as string | undefined;
      if (requestId) span.setAttribute('gateway.request_id', requestId);
      const invocationId = ctx.response.get('X-Gateway-Invocation-ID');
      if (invocationId) span.setAttribute('gateway.invocation_id', invocationId);
      span.end();
    }
  };
}

/**
 * Runs an outgoing HTTP call (to an upstream, to a facilitator) inside a client span and gives
 * it the headers to send: with tracing on, `traceparent` (and `tracestate` when the trace has
 * one) are the client span's, replacing what the caller sent (the caller's trace is continued,
 * not forwarded raw); with tracing off the headers are returned as they are, so a caller's own
 * traceparent reaches the upstream unchanged.
 */
export async function traceClientCall<T extends { status: number } | { statusCode: number }>(
  target: string,
  method: string,
  headers: Record<string, string>,
  call: (headers: Record<string, string>, span: Span | null) => Promise<T>,
): Promise<T> {
  if (!tracingActive()) return call(headers, null);
  const url = new URL(target);
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  return tracer.startActiveSpan(
    method,
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'http.request.method': method,
        'server.address': url.hostname,
        'server.port': port,
        'url.scheme': url.protocol.replace(':', ''),
      },
    },
    async (span) => {
      const out = { ...headers };
      propagation.inject(context.active(), out);
      try {
        const result = await call(out, span);
        const status = 'status' in result ? result.status : result.statusCode;
        span.setAttribute('http.response.status_code', status);
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        return result;
      } catch (err) {
        const errorClass = (err as { errorClass?: unknown }).errorClass;
        span.setAttribute('error.type', typeof errorClass === 'string' ? errorClass : 'error');
        span.setStatus({ code: SpanStatusCode.ERROR });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}
