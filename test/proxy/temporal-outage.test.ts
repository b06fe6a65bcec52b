// Transactional calls while Temporal is stopped (the accept outbox, docs/PROXY.md): a call is
// accepted (202) once its row commits, so calls keep being accepted through an outage, up to
// the start backlog's bound per process and per tenant (503 with Retry-After beyond it, before
// anything is written); /readyz reports the backlog; once Temporal is back the start relay
// starts every accepted call and each completes exactly once.
// Real parts: a Temporal dev server of this test's own, stopped for 20 s and started again on
// the same file; the stack's PostgreSQL; a gateway worker on the test's own task queue.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { stack } from '../support/stack.ts';
import { callAt, waitForInvocation } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { connectClient } from '../../temporal/client.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import { runWorkerVersion } from '../../temporal/worker-deployment.ts';
import { startTemporalDevServer, type DevServer } from '../../scripts/dev/temporal-dev-server.ts';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import type { GatewayConfig } from '../../gateway/config.ts';
import { waitFor } from '../support/wait.ts';

const OUTAGE_MS = 20_000;
const BACKLOG = { process: 12, tenant: 8 };

describe('transactional calls while Temporal is stopped', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream();
  });
  after(() => upstream.close());

  it('accepts calls through a 20 s outage up to the backlog (503 beyond it), and each accepted call completes once after the restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-outage-'));
    const port = await freePort();
    const devServer = () =>
      startTemporalDevServer({
        binary: ensureTool('temporal'),
        dbFile: join(dir, 'temporal.db'),
        port,
        namespace: stack().config.temporal.namespace,
      });
    let server: DevServer = await devServer();
    const taskQueue = `outage-${randomUUID()}`;
    const config: GatewayConfig = {
      ...stack().config,
      temporal: {
        ...stack().config.temporal,
        address: server.address,
        taskQueue,
        connection: { ...stack().config.temporal.connection, address: server.address },
      },
      startBacklog: BACKLOG,
      // Production's deadline (the stack's is longer): starts during the outage give up as they would there.
      workflowStartDeadlineMs: 2_000,
    };
    const temporal = await connectClient(server.address, config.temporal.namespace);
    const gateway: Server = await startGateway(config, stack().orm, temporal, createLogger('api', 'silent'), {
      relay: true,
    });
    const url = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
    const [tokenA, tokenB] = await Promise.all([
      stack().token(`tenant-outage-a-${randomUUID()}`),
      stack().token(`tenant-outage-b-${randomUUID()}`),
    ]);
    const agentA = await createAgent(tokenA, { upstream_url: upstream.url });
    const agentB = await createAgent(tokenB, { upstream_url: upstream.url });
    const invoke = (token: string, agentId: string, marker: string) =>
      callAt(url, 'POST', `/v1/proxy/${agentId}`, {
        token,
        body: marker,
        headers: { 'content-type': 'text/plain' },
      });
    const accepted: Array<{ token: string; agentId: string; id: string; marker: string }> = [];
    const refused: number[] = [];
    const send = async (token: string, agentId: string, n: number, label: string) => {
      for (let i = 0; i < n; i++) {
        const marker = `${label}-${i}-${randomUUID()}`;
        const reply = await invoke(token, agentId, marker);
        if (reply.status === 202) accepted.push({ token, agentId, id: reply.json.invocation_id, marker });
        else {
          assert.equal(reply.status, 503, reply.text);
          assert.deepEqual(reply.json, { error: 'service temporarily unavailable' });
          assert.equal(reply.headers['retry-after'], '1');
          refused.push(reply.status);
        }
        // The callers' own pace: their calls arrive spread over the outage, not all at its start.
        await new Promise((r) => setTimeout(r, 400));
      }
    };
    let worker: Awaited<ReturnType<typeof createGatewayWorker>> | undefined;
    let running: Promise<void> | undefined;
    try {
      await server.stop();
      const stoppedAt = Date.now();
      // Calls arrive through the outage: tenant A fills its bound (8), tenant B the process's (12).
      await send(tokenA, agentA, 10, 'a');
      await send(tokenB, agentB, 6, 'b');
      assert.equal(accepted.length, BACKLOG.process, 'accepted up to the process bound');
      assert.equal(accepted.filter((a) => a.agentId === agentA).length, BACKLOG.tenant, 'tenant A up to its bound');
      assert.equal(refused.length, 16 - BACKLOG.process);
      const ready = await callAt(url, 'GET', '/readyz');
      assert.equal(ready.status, 503, ready.text);
      assert.equal(ready.json.temporal, 'unreachable');
      assert.deepEqual(ready.json.start_backlog, { accepted_unstarted: BACKLOG.process, limit: BACKLOG.process });
      assert.equal(upstream.received.length, 0, 'nothing sent during the outage');
      // Every accepted call is readable at once, `pending`.
      for (const a of accepted) {
        const poll = await callAt(url, 'GET', `/v1/proxy/${a.agentId}/invocations/${a.id}`, { token: a.token });
        assert.equal(poll.status, 200, poll.text);
        assert.equal(poll.json.status, 'pending');
      }
      await new Promise((r) => setTimeout(r, Math.max(OUTAGE_MS - (Date.now() - stoppedAt), 0)));

      server = await devServer();
      worker = await createGatewayWorker(config, stack().orm, { workflowBundle: stack().workflowBundle });
      // A fresh server: the worker's version becomes the deployment's current one as it polls.
      ({ running } = await runWorkerVersion(
        worker.worker,
        worker.connection,
        config.temporal,
        createLogger('worker', 'silent'),
      ));
      for (const a of accepted) {
        const done = await waitForInvocation(a.token, a.agentId, a.id, 60_000);
        assert.equal(done.status, 'succeeded', JSON.stringify(done));
      }
      for (const a of accepted) {
        assert.equal(
          upstream.received.filter((r) => r.body.toString() === a.marker).length,
          1,
          `${a.marker} sent once`,
        );
      }
      assert.equal(upstream.received.length, accepted.length, 'no call sent twice, none that was refused');
      // The places come back as the relay starts the calls.
      const after = await waitFor(
        async () => {
          const ready = await callAt(url, 'GET', '/readyz');
          return ready.status === 200 && ready;
        },
        { everyMs: 250, what: 'the API ready again', state: async () => (await callAt(url, 'GET', '/readyz')).text },
      );
      assert.equal(after.status, 200, after.text);
      assert.equal(after.json.start_backlog.accepted_unstarted, 0);
      const more = await invoke(tokenA, agentA, `after-${randomUUID()}`);
      assert.equal(more.status, 202, more.text);
      assert.equal((await waitForInvocation(tokenA, agentA, more.json.invocation_id, 30_000)).status, 'succeeded');
    } finally {
      gateway.closeAllConnections();
      await new Promise((r) => gateway.close(r));
      if (worker) {
        worker.worker.shutdown();
        await running;
        await worker.connection.close();
      }
      await temporal.connection.close();
      await server.stop();
      await stack()
        .orm.em.getConnection()
        .execute('delete from invocations where agent_id in (?, ?)', [agentA, agentB]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
