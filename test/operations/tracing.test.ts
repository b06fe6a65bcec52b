// OpenTelemetry traces end to end, exported over real OTLP/HTTP (JSON) to a receiver this test
// runs. Tracing is per process, so the traced gateway is its own: a worker PROCESS
// (temporal/gateway-worker-main.ts, tracing turned on by OTEL_EXPORTER_OTLP_ENDPOINT alone, on
// a task queue of its own) and an API instance in this process started with `startTracing`
// (the same call api/main.ts makes) and stopped at the end, so the shared stack's other tests
// run untraced. Checked: the upstream receives a traceparent of the caller's trace id made by
// the gateway (not the caller's raw header), and the exported spans (API server span, workflow
// start, workflow run, activity schedule and run, upstream client span) form one trace with the
// right parents. With tracing off (the shared stack) the caller's traceparent reaches the
// upstream unchanged and the gateway adds none.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import type { Client } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { stack } from '../support/stack.ts';
import { callAt, call } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { encodePayment, newAccount, newPayTo, newPayer, settlingTenant, signPayment } from '../support/x402.ts';
import { startFacilitatorStack } from '../support/facilitator.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { connectClient } from '../../temporal/client.ts';
import { flushTracing, startTracing, stopTracing, tracingActive } from '../../lib/observability/tracing.ts';
import { waitFor } from '../support/wait.ts';

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean };
type ExportedSpan = {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  service: string;
};

/** An OTLP/HTTP receiver: POST /v1/traces with the JSON encoding, spans flattened with their service name. */
async function startReceiver(): Promise<{ url: string; spans: ExportedSpan[]; close(): Promise<void> }> {
  const spans: ExportedSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url !== '/v1/traces' || req.method !== 'POST' || !String(req.headers['content-type']).includes('json')) {
        res.statusCode = 415;
        res.end();
        return;
      }
      let raw = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
      const doc = JSON.parse(raw.toString('utf8')) as {
        resourceSpans: Array<{
          resource: { attributes: Array<{ key: string; value: OtlpValue }> };
          scopeSpans: Array<{
            spans: Array<
              Omit<ExportedSpan, 'attributes' | 'service'> & { attributes?: Array<{ key: string; value: OtlpValue }> }
            >;
          }>;
        }>;
      };
      for (const rs of doc.resourceSpans) {
        const service = rs.resource.attributes.find((a) => a.key === 'service.name')?.value.stringValue ?? '';
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            const attributes = Object.fromEntries(
              (s.attributes ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? a.value.boolValue]),
            );
            spans.push({ ...s, parentSpanId: s.parentSpanId || undefined, attributes, service });
          }
        }
      }
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function startTracedWorker(taskQueue: string, otlp: string): Promise<ChildProcess> {
  // Export within a tenth of a second instead of the default five.
  return startWorkerProcess(taskQueue, {
    OTEL_EXPORTER_OTLP_ENDPOINT: otlp,
    OTEL_SERVICE_NAME: 'traced-worker',
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

function callerTraceparent(): { header: string; traceId: string; spanId: string } {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { header: `00-${traceId}-${spanId}-01`, traceId, spanId };
}

/** What `read` finds among the exported spans, once there (20 s at most). */
function spansOnceThere<T>(what: string, read: () => T | undefined) {
  return waitFor(
    async () => {
      // The API's spans are this process's: send what is buffered (the worker exports every 100 ms).
      await flushTracing();
      return read();
    },
    { timeoutMs: 20_000, everyMs: 100, what },
  );
}

describe('tracing', function () {
  this.timeout(180_000);

  describe('on (OTLP endpoint configured)', () => {
    let receiver: Awaited<ReturnType<typeof startReceiver>>;
    let upstream: TestUpstream;
    let worker: ChildProcess | undefined;
    let temporal: Client | undefined;
    let api: Server | undefined;
    let apiUrl: string;

    before(async () => {
      receiver = await startReceiver();
      upstream = await startUpstream();
      const taskQueue = `traced-${randomUUID()}`;
      worker = await startTracedWorker(taskQueue, receiver.url);
      assert.equal(
        startTracing(
          { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_SERVICE_NAME: 'traced-api' },
          'agent-gateway-api',
        ),
        true,
      );
      const s = stack();
      temporal = await connectClient(s.config.temporal.address, s.config.temporal.namespace);
      api = await startGateway(
        { ...s.config, port: 0, temporal: { ...s.config.temporal, taskQueue } },
        s.orm,
        temporal,
        createLogger('traced-api', 'silent'),
      );
      apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
    });

    after(async () => {
      await stopTracing();
      if (api)
        await new Promise((r) => {
          api!.closeAllConnections();
          api!.close(r);
        });
      await temporal?.connection.close();
      if (worker) await stopWorkerProcess(worker);
      await upstream?.close();
      await receiver?.close();
    });

    it('continues the caller trace through the API, Temporal and the worker to the upstream', async () => {
      const token = await stack().token(`t-trace-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: upstream.url });
      const caller = callerTraceparent();
      const res = await callAt(apiUrl, 'POST', `/v1/proxy/${agentId}?api_key=do-not-trace`, {
        token,
        json: { hello: 'trace' },
        headers: { traceparent: caller.header, tracestate: 'vendor=abc' },
      });
      assert.equal(res.status, 202, res.text);
      const invocationId = res.json.invocation_id as string;
      const row = await waitForRow(invocationId);
      assert.equal(row.status, 'succeeded');

      // The upstream saw the gateway's traceparent: the caller's trace, a span of the gateway's.
      assert.equal(upstream.received.length, 1);
      const sent = String(upstream.received[0].headers.traceparent);
      const [, sentTrace, sentSpan] = TRACEPARENT.exec(sent) ?? [];
      assert.equal(sentTrace, caller.traceId, `upstream traceparent ${sent}`);
      assert.notEqual(sentSpan, caller.spanId, 'the gateway forwards its own span, not the caller header');
      assert.equal(upstream.received[0].headers.tracestate, 'vendor=abc');

      const names = [
        'POST /v1/proxy/:id',
        'StartWorkflow:InvocationWorkflow',
        'RunWorkflow:InvocationWorkflow',
        'StartActivity:performInvocation',
        'RunActivity:performInvocation',
        'POST',
      ];
      const spans = await spansOnceThere('the exported spans', () => {
        const inTrace = receiver.spans.filter((s) => s.traceId === caller.traceId);
        return names.every((n) => inTrace.some((s) => s.name === n)) ? inTrace : undefined;
      });
      const one = (name: string) => {
        const found = spans.filter((s) => s.name === name);
        assert.equal(found.length, 1, `${name}: ${found.length} spans`);
        return found[0];
      };
      const server = one('POST /v1/proxy/:id');
      const start = one('StartWorkflow:InvocationWorkflow');
      const run = one('RunWorkflow:InvocationWorkflow');
      const schedule = one('StartActivity:performInvocation');
      const activity = one('RunActivity:performInvocation');
      const client = one('POST');

      // One chain of parents from the caller's span down to the span the upstream was given.
      assert.equal(server.parentSpanId, caller.spanId);
      assert.equal(start.parentSpanId, server.spanId);
      assert.equal(run.parentSpanId, start.spanId);
      assert.equal(schedule.parentSpanId, run.spanId);
      assert.equal(activity.parentSpanId, schedule.spanId);
      assert.equal(client.parentSpanId, activity.spanId);
      assert.equal(client.spanId, sentSpan);

      // Kinds (OTLP: 2 server, 3 client) and the processes that made them.
      assert.equal(server.kind, 2);
      assert.equal(client.kind, 3);
      assert.equal(server.service, 'traced-api');
      assert.equal(start.service, 'traced-api');
      for (const s of [run, schedule, activity, client]) assert.equal(s.service, 'traced-worker', s.name);

      // Bounded attributes: the route template and status, the upstream's host and port.
      assert.equal(server.attributes['http.route'], '/v1/proxy/:id');
      assert.equal(Number(server.attributes['http.response.status_code']), 202);
      assert.equal(server.attributes['gateway.invocation_id'], invocationId);
      assert.equal(client.attributes['server.address'], '127.0.0.1');
      assert.equal(Number(client.attributes['http.response.status_code']), 200);

      // A traced history (trace context in its headers) replays on the untraced workflow bundle:
      // turning tracing on or off never breaks a running workflow.
      const history = await temporal!.workflow.getHandle(invocationId).fetchHistory();
      assert.ok(JSON.stringify(history).includes('_tracer-data'), 'the history carries the trace context');
      await Worker.runReplayHistory({ workflowBundle: stack().workflowBundle }, history, invocationId);

      // Nothing a caller sent (body, token, query) is in any exported span.
      const exported = JSON.stringify(receiver.spans);
      for (const secret of ['do-not-trace', 'hello', token.split('.')[2]])
        assert.ok(!exported.includes(secret), `exported spans contain ${secret}`);
    });

    it('carries the trace into a facilitator started with tracing on: /settle, the settlement workflow and its steps', async () => {
      // A facilitator of its own (the stack's was built before tracing started): embedded worker
      // on a task queue of its own, bundling its workflows with the tracing module.
      const facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
        overrides: { FACILITATOR_TASK_QUEUE: `facilitator-traced-${randomUUID()}` },
        ownBundle: true,
      });
      const account = await newAccount(`trace-${randomUUID()}`);
      try {
        const token = await settlingTenant(`t-trace-paid-${randomUUID()}`, account, facilitator.url);
        const payTo = newPayTo();
        const created = await callAt(apiUrl, 'POST', '/v1/agents', {
          token,
          json: {
            name: `traced-priced-${randomUUID()}`,
            upstream_url: upstream.url,
            pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: payTo },
          },
        });
        assert.equal(created.status, 201, created.text);
        const payment = await signPayment(await newPayer(10_000n), { payTo, value: 1_000n });
        const caller = callerTraceparent();
        const res = await callAt(apiUrl, 'POST', `/v1/proxy/${created.json.id}`, {
          token,
          body: 'paid',
          headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment), traceparent: caller.header },
        });
        assert.equal(res.status, 202, res.text);

        const spans = await spansOnceThere('the settlement spans', () => {
          const inTrace = receiver.spans.filter((s) => s.traceId === caller.traceId);
          const ran = inTrace.find((s) => s.name === 'RunWorkflow:SettlementWorkflow');
          return inTrace.some((s) => s.name === 'POST /settle') &&
            ran &&
            inTrace.some((s) => s.parentSpanId === ran.spanId)
            ? inTrace
            : undefined;
        });
        const server = spans.find((s) => s.name === 'POST /v1/proxy/:id')!;
        const settle = spans.find((s) => s.name === 'POST /settle')!;
        const settleClient = spans.find((s) => s.spanId === settle.parentSpanId);
        assert.ok(settleClient, 'the /settle span has its parent in the trace');
        assert.equal(settleClient.kind, 3);
        assert.equal(settleClient.parentSpanId, server.spanId);
        assert.equal(Number(settle.attributes['http.response.status_code']), 200);
        const start = spans.find((s) => s.name === 'StartWorkflow:SettlementWorkflow')!;
        const run = spans.find((s) => s.name === 'RunWorkflow:SettlementWorkflow')!;
        assert.equal(start.parentSpanId, settle.spanId);
        assert.equal(run.parentSpanId, start.spanId);
        // The settlement's steps (local activities) are spans under the workflow run.
        const steps = spans.filter((s) => s.parentSpanId === run.spanId).map((s) => s.name);
        assert.ok(steps.length > 0 && steps.every((n) => n.startsWith('StartActivity:')), steps.join(', '));
        // The payment header is nowhere in the exported spans.
        assert.ok(!JSON.stringify(receiver.spans).includes(payment.payload.signature));
      } finally {
        await account.client.close();
        await facilitator.close();
      }
    });

    it('gives a streaming call a client span under the API server span', async () => {
      const token = await stack().token(`t-trace-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: upstream.url });
      const caller = callerTraceparent();
      // Found by its request id: a late delivery of an earlier test's call may land on the shared upstream first.
      const requestId = `trace-stream-${randomUUID()}`;
      const res = await callAt(apiUrl, 'POST', `/v1/proxy/${agentId}/stream`, {
        token,
        json: { hello: 'stream' },
        headers: { traceparent: caller.header, 'x-request-id': requestId },
      });
      assert.equal(res.status, 200, res.text);
      const received = upstream.received.find((r) => r.headers['x-request-id'] === requestId);
      assert.ok(received, 'the upstream saw the streaming call');
      const [, sentTrace, sentSpan] = TRACEPARENT.exec(String(received.headers.traceparent)) ?? [];
      assert.equal(sentTrace, caller.traceId);

      const spans = await spansOnceThere('the streaming spans', () => {
        const inTrace = receiver.spans.filter((s) => s.traceId === caller.traceId);
        return inTrace.some((s) => s.name === 'POST') && inTrace.some((s) => s.name === 'POST /v1/proxy/:id/stream')
          ? inTrace
          : undefined;
      });
      const server = spans.find((s) => s.name === 'POST /v1/proxy/:id/stream')!;
      const client = spans.find((s) => s.name === 'POST')!;
      assert.equal(server.parentSpanId, caller.spanId);
      assert.equal(client.parentSpanId, server.spanId);
      assert.equal(client.spanId, sentSpan);
    });
  });

  describe('off (the default)', () => {
    it('starts no SDK and passes the caller traceparent to the upstream unchanged', async () => {
      assert.equal(tracingActive(), false);
      assert.equal(startTracing({}, 'agent-gateway-api'), false);
      assert.equal(tracingActive(), false);
      const upstream = await startUpstream();
      try {
        const token = await stack().token(`t-trace-${randomUUID()}`);
        const agentId = await createAgent(token, { upstream_url: upstream.url });
        const caller = callerTraceparent();
        const res = await call('POST', `/v1/proxy/${agentId}`, {
          token,
          json: { hello: 'untraced' },
          headers: { traceparent: caller.header },
        });
        assert.equal(res.status, 202, res.text);
        await waitForRow(res.json.invocation_id as string);
        assert.equal(upstream.received[0].headers.traceparent, caller.header);

        // Without a caller traceparent the gateway adds none.
        const plain = await call('POST', `/v1/proxy/${agentId}`, { token, json: { hello: 'untraced' } });
        assert.equal(plain.status, 202, plain.text);
        await waitForRow(plain.json.invocation_id as string);
        assert.equal(upstream.received[1].headers.traceparent, undefined);
      } finally {
        await upstream.close();
      }
    });
  });
});
