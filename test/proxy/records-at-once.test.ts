// An invocation id the gateway has handed out is readable at once, on any replica: a poll never
// answers 404 because the row is not written yet. A transactional row commits before its 202;
// a streaming row is written beside the call, and a poll of a just-minted id that is not found
// waits for it briefly (api/proxy/recent-read.ts). Each pair here is a call on one API replica
// and, as soon as its answer is in, a poll on the other.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from '../support/stack.ts';
import { callAt } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startGateway } from '../../api/wiring.ts';
import { waitFor } from '../support/wait.ts';
import { createLogger } from '../../lib/log.ts';
import { newId } from '../../lib/ids.ts';

const PAIRS = 1_000;
const CONCURRENCY = 8;

async function pool(n: number, concurrency: number, run: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) await run(i);
    }),
  );
}

describe('records readable the moment their id is handed out', function () {
  this.timeout(300_000);
  let upstream: TestUpstream;
  const taskQueue = `unpolled-at-once-${randomUUID()}`;
  const tenantId = `tenant-at-once-${randomUUID()}`;
  let own: Server[];
  let replicas: string[];
  let token: string;
  let agentId: string;
  before(async () => {
    upstream = await startUpstream();
    // Two replicas of the test's own that start workflows on a task queue no worker polls: the
    // calls' workflows are not what this test is about, and a thousand left to run on the
    // stack's worker would hold up the next test file's calls behind them.
    const config = { ...stack().config, temporal: { ...stack().config.temporal, taskQueue } };
    own = await Promise.all(
      [0, 1].map(() => startGateway(config, stack().orm, stack().temporal, createLogger('api', 'silent'))),
    );
    replicas = own.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    token = await stack().token(tenantId);
    agentId = await createAgent(token, { upstream_url: upstream.url, rate_limit_rps: 100_000 });
  });
  after(async () => {
    for (const server of own) {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    // Their workflows will never run: they are terminated (one batch operation on the server)
    // and the rows and bodies go too, so that no later check of unfinished calls in this stack
    // finds a thousand of them before its own.
    await stack().temporal.workflowService.startBatchOperation({
      namespace: stack().config.temporal.namespace,
      jobId: randomUUID(),
      reason: 'records-at-once: its calls were only to be read',
      visibilityQuery: `TaskQueue = '${taskQueue}'`,
      terminationOperation: {},
    });
    const db = stack().orm.em.getConnection();
    await db.execute('delete from invocations where agent_id = ?', [agentId]);
    await db.execute('delete from bodies where tenant_id = ?', [tenantId]);
    await upstream.close();
  });

  const invoke = (base: string, i: number) =>
    callAt(base, 'POST', `/v1/proxy/${agentId}`, { token, body: `t-${i}`, headers: { 'content-type': 'text/plain' } });
  const poll = (base: string, id: string) => callAt(base, 'GET', `/v1/proxy/${agentId}/invocations/${id}`, { token });

  it(`${PAIRS} streaming calls, each polled on the other replica as soon as its whole answer is in: no 404`, async () => {
    const notFound: string[] = [];
    await pool(PAIRS, CONCURRENCY, async (i) => {
      const [on, other] = [replicas[i % 2], replicas[(i + 1) % 2]];
      const streamed = await callAt(on, 'POST', `/v1/proxy/${agentId}/stream`, {
        token,
        body: `s-${i}`,
        headers: { 'content-type': 'text/plain' },
      });
      assert.equal(streamed.status, 200, streamed.text);
      const id = streamed.headers['x-gateway-invocation-id'] as string;
      const read = await poll(other, id);
      if (read.status === 404) notFound.push(id);
      else assert.equal(read.status, 200, read.text);
    });
    assert.deepEqual(notFound, []);
  });

  it(`${PAIRS} transactional calls, each polled on the other replica as soon as its 202 is in: no 404`, async () => {
    const notFound: string[] = [];
    await pool(PAIRS, CONCURRENCY, async (i) => {
      const [on, other] = [replicas[i % 2], replicas[(i + 1) % 2]];
      // The callers outpace Temporal's starts here: past the start backlog the API answers 503
      // with Retry-After (docs/PROXY.md), writing nothing; the call is sent again until a place
      // is free (polled more often than Retry-After's second: the wait is for the backlog, not a clock).
      const accepted = await waitFor(
        async () => {
          const res = await invoke(on, i);
          return res.status === 503 ? null : res;
        },
        { timeoutMs: 60_000, everyMs: 100, what: 'a place in the start backlog' },
      );
      assert.equal(accepted.status, 202, accepted.text);
      const read = await poll(other, accepted.json.invocation_id);
      if (read.status === 404) notFound.push(accepted.json.invocation_id);
      else assert.equal(read.status, 200, read.text);
    });
    assert.deepEqual(notFound, []);
  });

  it("a just-minted id that was never handed out, or another tenant's, is still 404", async () => {
    assert.equal((await poll(replicas[0], newId('inv'))).status, 404);
    const otherToken = await stack().token(`tenant-at-once-other-${randomUUID()}`);
    const streamed = await callAt(replicas[0], 'POST', `/v1/proxy/${agentId}/stream`, { token, body: 'mine' });
    const id = streamed.headers['x-gateway-invocation-id'] as string;
    const foreign = await callAt(replicas[1], 'GET', `/v1/proxy/${agentId}/invocations/${id}`, { token: otherToken });
    assert.equal(foreign.status, 404);
  });
});
