// A caller's request is kept only as long as its call needs it: once a transactional call has
// completed, its stored body and headers are gone unless the agent captures bodies; the
// receipt's request digest stays.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, waitForInvocation } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { Worker } from '@temporalio/worker';
import type { PolicyDecisionRetentionWorkflow } from '../../workflows/retention.ts';
import { workflowResult } from '../support/workflows.ts';

type Kept = {
  request_body_id: string | null;
  request_headers: Record<string, string>;
  request_sha256: string | null;
  bodies: number;
};

async function kept(invocationId: string, marker: string): Promise<Kept> {
  const conn = stack().orm.em.fork().getConnection();
  const [row] = await conn.execute<Array<Omit<Kept, 'bodies'>>>(
    'select request_body_id, request_headers, request_sha256 from invocations where id = ?',
    [invocationId],
  );
  const [{ n }] = await conn.execute<Array<{ n: number }>>(
    `select count(*)::int as n from bodies where position(?::bytea in content) > 0`,
    [Buffer.from(marker)],
  );
  return { ...row, bodies: n };
}

describe('request bodies kept only as long as needed', function () {
  this.timeout(60_000);
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream((req, res) =>
      res.end(req.body.includes('fail') ? ((res.statusCode = 503), 'no') : 'ok'),
    );
  });
  after(() => upstream.close());

  for (const outcome of ['succeeded', 'failed'] as const) {
    it(`${outcome}: the stored body and headers are deleted at completion without capture_body`, async () => {
      const token = await stack().token(`bodies-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: upstream.url });
      const marker = `secret-body-${randomUUID()}${outcome === 'failed' ? '-fail' : ''}`;
      const res = await call('POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'x-caller-note': marker },
      });
      assert.equal(res.status, 202);
      const done = await waitForInvocation(token, agentId, res.json.invocation_id);
      assert.equal(done.status, outcome);
      await workflowResult(res.json.invocation_id);
      const after = await kept(res.json.invocation_id, marker);
      assert.equal(after.request_body_id, null);
      assert.deepEqual(after.request_headers, {});
      assert.equal(after.bodies, 0, "no body row holds the caller's bytes");
      assert.match(after.request_sha256 ?? '', /^[0-9a-f]{64}$/, 'the digest stays for the receipt');
      assert.equal(upstream.received.filter((r) => r.body.toString() === marker).length, 1);
    });
  }

  it('capture_body keeps them', async () => {
    const token = await stack().token(`bodies-${randomUUID()}`);
    const agentId = await createAgent(token, { upstream_url: upstream.url, capture_body: true });
    const marker = `kept-body-${randomUUID()}`;
    const res = await call('POST', `/v1/proxy/${agentId}`, { token, body: marker, headers: { 'x-caller-note': 'n' } });
    await waitForInvocation(token, agentId, res.json.invocation_id);
    const after = await kept(res.json.invocation_id, marker);
    assert.notEqual(after.request_body_id, null);
    assert.equal(after.request_headers['x-caller-note'], 'n');
    assert.equal(after.bodies, 1);
  });
});

describe('captured bodies expire after BODY_RETENTION_DAYS', function () {
  this.timeout(60_000);

  it('the retention workflow deletes captured bodies older than the retention in bounded batches; the invocations keep their digests', async () => {
    const upstream = await startUpstream();
    try {
      const token = await stack().token(`bodies-${randomUUID()}`);
      const agentId = await createAgent(token, { upstream_url: upstream.url, capture_body: true });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await call('POST', `/v1/proxy/${agentId}`, { token, body: `captured-${i}-${randomUUID()}` });
        ids.push(res.json.invocation_id);
        await waitForInvocation(token, agentId, res.json.invocation_id);
      }
      const conn = stack().orm.em.fork().getConnection();
      const bodyIds = async (id: string) =>
        (
          await conn.execute<
            Array<{ request_body_id: string | null; response_body_id: string | null; request_sha256: string | null }>
          >('select request_body_id, response_body_id, request_sha256 from invocations where id = ?', [id])
        )[0];
      const [oldCall, ...recent] = ids;
      const before = await bodyIds(oldCall);
      assert.ok(before.request_body_id && before.response_body_id);
      await conn.execute(`update bodies set created_at = now() - interval '40 days' where id in (?, ?)`, [
        before.request_body_id,
        before.response_body_id,
      ]);

      const s = stack();
      const handle = await s.temporal.workflow.start<typeof PolicyDecisionRetentionWorkflow>(
        'PolicyDecisionRetentionWorkflow',
        {
          taskQueue: s.config.temporal.taskQueue,
          workflowId: `body-retention-${randomUUID()}`,
          args: [{ retentionDays: 365_000, bodyRetentionDays: 30, batchSize: 1, maxBatchesPerRun: 5 }],
        },
      );
      await handle.result();
      const after = await bodyIds(oldCall);
      assert.equal(after.request_body_id, null);
      assert.equal(after.response_body_id, null);
      assert.match(after.request_sha256 ?? '', /^[0-9a-f]{64}$/, 'the request digest stays');
      const [{ n }] = await conn.execute<Array<{ n: number }>>(
        'select count(*)::int as n from bodies where id in (?, ?)',
        [before.request_body_id, before.response_body_id],
      );
      assert.equal(n, 0);
      for (const id of recent) assert.ok((await bodyIds(id)).request_body_id, 'recent captured bodies stay');
      await Worker.runReplayHistory(
        { workflowBundle: s.workflowBundle },
        await handle.fetchHistory(),
        'body-retention',
      );
    } finally {
      await upstream.close();
    }
  });
});
