// Transactional calls while Temporal cannot be reached (issue 4). A call made during an outage
// gets its 503 with Retry-After within the start deadline (api/proxy/start.ts), and at once
// while the client's channel is known down; it leaves no row and sends nothing; calls are
// accepted again as soon as Temporal is back. A start whose answer is lost after the server
// created the workflow (the ambiguous case) is never answered 503 for a call that runs, and
// never leaves a row nothing runs: if the workflow already claimed the row the caller gets its
// 202; otherwise the row is removed and the workflow terminated, nothing sent.
// Real parts: a dev server of this test's own, stopped and started again; a TCP relay in front
// of the shared dev server that forwards requests and drops the answers.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import { stack } from './support/stack.ts';
import { callAt } from './support/http.ts';
import { createAgent, invocationRow, waitForRow } from './support/proxy-helpers.ts';
import { startUpstream, type TestUpstream } from './support/upstream.ts';
import { startTcpRelay, type TcpRelay } from './support/tcp-relay.ts';
import { connectClient } from '../temporal/client.ts';
import { startTemporalDevServer, type DevServer } from '../scripts/dev/temporal-dev-server.ts';
import { ensureTool } from '../scripts/lib/tools.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { startGateway } from '../api/gateway.ts';
import { createLogger } from '../lib/log.ts';
import { START_DEADLINE_MS } from '../api/proxy/start.ts';
import type { GatewayConfig } from '../gateway/config.ts';

type Gateway = { url: string; temporal: Client; close(): Promise<void> };

async function gatewayOn(temporalAddress: string, taskQueue = stack().config.temporal.taskQueue): Promise<Gateway> {
  const temporal = await connectClient(temporalAddress, stack().config.temporal.namespace);
  const config: GatewayConfig = {
    ...stack().config,
    temporal: { ...stack().config.temporal, address: temporalAddress, taskQueue },
  };
  const server: Server = await startGateway(config, stack().orm, temporal, createLogger('api', 'silent'));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    temporal,
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      // A start cut off by its deadline may still have one SDK back-off timer pending, which
      // throws if it fires on a closed channel: let it run out first.
      await new Promise((r) => setTimeout(r, START_DEADLINE_MS));
      await temporal.connection.close();
    },
  };
}

describe('transactional calls while Temporal is unreachable', function () {
  this.timeout(120_000);
  let upstream: TestUpstream;
  let token: string;
  before(async () => {
    upstream = await startUpstream();
    token = await stack().token(`tenant-outage-${randomUUID()}`);
  });
  after(() => upstream.close());

  const invoke = async (gateway: Gateway, agentId: string, requestId: string) => {
    const t0 = performance.now();
    const reply = await callAt(gateway.url, 'POST', `/v1/proxy/${agentId}`, {
      token,
      body: requestId,
      headers: { 'content-type': 'text/plain', 'x-request-id': requestId },
    });
    return { ...reply, ms: performance.now() - t0 };
  };
  const rowsOf = (agentId: string) =>
    stack()
      .orm.em.getConnection()
      .execute<Array<{ id: string; request_id: string; status: string }>>(
        'select id, request_id, status from invocations where agent_id = ? order by created_at',
        [agentId],
      );

  it('answers 503 with Retry-After within the start deadline, then at once, leaving nothing; accepts again once Temporal is back', async () => {
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
    const gateway = await gatewayOn(server.address);
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    try {
      const before = await invoke(gateway, agentId, 'before');
      assert.equal(before.status, 202, before.text);

      await server.stop();
      const first = await invoke(gateway, agentId, 'during-1');
      assert.equal(first.status, 503, first.text);
      assert.deepEqual(first.json, { error: 'service temporarily unavailable' });
      assert.equal(first.headers['retry-after'], '1');
      assert.ok(
        first.ms < START_DEADLINE_MS + 1_000,
        `the first call during the outage took ${first.ms.toFixed(0)} ms`,
      );
      // The channel is known down now: no wait at all.
      const second = await invoke(gateway, agentId, 'during-2');
      assert.equal(second.status, 503, second.text);
      assert.ok(second.ms < 500, `a call while Temporal is known down took ${second.ms.toFixed(0)} ms`);

      assert.deepEqual(
        (await rowsOf(agentId)).map((r) => r.request_id),
        ['before'],
        'a 503 leaves no row',
      );
      assert.equal(upstream.received.length, 0, 'nothing sent (no worker serves this dev server)');

      server = await devServer();
      const backAt = performance.now();
      let after = await invoke(gateway, agentId, 'after');
      while (after.status === 503 && performance.now() - backAt < 10_000) {
        await new Promise((r) => setTimeout(r, 100));
        after = await invoke(gateway, agentId, 'after');
      }
      assert.equal(after.status, 202, after.text);
      const acceptedAfterMs = performance.now() - backAt;
      assert.ok(acceptedAfterMs < 5_000, `accepted again ${acceptedAfterMs.toFixed(0)} ms after Temporal was back`);
      assert.deepEqual(
        (await rowsOf(agentId)).map((r) => r.request_id),
        ['before', 'after'],
      );
    } finally {
      await gateway.close();
      await server.stop();
      // No worker serves this dev server: its rows would stay pending.
      await stack().orm.em.getConnection().execute('delete from invocations where agent_id = ?', [agentId]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('a start whose answer is lost (the workflow was created)', () => {
    let relay: TcpRelay;
    before(async () => {
      relay = await startTcpRelay(stack().infra.temporalAddress);
    });
    after(() => relay.close());

    it('answers 202 when the workflow has claimed the row: the call runs once', async () => {
      const gateway = await gatewayOn(relay.address);
      try {
        const agentId = await createAgent(token, { upstream_url: upstream.url });
        const requestId = `lost-answer-${randomUUID()}`;
        relay.swallowReplies = true;
        const reply = await invoke(gateway, agentId, requestId).finally(() => {
          relay.swallowReplies = false;
          relay.cut();
        });
        assert.equal(reply.status, 202, reply.text);
        assert.ok(reply.ms >= START_DEADLINE_MS - 50, 'answered after the start deadline, not on its acknowledgement');
        const row = await waitForRow(reply.json.invocation_id as string);
        assert.equal(row.status, 'succeeded');
        assert.equal(row.requestId, requestId);
        assert.equal(upstream.received.filter((r) => r.headers['x-request-id'] === requestId).length, 1);
        assert.equal((await stack().temporal.workflow.getHandle(row.id).describe()).status.name, 'COMPLETED');
      } finally {
        await gateway.close();
      }
    });

    it('answers 503 when no worker has claimed the row: row removed, workflow terminated, nothing sent', async () => {
      // A task queue no worker polls: the workflow is created but cannot claim the row.
      const gateway = await gatewayOn(relay.address, `outage-${randomUUID()}`);
      try {
        const agentId = await createAgent(token, { upstream_url: upstream.url });
        const requestId = `lost-answer-${randomUUID()}`;
        relay.swallowReplies = true;
        const reply = await invoke(gateway, agentId, requestId);
        assert.equal(reply.status, 503, reply.text);
        assert.deepEqual(await rowsOf(agentId), [], 'no row left');
        // The route's terminate travels the same one-way relay: it reaches the server too.
        let ids: string[] = [];
        for (
          const deadline = Date.now() + 15_000;
          ids.length === 0 && Date.now() < deadline;
          await new Promise((r) => setTimeout(r, 200))
        ) {
          ids = [];
          for await (const execution of stack().temporal.workflow.list({ query: `AgentId = '${agentId}'` }))
            ids.push(execution.workflowId);
        }
        assert.equal(ids.length, 1, 'the start did reach the server');
        let status = '';
        for (
          const deadline = Date.now() + 15_000;
          Date.now() < deadline;
          await new Promise((r) => setTimeout(r, 100))
        ) {
          status = (await stack().temporal.workflow.getHandle(ids[0]).describe()).status.name;
          if (status === 'TERMINATED') break;
        }
        assert.equal(status, 'TERMINATED');
        assert.equal(await invocationRow(ids[0]), null);
        assert.equal(upstream.received.filter((r) => r.headers['x-request-id'] === requestId).length, 0);
      } finally {
        relay.swallowReplies = false;
        relay.cut();
        await gateway.close();
      }
    });
  });
});
