// The thread through: auth, probes, one agent created and invoked through Temporal, the
// result polled, and the workflow visible in Temporal with its search attributes.
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startedWorkflow } from '../support/workflows.ts';
import { waitFor } from '../support/wait.ts';

describe('foundation: one call travels the whole way', () => {
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream();
  });
  after(() => upstream.close());

  it('serves liveness, readiness and build metadata without auth', async () => {
    assert.equal((await call('GET', '/healthz')).status, 200);
    const ready = await call('GET', '/readyz');
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.json.checks, { database: true, start_backlog: true });
    assert.equal(ready.json.temporal, 'reachable');
    // The stack's backlog is whatever earlier test files left (their calls accepted while
    // Temporal was away, say): a count under the limit, since the API is ready.
    const { accepted_unstarted: unstarted, limit } = ready.json.start_backlog;
    assert.ok(Number.isInteger(unstarted) && unstarted >= 0 && unstarted < limit, JSON.stringify(ready.json));
    const version = await call('GET', '/version');
    assert.equal(version.json.name, 'agent-gateway');
    assert.match(version.json.version, /^\d+\.\d+\.\d+/);
  });

  it('answers 401 with an empty body for a missing, invalid or claim-less token', async () => {
    const secret = new TextEncoder().encode(stack().infra.secrets.jwtSecret);
    const noTenant = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u')
      .setExpirationTime('1h')
      .sign(secret);
    const wrongKey = await new SignJWT({ tenant_id: 't' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u')
      .sign(new TextEncoder().encode('not-the-secret-at-all-32-bytes!!'));
    const expired = await new SignJWT({ tenant_id: 't' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u')
      .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
      .sign(secret);
    for (const headers of [
      {} as Record<string, string>,
      { authorization: 'Bearer nonsense' },
      { authorization: `Bearer ${noTenant}` },
      { authorization: `Bearer ${wrongKey}` },
      { authorization: `Bearer ${expired}` },
      { authorization: 'Basic abc' },
    ]) {
      const res = await call('GET', '/v1/agents/agt_x', { headers });
      assert.equal(res.status, 401);
      assert.equal(res.text, '');
    }
  });

  it('creates an agent, invokes it through InvocationWorkflow and polls it to succeeded', async () => {
    const token = await stack().token('tenant-foundation');
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName(), upstream_url: upstream.url, capture_body: true },
    });
    assert.equal(created.status, 201);
    assert.equal(created.json.status, 'active');
    const agentId: string = created.json.id;
    assert.match(agentId, /^agt_[0-9a-f-]{36}$/);

    const body = `hello ${Date.now()}`;
    const invoked = await call('POST', `/v1/proxy/${agentId}`, {
      token,
      body,
      headers: { 'content-type': 'text/plain', 'x-request-id': 'req-foundation-1' },
    });
    assert.equal(invoked.status, 202);
    const invocationId: string = invoked.json.invocation_id;
    assert.match(invocationId, /^inv_[0-9a-f-]{36}$/);
    assert.equal(invoked.headers['x-gateway-invocation-id'], invocationId);

    const done = await waitForInvocation(token, agentId, invocationId);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.upstream_status, 200);
    assert.equal(typeof done.latency_ms, 'number');
    assert.ok(done.completed_at);
    assert.deepEqual(JSON.parse(Buffer.from(done.response_body_b64, 'base64').toString()), { echo: body });

    // The upstream got the body verbatim, the request id, and never the caller's token.
    const seen = upstream.received.find((r) => r.body.toString() === body);
    assert.ok(seen, 'upstream received the body');
    assert.equal(seen.headers['x-request-id'], 'req-foundation-1');
    assert.equal(seen.headers.authorization, undefined);

    // The workflow is in Temporal under the invocation id, findable by tenant and agent.
    const handle = await startedWorkflow(invocationId);
    // The row is completed by the activity; the workflow's last search-attribute update follows it.
    assert.equal((await handle.result()).status, 'succeeded');
    const description = await handle.describe();
    assert.equal(description.type, 'InvocationWorkflow');
    assert.equal(description.searchAttributes.TenantId?.[0], 'tenant-foundation');
    assert.equal(description.searchAttributes.AgentId?.[0], agentId);
    assert.equal(description.searchAttributes.InvocationStatus?.[0], 'succeeded');

    // Bodies travel by reference: the history never carries them.
    const events = (await handle.fetchHistory()).events ?? [];
    const history = JSON.stringify(events);
    assert.ok(!history.includes(body), 'request body absent from the workflow history');
    // One search-attribute update, the outcome's: InvocationStatus goes from `pending` to it.
    assert.equal(events.filter((e) => e.upsertWorkflowSearchAttributesEventAttributes).length, 1);
  });

  it('finds invocations in Temporal by tenant and agent search attributes', async () => {
    const token = await stack().token('tenant-search');
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName(), upstream_url: upstream.url },
    });
    const invoked = await call('POST', `/v1/proxy/${created.json.id}`, { token, body: 'x' });
    await waitForInvocation(token, created.json.id, invoked.json.invocation_id);
    const query = `TenantId = 'tenant-search' AND AgentId = '${created.json.id}'`;
    const ids = await waitFor(
      async () => {
        const found: string[] = [];
        for await (const wf of stack().temporal.workflow.list({ query })) found.push(wf.workflowId);
        return found.length > 0 && found;
      },
      { everyMs: 200, what: `a workflow listed by ${query}` },
    );
    assert.deepEqual(ids, [invoked.json.invocation_id]);
  });

  it('keeps agents and invocations tenant-scoped: another tenant gets 404', async () => {
    const owner = await stack().token('tenant-a');
    const stranger = await stack().token('tenant-b');
    const created = await call('POST', '/v1/agents', {
      token: owner,
      json: { name: uniqueName(), upstream_url: upstream.url },
    });
    const invoked = await call('POST', `/v1/proxy/${created.json.id}`, { token: owner, body: 'x' });
    assert.equal((await call('GET', `/v1/agents/${created.json.id}`, { token: stranger })).status, 404);
    assert.equal((await call('POST', `/v1/proxy/${created.json.id}`, { token: stranger, body: 'x' })).status, 404);
    assert.equal(
      (await call('GET', `/v1/proxy/${created.json.id}/invocations/${invoked.json.invocation_id}`, { token: stranger }))
        .status,
      404,
    );
  });
});
