// GET /v1/invocations (the list: filters, newest first, cursor paging, tenant scope) and the
// agent's credential injected at call time on both endpoints, never the caller's.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, waitForInvocation } from '../support/http.ts';
import { createAgent, rawUpstream, readAll, waitForRow, type RawUpstream } from '../support/proxy-helpers.ts';
import { InvocationSchema } from '../../gateway/db/entities.ts';

describe('proxy: invocation list and credential injection', () => {
  let up: RawUpstream;
  before(async () => {
    up = await rawUpstream((req, res) => {
      void readAll(req).then((body) => {
        res.statusCode = body.toString() === 'fail' ? 503 : 200;
        res.end('ok');
      });
    });
  });
  after(() => up.close());

  describe('GET /v1/invocations', () => {
    let token: string;
    let tenant: string;
    let agentA: string;
    let agentB: string;
    const ids: string[] = [];
    before(async () => {
      tenant = `tenant-list-${randomUUID()}`;
      token = await stack().token(tenant);
      agentA = await createAgent(token, { upstream_url: up.url });
      agentB = await createAgent(token, { upstream_url: up.url });
      for (const [agentId, body] of [
        [agentA, 'a1'],
        [agentB, 'b1'],
        [agentA, 'fail'],
        [agentA, 'a3'],
        [agentB, 'b2'],
      ]) {
        const res = await call('POST', `/v1/proxy/${agentId}`, { token, body });
        ids.push(res.json.invocation_id);
        await waitForInvocation(token, agentId, res.json.invocation_id);
      }
    });

    it('lists the tenant’s invocations newest first as {data, next_cursor}', async () => {
      const res = await call('GET', '/v1/invocations', { token });
      assert.equal(res.status, 200);
      assert.deepEqual(Object.keys(res.json).sort(), ['data', 'next_cursor']);
      assert.deepEqual(
        res.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        [...ids].reverse(),
      );
      assert.equal(res.json.next_cursor, null);
      const first = res.json.data[0];
      for (const field of [
        'invocation_id',
        'agent_id',
        'status',
        'created_at',
        'updated_at',
        'completed_at',
        'upstream_status',
        'latency_ms',
        'mcp_method',
        'mcp_tool',
        'payment_network',
        'payment_asset',
        'payment_amount',
        'payment_payer',
        'payment_nonce',
        'payment_transaction',
        'ttft_ms',
        'error_class',
        'mode',
        'model',
        'request_id',
      ])
        assert.ok(field in first, field);
      assert.equal(first.response_body_b64, undefined);
      // Another tenant sees none of them.
      const other = await call('GET', '/v1/invocations', {
        token: await stack().token(`tenant-list-other-${randomUUID()}`),
      });
      assert.deepEqual(other.json, { data: [], next_cursor: null });
    });

    // A payer's calls by its address in any letter case: test/console/console.test.ts.
    it('filters by caller: one user of the tenant', async () => {
      const all = [...ids].reverse();
      const mine = await call('GET', '/v1/invocations?caller=user-1', { token });
      assert.deepEqual(
        mine.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        all,
      );
      const another = await stack().token(tenant, 'user-2');
      const theirs = await call('GET', '/v1/invocations?caller=user-2', { token: another });
      assert.deepEqual(theirs.json.data, [], 'user-2 of the same tenant made none of them');
      assert.equal(
        (await call('GET', '/v1/invocations?caller=user-2', { token })).json.data.length,
        0,
        'the filter, not the token, decides',
      );
    });

    it('filters by agent_id, status, since and until', async () => {
      const byAgent = await call('GET', `/v1/invocations?agent_id=${agentB}`, { token });
      assert.deepEqual(
        byAgent.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        [ids[4], ids[1]],
      );
      const failed = await call('GET', '/v1/invocations?status=failed', { token });
      assert.deepEqual(
        failed.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        [ids[2]],
      );
      const both = await call('GET', `/v1/invocations?agent_id=${agentA}&status=succeeded`, { token });
      assert.deepEqual(
        both.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        [ids[3], ids[0]],
      );

      const rows = await stack()
        .orm.em.fork()
        .find(InvocationSchema, { id: { $in: ids } }, { orderBy: { createdAt: 'asc' } });
      const since = rows[1].createdAt.toISOString();
      const until = rows[3].createdAt.toISOString();
      const window = await call('GET', `/v1/invocations?since=${since}&until=${until}`, { token });
      assert.deepEqual(
        window.json.data.map((i: { invocation_id: string }) => i.invocation_id),
        [ids[3], ids[2], ids[1]],
      );
      // The same window as +00:00 with the + unencoded (decoded to a space), encoded, and as
      // another offset: the one timestamp reading every endpoint shares.
      const plus = (iso: string) => iso.replace('Z', '+00:00');
      const east = (iso: string) => new Date(Date.parse(iso) + 5.5 * 3_600_000).toISOString().replace('Z', '+05:30');
      for (const [from, to] of [
        [plus(since), plus(until)],
        [encodeURIComponent(plus(since)), encodeURIComponent(plus(until))],
        [east(since), east(until)],
      ]) {
        const same = await call('GET', `/v1/invocations?since=${from}&until=${to}`, { token });
        assert.equal(same.status, 200, `${from} ${same.text}`);
        assert.deepEqual(
          same.json.data.map((i: { invocation_id: string }) => i.invocation_id),
          [ids[3], ids[2], ids[1]],
          from,
        );
      }
      const future = await call('GET', `/v1/invocations?since=${new Date(Date.now() + 60_000).toISOString()}`, {
        token,
      });
      assert.deepEqual(future.json.data, []);
    });

    it('pages with limit and an opaque cursor, without gaps or repeats', async () => {
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const res = await call('GET', `/v1/invocations?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { token });
        assert.equal(res.status, 200);
        assert.ok(res.json.data.length <= 2);
        seen.push(...res.json.data.map((i: { invocation_id: string }) => i.invocation_id));
        cursor = res.json.next_cursor;
        pages += 1;
      } while (cursor);
      assert.equal(pages, 3);
      assert.deepEqual(seen, [...ids].reverse());
      // Out-of-range limits are clamped to 1..100.
      assert.equal((await call('GET', '/v1/invocations?limit=0', { token })).json.data.length, 1);
      assert.equal((await call('GET', '/v1/invocations?limit=1000', { token })).json.data.length, 5);
    });

    it('answers 400 for malformed parameters', async () => {
      for (const q of [
        'status=done',
        'limit=ten',
        'since=yesterday',
        'until=2025-01-01',
        'cursor=nope',
        'agent_id=xyz',
        `since=${new Date().toISOString()}&until=2000-01-01T00:00:00Z`,
        'status=failed&status=succeeded',
        'caller=',
        'caller=a&caller=b',
        `caller=${'u'.repeat(257)}`,
      ]) {
        const res = await call('GET', `/v1/invocations?${q}`, { token });
        assert.equal(res.status, 400, q);
        assert.ok(typeof res.json.error === 'string');
      }
    });
  });

  describe('credential injection', () => {
    it('injects the agent’s bearer or api_key credential at call time on both endpoints, never the caller’s token', async () => {
      const token = await stack().token(`tenant-cred-${randomUUID()}`);
      const bearer = await call('POST', '/v1/credentials', {
        token,
        json: { name: `b-${randomUUID()}`, auth_type: 'bearer', source: 'managed', plaintext: 'upstream-secret-1' },
      });
      assert.equal(bearer.status, 201, bearer.text);
      const apiKey = await call('POST', '/v1/credentials', {
        token,
        json: {
          name: `k-${randomUUID()}`,
          auth_type: 'api_key',
          source: 'managed',
          plaintext: 'key-2',
          header_name: 'X-Api-Key',
        },
      });
      assert.equal(apiKey.status, 201, apiKey.text);
      const withBearer = await createAgent(token, { upstream_url: up.url, credential_ref: bearer.json.id });
      const withKey = await createAgent(token, { upstream_url: up.url, credential_ref: apiKey.json.id });

      const t = await call('POST', `/v1/proxy/${withBearer}`, {
        token,
        body: 'cred-t',
        headers: { 'x-request-id': 'cred-t' },
      });
      await waitForInvocation(token, withBearer, t.json.invocation_id);
      const s = await call('POST', `/v1/proxy/${withKey}/stream`, {
        token,
        body: 'cred-s',
        headers: { 'x-request-id': 'cred-s', 'x-api-key': 'callers-own' },
      });
      assert.equal(s.status, 200);
      const seenT = up.hits.find((h) => h.headers['x-request-id'] === 'cred-t')!;
      const seenS = up.hits.find((h) => h.headers['x-request-id'] === 'cred-s')!;
      assert.equal(seenT.headers.authorization, 'Bearer upstream-secret-1');
      assert.equal(seenS.headers.authorization, undefined);
      assert.equal(seenS.headers['x-api-key'], 'key-2', 'the agent’s key replaces the caller’s');

      // Rotated: the next call carries the new secret (resolved at call time, not cached).
      const rotated = await call('PUT', `/v1/credentials/${bearer.json.id}`, {
        token,
        json: { plaintext: 'upstream-secret-2' },
      });
      assert.equal(rotated.status, 200, rotated.text);
      const t2 = await call('POST', `/v1/proxy/${withBearer}/stream`, {
        token,
        body: 'x',
        headers: { 'x-request-id': 'cred-t2' },
      });
      assert.equal(t2.status, 200);
      assert.equal(
        up.hits.find((h) => h.headers['x-request-id'] === 'cred-t2')?.headers.authorization,
        'Bearer upstream-secret-2',
      );

      // The secret never lands in the invocation record.
      const row = await waitForRow(t.json.invocation_id);
      assert.ok(!JSON.stringify(row).includes('upstream-secret'));
      const history = JSON.stringify(await stack().temporal.workflow.getHandle(t.json.invocation_id).fetchHistory());
      assert.ok(!history.includes('upstream-secret'));
    });
  });
});
