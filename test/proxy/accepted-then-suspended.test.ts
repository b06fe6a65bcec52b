// A transactional call accepted (202) while its agent was invocable, whose workflow runs only
// after the agent was suspended or deleted: it still runs. The 202 is the gateway's commitment
// (and, for a priced agent, what the payer paid for); suspension and deletion refuse new calls
// at the gate (422) from the moment they are answered. The accept and the run are separated for
// real: the calls are accepted by a gateway whose task queue no worker polls yet.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { stack } from '../support/stack.ts';
import { call, callAt } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import type { GatewayConfig } from '../../gateway/config.ts';
import { workflowResult } from '../support/workflows.ts';

describe('a call accepted before its agent was suspended or deleted', function () {
  this.timeout(90_000);
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream();
  });
  after(() => upstream.close());

  it('still runs once, after the suspension and after the deletion; new calls are 422', async () => {
    const taskQueue = `accepted-${randomUUID()}`;
    const config: GatewayConfig = { ...stack().config, port: 0, temporal: { ...stack().config.temporal, taskQueue } };
    const server: Server = await startGateway(config, stack().orm, stack().temporal, createLogger('api', 'silent'));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const token = await stack().token(`accepted-${randomUUID()}`);
    const suspended = await createAgent(token, { upstream_url: upstream.url });
    const deleted = await createAgent(token, { upstream_url: upstream.url });
    const marks = { suspended: `s-${randomUUID()}`, deleted: `d-${randomUUID()}` };
    try {
      const a = await callAt(url, 'POST', `/v1/proxy/${suspended}`, { token, body: marks.suspended });
      const b = await callAt(url, 'POST', `/v1/proxy/${deleted}`, { token, body: marks.deleted });
      assert.equal(a.status, 202);
      assert.equal(b.status, 202);
      assert.equal(
        (await call('POST', `/v1/agents/${suspended}/suspend`, { token, json: { reason: 'abuse' } })).status,
        200,
      );
      assert.equal((await call('DELETE', `/v1/agents/${deleted}`, { token })).status, 204);
      assert.equal((await call('POST', `/v1/proxy/${suspended}`, { token, body: 'new' })).status, 422);
      assert.equal(upstream.received.length, 0, 'nothing ran yet');

      const { worker, connection } = await createGatewayWorker(config, stack().orm, {
        workflowBundle: stack().workflowBundle,
      });
      const running = worker.run();
      try {
        for (const [agentId, inv] of [
          [suspended, a.json.invocation_id],
          [deleted, b.json.invocation_id],
        ] as const) {
          assert.equal((await workflowResult(inv)).status, 'succeeded');
          const polled = await call('GET', `/v1/proxy/${agentId}/invocations/${inv}`, { token });
          assert.equal(polled.json.status, 'succeeded');
        }
      } finally {
        worker.shutdown();
        await running;
        await connection.close();
      }
      for (const mark of Object.values(marks))
        assert.equal(upstream.received.filter((r) => r.body.toString() === mark).length, 1);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
