// A2A agents through the gateway, on the real stack: @a2a-js/sdk's own client (A2A 1.0, and its
// 0.3 compatibility transport), unmodified, against an @a2a-js/sdk server as the upstream
// (test/support/a2a-server.ts). The client is given `{gateway}/v1/proxy/{id}/` as the agent's
// URL and a fetch that adds the tenant's bearer token; it reads the gateway's card there and
// calls the JSON-RPC endpoint the card names.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { AgentCard, CancelTaskRequest, GetTaskRequest, SendMessageRequest, type Task } from '@a2a-js/sdk';
import { Client, ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { LegacyJsonRpcTransport } from '@a2a-js/sdk/compat/v0_3/client';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { analyticsCaughtUp } from '../support/analytics.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { newPayTo, newPayer } from '../support/x402.ts';
import { payingFetch } from '../support/paying-client.ts';

/**
 * fetch with the tenant's token, as a caller of the gateway's /v1 runs an A2A client. The
 * headers go on as a plain object: x402-fetch copies them into its paid retry by spreading.
 */
function withToken(token: string, inner: typeof fetch = fetch): typeof fetch {
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return inner(input, { ...init, headers: Object.fromEntries(headers) });
  };
}

async function clientFor(agentId: string, fetchImpl: typeof fetch): Promise<Client> {
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  });
  return factory.createFromUrl(`${stack().apiUrl}/v1/proxy/${agentId}/`);
}

const message = (text: string, extra: Record<string, unknown> = {}, returnImmediately = false) =>
  SendMessageRequest.fromJSON({
    message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra },
    ...(returnImmediately ? { configuration: { returnImmediately: true } } : {}),
  });

const statusText = (task: Task) => {
  const part = task.status?.message?.parts[0]?.content;
  return part?.$case === 'text' ? part.value : undefined;
};

type Listed = {
  invocation_id: string;
  a2a_method: string | null;
  a2a_skill: string | null;
  a2a_task_id: string | null;
  a2a_context_id: string | null;
  status: string;
  mode: string;
  payment_amount: string | null;
};

async function taskCalls(token: string, taskId: string, count: number): Promise<Listed[]> {
  return waitFor(
    async () => {
      const listed = await call('GET', `/v1/invocations?task_id=${encodeURIComponent(taskId)}&limit=100`, { token });
      assert.equal(listed.status, 200, listed.text);
      const data = listed.json.data as Listed[];
      return data.length >= count && data.every((r) => r.status !== 'running') ? data.reverse() : null;
    },
    { what: `${count} calls of task ${taskId}` },
  );
}

describe('A2A agents through the gateway', function () {
  this.timeout(60_000);
  let upstream: A2aUpstream;
  let token: string;
  let agentId: string;

  before(async () => {
    upstream = await startA2aServer();
    token = await stack().token(`tenant-a2a-${randomUUID()}`);
    agentId = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
  });
  after(() => upstream.close());

  it("reads the upstream's card on create and shows its skills", async () => {
    const agent = await call('GET', `/v1/agents/${agentId}`, { token });
    assert.equal(agent.status, 200);
    assert.equal(agent.json.protocol, 'a2a');
    assert.deepEqual(
      agent.json.a2a_skills.map((s: { id: string }) => s.id),
      ['echo', 'count', 'wait'],
    );
    assert.equal(agent.json.a2a_card_url, `${stack().apiUrl}/v1/proxy/${agentId}/.well-known/agent-card.json`);

    // An upstream without a card is refused, and nothing is created.
    const other = await startA2aServer();
    await other.close();
    const refused = await call('POST', '/v1/agents', {
      token,
      json: { name: `a2a-${randomUUID()}`, protocol: 'a2a', upstream_url: other.url },
    });
    assert.equal(refused.status, 400);
    assert.match(refused.json.error, /agent card/);
  });

  it('reads the card again when an update names upstream_url, changed or not, and only then', async () => {
    const own = await startA2aServer();
    try {
      const id = await createAgent(token, { protocol: 'a2a', upstream_url: own.url });
      own.announceSkills(['summarize']);
      const skillsOf = async () =>
        (await call('GET', `/v1/agents/${id}`, { token })).json.a2a_skills.map((s: { id: string }) => s.id);
      const readsBefore = own.cardReads;
      const renamed = await call('PATCH', `/v1/agents/${id}`, { token, json: { name: `a2a-${randomUUID()}` } });
      assert.equal(renamed.status, 200);
      assert.equal(own.cardReads, readsBefore, 'an update that does not name upstream_url reads nothing');
      assert.deepEqual(await skillsOf(), ['echo', 'count', 'wait']);

      const refreshed = await call('PATCH', `/v1/agents/${id}`, { token, json: { upstream_url: own.url } });
      assert.equal(refreshed.status, 200);
      assert.deepEqual(
        refreshed.json.a2a_skills.map((s: { id: string }) => s.id),
        ['echo', 'count', 'wait', 'summarize'],
      );
      assert.deepEqual(await skillsOf(), ['echo', 'count', 'wait', 'summarize']);
    } finally {
      await own.close();
    }
  });

  it("serves the card pointing at the gateway, with the gateway's scheme and nothing of the upstream", async () => {
    const res = await fetch(`${stack().apiUrl}/v1/proxy/${agentId}/.well-known/agent-card.json`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(res.status, 200);
    const text = await res.text();
    const card = JSON.parse(text);
    const rpc = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;
    assert.deepEqual(
      card.supportedInterfaces.map((i: { url: string }) => i.url),
      [rpc, rpc],
    );
    assert.deepEqual(Object.keys(card.securitySchemes), ['gateway_bearer']);
    assert.ok(!text.includes(String(upstream.port)), 'no upstream port in the card');
    assert.ok(!text.includes('upstream_key') && !text.includes('x-upstream-key'), "no upstream's own scheme");
    assert.equal(AgentCard.fromJSON(card).name, 'test-a2a-upstream');
    // The card is behind the token like every /v1 route.
    const anonymous = await fetch(`${stack().apiUrl}/v1/proxy/${agentId}/.well-known/agent-card.json`);
    assert.equal(anonymous.status, 401);
  });

  it('sends a message and gets the task with the 1.0 client; the calls are listed by task', async () => {
    const client = await clientFor(agentId, withToken(token));
    const sent = (await client.sendMessage(message('echo hello'))) as Task;
    assert.equal(statusText(sent), 'echo: echo hello');
    const got = await client.getTask(GetTaskRequest.fromJSON({ id: sent.id }));
    assert.equal(got.id, sent.id);
    assert.equal(got.contextId, sent.contextId);
    // Both spellings reached the upstream as sent: the 1.0 client speaks 1.0.
    assert.deepEqual(
      upstream.bodies.slice(-2).map((b) => b.method),
      ['SendMessage', 'GetTask'],
    );

    const calls = await taskCalls(token, sent.id, 2);
    assert.deepEqual(
      calls.map((c) => [c.a2a_method, c.mode, c.status, c.a2a_context_id]),
      [
        ['SendMessage', 'streaming', 'succeeded', sent.contextId],
        ['GetTask', 'streaming', 'succeeded', sent.contextId],
      ],
    );
    for (const c of calls) assert.equal(c.a2a_task_id, sent.id);
  });

  it('takes unary methods on the transactional endpoint too, binding and recording the task its answer names', async () => {
    const accepted = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      headers: { 'a2a-version': '1.0' },
      json: {
        jsonrpc: '2.0',
        id: 7,
        method: 'SendMessage',
        params: { message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'echo later' }] } },
      },
    });
    assert.equal(accepted.status, 202, accepted.text);
    const row = await waitForRow(accepted.json.invocation_id);
    assert.equal(row.status, 'succeeded');
    assert.equal(row.a2aMethod, 'SendMessage');
    assert.equal(upstream.bodies.at(-1)?.method, 'SendMessage');
    // The task the answer named was bound before the call completed: the caller may ask about it.
    const client = await clientFor(agentId, withToken(token));
    const bound = await stack()
      .orm.em.getConnection()
      .execute<Array<{ task_id: string }>>(
        'select task_id from a2a_tasks where agent_id = ? order by created_at desc limit 1',
        [agentId],
      );
    const got = await client.getTask(GetTaskRequest.fromJSON({ id: bound[0].task_id }));
    assert.equal(statusText(got), 'echo: echo later');
    // The invocation records the task its answer created (the request named none), so the
    // task's calls list it.
    assert.equal(row.a2aTaskId, bound[0].task_id);
    assert.ok(row.a2aContextId);
    const listed = await taskCalls(token, bound[0].task_id, 2);
    assert.ok(listed.some((c) => c.invocation_id === accepted.json.invocation_id));
  });

  it('streams a message: the events arrive one by one, as the upstream sends them', async () => {
    const client = await clientFor(agentId, withToken(token));
    const arrivals: Array<string | undefined> = [];
    // The upstream publishes each step only once the caller has the event before it: held back
    // until the end, the first event would never arrive and the stream would never end.
    for await (const event of client.sendMessageStream(message('count 3 held'))) {
      arrivals.push(event.payload?.$case);
      if (arrivals.length <= 3) upstream.step();
    }
    assert.deepEqual(arrivals, ['task', 'statusUpdate', 'statusUpdate', 'statusUpdate', 'statusUpdate']);
  });

  it('gets and cancels a task with the 1.0 client and with the 0.3 compatibility client', async () => {
    const fetchImpl = withToken(token);
    const modern = await clientFor(agentId, fetchImpl);
    const card = await modern.getAgentCard();
    const legacy = new Client(
      new LegacyJsonRpcTransport({ endpoint: `${stack().apiUrl}/v1/proxy/${agentId}/stream`, fetchImpl }),
      card,
    );
    for (const [name, client] of [
      ['1.0', modern],
      ['0.3', legacy],
    ] as const) {
      const before = upstream.bodies.length;
      const waiting = (await client.sendMessage(message('wait', {}, true))) as Task;
      assert.ok(waiting.id, name);
      const got = await client.getTask(GetTaskRequest.fromJSON({ id: waiting.id }));
      assert.equal(got.id, waiting.id, name);
      const cancelled = await client.cancelTask(CancelTaskRequest.fromJSON({ id: waiting.id }));
      assert.equal(cancelled.id, waiting.id, name);
      assert.equal(cancelled.status?.state, 5 /* TASK_STATE_CANCELED */, name);
      assert.deepEqual(
        upstream.bodies.slice(before).map((b) => b.method),
        name === '1.0' ? ['SendMessage', 'GetTask', 'CancelTask'] : ['message/send', 'tasks/get', 'tasks/cancel'],
      );
      // One method whatever its spelling.
      const calls = await taskCalls(token, waiting.id, 3);
      assert.deepEqual(
        calls.map((c) => c.a2a_method),
        ['SendMessage', 'GetTask', 'CancelTask'],
        name,
      );
    }
  });

  it("refuses a task id not seen through the agent (another tenant's) before the upstream", async () => {
    const client = await clientFor(agentId, withToken(token));
    const mine = (await client.sendMessage(message('echo mine'))) as Task;

    const otherToken = await stack().token(`tenant-a2a-other-${randomUUID()}`);
    const otherAgent = await createAgent(otherToken, { protocol: 'a2a', upstream_url: upstream.url });
    const before = upstream.bodies.length;
    const stranger = await clientFor(otherAgent, withToken(otherToken));
    await assert.rejects(stranger.getTask(GetTaskRequest.fromJSON({ id: mine.id })));
    await assert.rejects(stranger.cancelTask(CancelTaskRequest.fromJSON({ id: mine.id })));
    // A message continuing someone else's task, and the raw answer: 404, nothing forwarded.
    for (const body of [
      { jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: mine.id } },
      {
        jsonrpc: '2.0',
        id: 2,
        method: 'SendMessage',
        params: { message: { messageId: 'm', role: 'ROLE_USER', parts: [{ text: 'echo x' }], taskId: mine.id } },
      },
    ]) {
      const res = await call('POST', `/v1/proxy/${otherAgent}/stream`, { token: otherToken, json: body });
      assert.equal(res.status, 404, res.text);
      assert.deepEqual(res.json, { error: 'task not found through this agent' });
    }
    assert.equal(upstream.bodies.length, before, 'nothing reached the upstream');
    // Nor through another agent of the same tenant.
    const sibling = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
    const res = await call('POST', `/v1/proxy/${sibling}/stream`, {
      token,
      json: { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: mine.id } },
    });
    assert.equal(res.status, 404);
  });

  it('refuses methods it does not know unless the agent passes them, and streaming methods on the transactional endpoint', async () => {
    const listTasks = { jsonrpc: '2.0', id: 1, method: 'ListTasks', params: {} };
    const refused = await call('POST', `/v1/proxy/${agentId}/stream`, { token, json: listTasks });
    assert.equal(refused.status, 400);
    const passing = await createAgent(token, {
      protocol: 'a2a',
      upstream_url: upstream.url,
      a2a_pass_unknown_methods: true,
    });
    const passed = await call('POST', `/v1/proxy/${passing}/stream`, {
      token,
      json: listTasks,
      headers: { 'a2a-version': '1.0' },
    });
    assert.equal(passed.status, 200, passed.text);
    const streamed = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      json: { jsonrpc: '2.0', id: 1, method: 'message/stream', params: { message: { messageId: 'm', parts: [] } } },
    });
    assert.equal(streamed.status, 400);
    assert.match(streamed.json.error, /streaming endpoint/);
  });

  it('applies policy per skill and per method, in either spelling', async () => {
    const policyToken = await stack().token(`tenant-a2a-policy-${randomUUID()}`);
    const agent = await createAgent(policyToken, { protocol: 'a2a', upstream_url: upstream.url });
    const put = await call('PUT', '/v1/policy', {
      token: policyToken,
      json: {
        default: 'allow',
        on_error: 'deny',
        rules: [
          { action: 'deny', match: { skills: ['count'] } },
          { action: 'deny', match: { methods: ['tasks/cancel'] } },
        ],
      },
    });
    assert.equal(put.status, 200, put.text);
    const client = await clientFor(agent, withToken(policyToken));
    const before = upstream.bodies.length;
    await assert.rejects(client.sendMessage(message('count 1 1', { metadata: { skill: 'count' } })), /403/);
    const echoed = (await client.sendMessage(message('echo allowed', { metadata: { skill: 'echo' } }))) as Task;
    await assert.rejects(client.cancelTask(CancelTaskRequest.fromJSON({ id: echoed.id })), /403/);
    assert.equal(upstream.bodies.length, before + 1, 'only the allowed call was forwarded');
    const decisions = await call('GET', '/v1/policy/decisions?limit=10', { token: policyToken });
    assert.deepEqual(
      decisions.json.data.map((d: { action: string; protocol: string }) => [d.action, d.protocol]),
      [
        ['deny', 'a2a'],
        ['allow', 'a2a'],
        ['deny', 'a2a'],
      ],
    );
  });

  it("prices a method: unpaid it is a 402, an unmodified x402 client as the A2A client's fetch pays it, a free method passes", async () => {
    const payer = await newPayer();
    const priced = await createAgent(token, {
      protocol: 'a2a',
      upstream_url: upstream.url,
      pricing: {
        amount: '7000',
        asset: 'USDC',
        network: 'base',
        pay_to: newPayTo(),
        methods: { 'message/send': '5000', GetTask: '0' },
      },
    });
    const agent = await call('GET', `/v1/agents/${priced}`, { token });
    assert.deepEqual(agent.json.pricing.methods, { SendMessage: '5000', GetTask: '0' });

    const unpaid = await clientFor(priced, withToken(token));
    await assert.rejects(unpaid.sendMessage(message('echo unpaid')), /402/);

    const paying = withToken(token, payingFetch('x402-fetch', payer, 10_000n).pay);
    const client = await clientFor(priced, paying);
    const sent = (await client.sendMessage(message('echo paid'))) as Task;
    assert.equal(statusText(sent), 'echo: echo paid');
    const got = await unpaid.getTask(GetTaskRequest.fromJSON({ id: sent.id }));
    assert.equal(got.id, sent.id);
    const calls = await taskCalls(token, sent.id, 2);
    assert.deepEqual(
      calls.map((c) => [c.a2a_method, c.payment_amount]),
      [
        ['SendMessage', '5000'],
        ['GetTask', null],
      ],
    );
  });

  it('counts A2A calls in analytics', async () => {
    const agent = await createAgent(token, { protocol: 'a2a', upstream_url: upstream.url });
    const client = await clientFor(agent, withToken(token));
    const sent = (await client.sendMessage(message('echo counted'))) as Task;
    await client.getTask(GetTaskRequest.fromJSON({ id: sent.id }));
    for (const c of await taskCalls(token, sent.id, 2)) await waitForRow(c.invocation_id);
    const since = new Date(Date.now() - 3_600_000).toISOString();
    await analyticsCaughtUp();
    const res = await call('GET', `/v1/analytics?since=${encodeURIComponent(since)}`, { token });
    assert.equal(res.status, 200, res.text);
    const group = (res.json.groups as Array<{ agent_id: string; count: number }>).filter((g) => g.agent_id === agent);
    assert.equal(
      group.reduce((n, g) => n + g.count, 0),
      2,
    );
  });
});
