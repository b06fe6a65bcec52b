// The Temporal SDK's own telemetry in a gateway worker PROCESS (temporal/gateway-worker-main.ts,
// bundling at start as under npm start): after one invocation its single /metrics listener
// (WORKER_METRICS_PORT) serves both the project's metrics and the SDK core's temporal_* ones,
// the workflow-completed counter counting the call; and the SDK's log lines, the Rust core's
// included, come out as the process's pino JSON lines, without the call's body.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { request } from 'undici';
import { pino } from 'pino';
import { sdkLogger } from '../../lib/observability/temporal-runtime.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { workflowResult } from '../support/workflows.ts';
import { invokeThrough, startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';

/** The samples of metric `name` whose labels include `labels`, summed. */
function sum(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    if (Object.entries(labels).every(([k, v]) => (m[2] ?? '').includes(`${k}="${v}"`))) total += Number(m[3]);
  }
  return total;
}

describe('the Temporal SDK telemetry of a worker process', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  let worker: ChildProcess | undefined;
  before(async () => {
    upstream = await startUpstream();
  });
  after(async () => {
    if (worker) await stopWorkerProcess(worker);
    await upstream.close();
  });

  it('serves the SDK core metrics on the worker /metrics, and writes the SDK logs through pino', async () => {
    const taskQueue = `telemetry-${randomUUID()}`;
    const port = await freePort();
    let output = '';
    worker = await startWorkerProcess(
      taskQueue,
      // Bundling at start, as under npm start (no prebuilt bundle).
      { WORKER_METRICS_PORT: String(port), WORKFLOW_BUNDLE_DIR: undefined },
      (c) => (output += c),
    );
    const scrape = async () => {
      const res = await request(`http://127.0.0.1:${port}/metrics`);
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/plain/);
      return res.body.text();
    };
    const queue = { task_queue: taskQueue };
    const before = await scrape();
    assert.equal(sum(before, 'temporal_workflow_completed', queue), 0);

    const marker = `telemetry-body-${randomUUID()}`;
    const row = await invokeThrough(taskQueue, upstream.url, marker);
    assert.equal(row.status, 'succeeded');
    await workflowResult(row.id);

    const text = await scrape();
    // The project's own metrics (prom-client) ...
    assert.ok(sum(text, 'gateway_upstream_outcomes_total', { error_class: 'none' }) >= 1, text);
    assert.ok(text.includes('process_cpu_seconds_total'));
    // ... and the SDK core's, for this worker's task queue: the call's workflow completed once.
    assert.equal(
      sum(text, 'temporal_workflow_completed', { ...queue, workflow_type: 'InvocationWorkflow' }),
      1,
      text
        .split('\n')
        .filter((l) => l.startsWith('temporal_workflow_completed'))
        .join('\n'),
    );
    assert.ok(
      sum(text, 'temporal_activity_execution_latency_count', { ...queue, activity_type: 'performInvocation' }) >= 1,
    );
    assert.ok(sum(text, 'temporal_workflow_task_schedule_to_start_latency_count', queue) >= 1);
    assert.match(text, /^temporal_worker_task_slots_available\{/m);
    assert.match(text, /^temporal_num_pollers\{/m);
    // One exposition: every metric family declared once.
    const types = [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
    assert.equal(new Set(types).size, types.length);

    // The SDK's lines (its TypeScript side and the forwarded core) are the worker's pino JSON.
    worker.kill('SIGTERM');
    await once(worker, 'close');
    worker = undefined;
    const entries = output
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => {
        assert.ok(l.startsWith('{'), `not a JSON line: ${l}`);
        return JSON.parse(l) as Record<string, unknown>;
      });
    const sdk = entries.filter((e) => e.sdkComponent);
    assert.ok(
      sdk.some((e) => e.sdkComponent === 'worker' && e.msg === 'Worker state changed' && e.name === 'worker'),
      output,
    );
    assert.ok(
      sdk.some((e) => e.sdkComponent === 'core' && typeof e.level === 'number'),
      'core logs are forwarded',
    );
    assert.ok(!output.includes(marker), 'the call body is never logged');
  });
});

describe('the SDK logger keeps secrets out of the logs', () => {
  it('an SDK error quoting an RPC URL with its API key is logged with the URL cut to its host', () => {
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
    const key = `key-${randomUUID()}`;
    const err = new Error(`request failed (requestUrl="https://rpc.example.com/v2/${key}", code=SERVER_ERROR)`);
    sdkLogger(log).warn(`Activity failed against https://user:${key}@rpc.example.com:8545`, {
      error: err,
      requestUrl: `https://rpc.example.com/v2/${key}?apikey=${key}`,
      activityType: 'broadcastSettlement',
    });
    assert.equal(lines.length, 1);
    assert.doesNotMatch(lines[0], new RegExp(key));
    const entry = JSON.parse(lines[0]);
    assert.equal(entry.activityType, 'broadcastSettlement');
    assert.equal(entry.requestUrl, 'https://rpc.example.com/[redacted]');
    assert.match(entry.error.message, /requestUrl="https:\/\/rpc\.example\.com\/\[redacted\]"/);
    assert.equal(entry.msg, 'Activity failed against https://rpc.example.com:8545');
  });
});
