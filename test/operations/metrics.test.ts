// Observability: /metrics scraped after real traffic (request counts and latency by route
// and status, upstream outcomes by error class, policy actions, rate-limit rejections,
// settlements by outcome, gas balance, breaker state), the worker's and facilitator's own
// listeners, and the structured logs: request id and invocation id, never a body or secret.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from '../support/x402.ts';
import { startGateway } from '../../api/wiring.ts';
import { startMetricsServer } from '../../lib/observability/http.ts';
import { startFacilitatorMetrics } from '../../facilitator/metrics.ts';
import { chainProvider } from '../support/x402.ts';
import { workflowResult } from '../support/workflows.ts';
import { waitFor } from '../support/wait.ts';

type Samples = Map<string, number>;

/** Parses the Prometheus text format into `name{labels}` → value. */
function parse(text: string): Samples {
  const samples: Samples = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (m) samples.set(`${m[1]}${m[2] ?? ''}`, Number(m[3]));
  }
  return samples;
}

async function scrape(url = stack().metricsUrl): Promise<{ text: string; samples: Samples; type: string }> {
  const res = await request(url);
  assert.equal(res.statusCode, 200);
  const text = await res.body.text();
  return { text, samples: parse(text), type: String(res.headers['content-type']) };
}

/** The value of the first sample whose name and labels include all of `labels`. */
function value(samples: Samples, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const [key, v] of samples) {
    if (!key.startsWith(`${name}{`) && key !== name) continue;
    if (Object.entries(labels).every(([k, want]) => key.includes(`${k}="${want}"`))) total += v;
  }
  return total;
}

describe('observability', () => {
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream((req, res) => {
      res.statusCode = req.body.toString() === 'boom' ? 503 : 200;
      res.end('ok');
    });
  });
  after(() => upstream.close());

  it('serves Prometheus metrics that move with real traffic', async () => {
    const before = (await scrape()).samples;
    const tenant = `metrics-${randomUUID()}`;
    const token = await stack().token(tenant);
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName('metrics'), upstream_url: upstream.url },
    });
    const agentId = created.json.id;
    const ok = await call('POST', `/v1/proxy/${agentId}`, { token, body: 'fine' });
    await waitForInvocation(token, agentId, ok.json.invocation_id);
    await workflowResult(ok.json.invocation_id);
    const bad = await call('POST', `/v1/proxy/${agentId}`, { token, body: 'boom' });
    await waitForInvocation(token, agentId, bad.json.invocation_id);
    await workflowResult(bad.json.invocation_id);
    assert.equal((await call('GET', '/v1/agents/agt_nope', { token })).status, 404);
    await call('PUT', '/v1/policy', {
      token,
      json: { default: 'allow', on_error: 'allow', rules: [{ action: 'deny', match: { max_body_bytes: 100 } }] },
    });
    assert.equal((await call('POST', `/v1/proxy/${agentId}`, { token, body: 'x'.repeat(100) })).status, 403);
    for (let i = 0; i <= stack().config.analytics.burst; i++)
      await call('GET', '/v1/analytics?since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z', { token });

    const { text, samples, type } = await scrape();
    assert.match(type, /^text\/plain/);
    const delta = (name: string, labels: Record<string, string>) =>
      value(samples, name, labels) - value(before, name, labels);
    assert.ok(
      delta('http_requests_total', { service: 'api', method: 'POST', route: '/v1/proxy/:id', status: '202' }) >= 2,
    );
    assert.ok(
      delta('http_requests_total', { service: 'api', method: 'POST', route: '/v1/proxy/:id', status: '403' }) >= 1,
    );
    assert.ok(
      delta('http_requests_total', { service: 'api', method: 'GET', route: '/v1/agents/:id', status: '404' }) >= 1,
    );
    assert.ok(delta('http_request_duration_seconds_count', { service: 'api', route: '/v1/proxy/:id' }) >= 3);
    assert.ok(
      value(samples, 'http_request_duration_seconds_bucket', { route: '/v1/proxy/:id', le: '+Inf' }) >= 3,
      'a histogram with buckets',
    );
    assert.ok(delta('gateway_upstream_outcomes_total', { mode: 'transactional', error_class: 'none' }) >= 1);
    assert.ok(delta('gateway_upstream_outcomes_total', { mode: 'transactional', error_class: 'upstream_5xx' }) >= 1);
    assert.ok(delta('gateway_policy_decisions_total', { action: 'deny', source: 'rule' }) >= 1);
    assert.ok(delta('gateway_rate_limit_rejections_total', { limiter: 'analytics' }) >= 1);
    assert.ok(text.includes('gateway_circuit_breakers{state="open"}'), 'the breaker gauge is exported');
    assert.ok(text.includes('process_cpu_seconds_total'), 'process metrics');
    // Labels are templates and classes, never ids, tenants or content.
    for (const secret of [tenant, agentId, ok.json.invocation_id, token, 'boom'])
      assert.ok(!text.includes(secret), `metrics never carry ${secret.slice(0, 12)}`);
  });

  it('labels every request with its route template or `unmatched`, never a regular expression', async () => {
    const before = (await scrape()).samples;
    assert.equal((await call('GET', '/v1')).status, 404);
    // Stopped by the /v1 router's auth middleware, whose own path is a regular expression.
    assert.equal((await call('GET', '/v1/agents/agt_nope')).status, 401);
    assert.equal((await call('GET', '/nowhere')).status, 404);
    const token = await stack().token(`metrics-routes-${randomUUID()}`);
    assert.equal((await call('DELETE', '/v1/analytics', { token })).status, 405);
    const { text, samples } = await scrape();
    const delta = (labels: Record<string, string>) =>
      value(samples, 'http_requests_total', { service: 'api', ...labels }) -
      value(before, 'http_requests_total', { service: 'api', ...labels });
    assert.ok(delta({ method: 'GET', route: '/v1/agents/:id', status: '401' }) >= 1, 'a 401 names its route');
    assert.ok(delta({ method: 'GET', route: 'unmatched', status: '404' }) >= 2, 'GET /v1 and /nowhere are unmatched');
    assert.ok(delta({ method: 'DELETE', route: 'unmatched', status: '405' }) >= 1);
    const routes = new Set([...text.matchAll(/\broute="([^"]*)"/g)].map((m) => m[1]));
    assert.ok(routes.size > 0);
    for (const route of routes)
      assert.match(route, /^(unmatched|\/[A-Za-z0-9_.\-/:]*)$/, `route label ${route} is a template`);
  });

  it('is not served on the public API port (it lives on the metrics listener)', async () => {
    const res = await call('GET', '/metrics');
    assert.equal(res.status, 404);
    assert.ok(!res.text.includes('process_cpu_seconds_total'));
  });

  it('/readyz runs its database and Temporal checks at most once a second, whatever the probe rate', async () => {
    const checks = async () => value((await scrape()).samples, 'gateway_readiness_checks_total');
    await call('GET', '/readyz');
    const before = await checks();
    const answers = await Promise.all(Array.from({ length: 200 }, () => call('GET', '/readyz')));
    assert.ok(answers.every((r) => r.status === 200 && r.json.status === 'ready'));
    assert.ok((await checks()) - before <= 2, `${(await checks()) - before} checks for 200 probes`);
  });

  it('the worker listener serves the same registry: upstream outcomes recorded by the worker', async () => {
    const server: Server = await startMetricsServer(0, '127.0.0.1');
    try {
      const { samples } = await scrape(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`);
      assert.ok(value(samples, 'gateway_upstream_outcomes_total') >= 1);
      const other = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/anything`);
      assert.equal(other.statusCode, 404);
      await other.body.dump();
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it('the facilitator: settlements by outcome, requests by route, and the gas balance', async () => {
    const provider = chainProvider();
    const account = await newAccount(`metrics-${randomUUID()}`);
    const metricsServer = await startFacilitatorMetrics({
      provider,
      gasWallet: stack().facilitator.gasWallet,
      env: { FACILITATOR_METRICS_PORT: '0' },
    });
    assert.equal(metricsServer, null, 'port 0 turns the listener off');
    try {
      const before = (await scrape()).samples;
      const payTo = newPayTo();
      const payer = await newPayer(10_000n);
      const settled = await account.client.post(
        '/settle',
        settleBody(await signPayment(payer, { payTo, value: 500n }), requirements(payTo, 500n)),
      );
      assert.equal(settled.status, 200);
      assert.equal(settled.json.success, true);
      assert.equal((await account.client.post('/settle', '{"not":"a settle request"}')).status, 400);
      const { samples } = await scrape();
      const delta = (name: string, labels: Record<string, string>) =>
        value(samples, name, labels) - value(before, name, labels);
      assert.equal(delta('settlements_total', { service: 'facilitator', outcome: 'settled' }), 1);
      assert.equal(delta('settlements_total', { service: 'facilitator', outcome: 'malformed' }), 1);
      assert.ok(delta('http_requests_total', { service: 'facilitator', route: '/settle', status: '200' }) >= 1);
      assert.ok(value(samples, 'facilitator_gas_balance_wei') > 0, 'the gas wallet balance, read at scrape time');
    } finally {
      await account.client.close();
      provider.destroy();
    }
  });

  it('logs one JSON line per request with the request id and the invocation id, never a body or a secret', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const log = pino({ level: 'info', base: { name: 'api' } }, sink);
    const s = stack();
    const server = await startGateway({ ...s.config, port: 0 }, s.orm, s.temporal, log);
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const token = await s.token(`logs-${randomUUID()}`);
      const agent = await request(`${base}/v1/agents`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: uniqueName('logs'), upstream_url: upstream.url }),
      });
      const agentId = ((await agent.body.json()) as { id: string }).id;
      const marker = `body-marker-${randomUUID()}`;
      const res = await request(`${base}/v1/proxy/${agentId}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'x-request-id': 'req-logs-1',
          'x-payment': 'c2VjcmV0LXBheW1lbnQ=',
        },
        body: marker,
      });
      const { invocation_id: invocationId } = (await res.body.json()) as { invocation_id: string };
      assert.equal(res.headers['x-request-id'], 'req-logs-1');
      const generated = await request(`${base}/healthz`);
      await generated.body.dump();
      assert.match(
        String(generated.headers['x-request-id']),
        /^[0-9a-f-]{36}$/,
        'one is made up when the caller sends none',
      );

      // Access lines are written off the request's path (ACCESS_LOG=batched, the default), within a second.
      const entry = await waitFor(
        () => lines.map((l) => JSON.parse(l)).find((e) => e.requestId === 'req-logs-1' && e.route === '/v1/proxy/:id'),
        { what: 'the access line of req-logs-1' },
      );
      assert.equal(entry.invocationId, invocationId);
      assert.equal(entry.status, 202);
      assert.equal(typeof entry.durationMs, 'number');
      const all = lines.join('\n');
      for (const secret of [marker, token, 'c2VjcmV0LXBheW1lbnQ='])
        assert.ok(!all.includes(secret), 'no body, token or payment in the logs');
    } finally {
      await new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      });
    }
  });
});
