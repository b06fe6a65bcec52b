// /v1/budgets on the real stack (docs/API.md "Budgets"): the resource (create, get, list, patch,
// delete; another tenant's behaves as absent; bad input a 400 naming the field, a webhook_url the
// SSRF guard refuses included; the alert secret shown once), a hard calls budget refusing with
// 429 naming itself and Retry-After until the window resets, before the upstream is called, on
// both endpoints, and a soft budget that never refuses and delivers each threshold's alert
// exactly once, signed, to a receiver that fails its first two attempts (the alert workflow
// retries with backoff; its run is visible in Temporal, found by TenantId), and still signed with
// the secret shown at creation after `npm run rotate-kek` re-wrapped it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startUpstream, type Received, type TestUpstream } from '../support/upstream.ts';
import { waitFor } from '../support/wait.ts';
import { verifySignature } from '../../gateway/budgets/alerts.ts';

describe('budgets', function () {
  this.timeout(60_000);
  let upstream: TestUpstream;
  before(async () => {
    upstream = await startUpstream();
  });
  after(() => upstream.close());

  const newTenant = async () => stack().token(`tenant-budgets-${randomUUID()}`);
  const create = (token: string, json: Record<string, unknown>) =>
    call('POST', '/v1/budgets', { token, json: { name: uniqueName('budget'), ...json } });

  describe('the resource', () => {
    it('creates, reads, lists, patches and deletes a budget, showing its current window', async () => {
      const token = await newTenant();
      const created = await create(token, { limit: { calls: 5 }, window: 'day', mode: 'hard' });
      assert.equal(created.status, 201, created.text);
      const budget = created.json;
      assert.match(budget.id, /^bud_[0-9a-f-]{36}$/);
      assert.deepEqual(budget.scope, {});
      assert.deepEqual(budget.limit, { amount: null, calls: 5 });
      assert.deepEqual(budget.used, { amount: '0', calls: 0 });
      assert.deepEqual(budget.remaining, { amount: null, calls: 5 });
      assert.equal(budget.alerts, null);
      assert.equal(budget.alert_secret, undefined, 'no alerts, no secret');
      const today = new Date().toISOString().slice(0, 10);
      assert.equal(budget.window_start, `${today}T00:00:00.000Z`);
      assert.equal(new Date(budget.resets_at).getTime() - new Date(budget.window_start).getTime(), 86_400_000);

      const got = await call('GET', `/v1/budgets/${budget.id}`, { token });
      assert.equal(got.status, 200, got.text);
      assert.equal(got.json.id, budget.id);
      const listed = await call('GET', '/v1/budgets', { token });
      assert.deepEqual(
        listed.json.data.map((b: { id: string }) => b.id),
        [budget.id],
      );

      const patched = await call('PATCH', `/v1/budgets/${budget.id}`, {
        token,
        json: { limit: { amount: '1000' }, window: 'total', mode: 'soft' },
      });
      assert.equal(patched.status, 200, patched.text);
      assert.deepEqual(patched.json.limit, { amount: '1000', calls: null });
      assert.equal(patched.json.mode, 'soft');
      assert.equal(patched.json.resets_at, null, 'a total window never resets');
      assert.equal(patched.json.window_start, budget.created_at);

      assert.equal((await call('DELETE', `/v1/budgets/${budget.id}`, { token })).status, 204);
      assert.equal((await call('GET', `/v1/budgets/${budget.id}`, { token })).status, 404);
    });

    it("answers another tenant's budget as absent on every operation", async () => {
      const owner = await newTenant();
      const other = await newTenant();
      const { json } = await create(owner, { limit: { calls: 1 }, window: 'hour', mode: 'hard' });
      for (const [method, body] of [['GET'], ['PATCH', { mode: 'soft' }], ['DELETE']] as const)
        assert.equal((await call(method, `/v1/budgets/${json.id}`, { token: other, json: body })).status, 404, method);
      assert.deepEqual((await call('GET', '/v1/budgets', { token: other })).json.data, []);
      assert.equal((await call('GET', `/v1/budgets/${json.id}`, { token: owner })).json.mode, 'hard');
    });

    it('refuses bad input with a 400 naming the field', async () => {
      const token = await newTenant();
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [{ limit: {}, window: 'day', mode: 'hard' }, /limit must set amount, calls or both/],
        [{ limit: { calls: 0 }, window: 'day', mode: 'hard' }, /limit.calls/],
        [{ limit: { amount: '1000000000000000' }, window: 'day', mode: 'hard' }, /limit.amount/],
        [{ limit: { amount: '0' }, window: 'day', mode: 'hard' }, /limit.amount/],
        [{ limit: { amount: '1.5' }, window: 'day', mode: 'hard' }, /limit.amount/],
        [{ limit: { calls: 1 }, window: 'year', mode: 'hard' }, /window/],
        [{ limit: { calls: 1 }, window: 'day', mode: 'strict' }, /mode/],
        [{ limit: { calls: 1 }, window: 'day', mode: 'hard', scope: { payer: 'alice' } }, /scope.payer/],
        [{ limit: { calls: 1 }, window: 'day', mode: 'hard', scope: { agent_id: 'agt_x' } }, /scope.agent_id/],
        [
          {
            limit: { calls: 1 },
            window: 'day',
            mode: 'soft',
            alerts: { thresholds: [0, 1], webhook_url: 'https://x.test' },
          },
          /alerts.thresholds/,
        ],
        [
          {
            limit: { calls: 1 },
            window: 'day',
            mode: 'soft',
            alerts: { thresholds: [0.5, 0.5], webhook_url: 'https://x.test' },
          },
          /distinct/,
        ],
      ];
      for (const [body, message] of cases) {
        const res = await create(token, body);
        assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.text}`);
        assert.match(res.json.error, message);
      }
    });

    it('holds a webhook_url to the SSRF rules of upstreams', async () => {
      const token = await newTenant();
      for (const url of [
        'http://169.254.169.254/latest',
        'http://localhost:9/x',
        'http://10.0.0.1/',
        'ftp://x.test/',
        'http://u:p@x.test/',
      ]) {
        const res = await create(token, {
          limit: { calls: 1 },
          window: 'day',
          mode: 'soft',
          alerts: { thresholds: [1], webhook_url: url },
        });
        assert.equal(res.status, 400, `${url}: ${res.text}`);
        assert.match(res.json.error, /invalid alerts.webhook_url/);
      }
    });

    it('shows the alert secret once: in the answer that created the first alerting budget', async () => {
      const token = await newTenant();
      const alerts = { thresholds: [0.8], webhook_url: 'https://alerts.example.com/hook' };
      const first = await create(token, { limit: { calls: 10 }, window: 'day', mode: 'soft', alerts });
      assert.equal(first.status, 201, first.text);
      assert.match(first.json.alert_secret, /^whsec_[A-Za-z0-9_-]{43}$/);
      const second = await create(token, { limit: { calls: 10 }, window: 'day', mode: 'soft', alerts });
      assert.equal(second.json.alert_secret, undefined);
      assert.equal((await call('GET', `/v1/budgets/${first.json.id}`, { token })).json.alert_secret, undefined);
      const { rows } = {
        rows: await stack().orm.em.getConnection().execute('select secret_ciphertext from budget_alert_secrets'),
      };
      for (const row of rows as Array<{ secret_ciphertext: Buffer }>)
        assert.ok(
          !Buffer.from(row.secret_ciphertext).toString('latin1').includes(first.json.alert_secret),
          'never stored in the clear',
        );
    });

    it('refuses a second budget of the same name with 409', async () => {
      const token = await newTenant();
      const name = uniqueName('same');
      assert.equal((await create(token, { name, limit: { calls: 1 }, window: 'day', mode: 'hard' })).status, 201);
      assert.equal((await create(token, { name, limit: { calls: 1 }, window: 'day', mode: 'hard' })).status, 409);
    });
  });

  describe('enforcement', () => {
    it('a hard calls budget admits its limit on both endpoints, then refuses before the upstream with 429 naming it', async () => {
      const token = await newTenant();
      const agentId = await createAgent(token, { name: uniqueName('capped'), upstream_url: upstream.url });
      const other = await createAgent(token, { name: uniqueName('other'), upstream_url: upstream.url });
      const { json: budget } = await create(token, {
        scope: { agent_id: agentId },
        limit: { calls: 3 },
        window: 'hour',
        mode: 'hard',
      });
      const send = (id: string, path = '') =>
        call('POST', `/v1/proxy/${id}${path}`, { token, body: 'x', headers: { 'content-type': 'text/plain' } });
      assert.equal((await send(agentId)).status, 202);
      assert.equal((await send(agentId, '/stream')).status, 200);
      assert.equal((await send(agentId)).status, 202);
      const reached = upstream.received.length;
      for (const path of ['', '/stream']) {
        const refused = await send(agentId, path);
        assert.equal(refused.status, 429, refused.text);
        assert.deepEqual(refused.json, { error: 'budget exceeded', budget_id: budget.id });
        const wait = Number(refused.headers['retry-after']);
        const untilReset = Math.ceil((new Date(budget.resets_at).getTime() - Date.now()) / 1000);
        assert.ok(wait >= 1 && wait <= untilReset + 1, `Retry-After ${wait} until the hour ends (${untilReset})`);
      }
      // Out of scope: another agent of the tenant is not counted.
      assert.equal((await send(other, '/stream')).status, 200);
      await waitFor(() => upstream.received.length >= reached + 1, { what: 'the other agent’s call' });
      const shown = await call('GET', `/v1/budgets/${budget.id}`, { token });
      assert.deepEqual(shown.json.used, { amount: '0', calls: 3 });
      assert.deepEqual(shown.json.remaining, { amount: null, calls: 0 });
      // Refusals by budget are counted, and listed as the budget's invocations.
      const metrics = await (await fetch(stack().metricsUrl)).text();
      assert.match(metrics, new RegExp(`gateway_budget_refusals_total\\{budget_id="${budget.id}"\\} 2`));
      const refusals = await waitFor(async () => {
        const res = await call('GET', `/v1/invocations?budget_id=${budget.id}`, { token });
        assert.equal(res.status, 200, res.text);
        return res.json.data.length === 2 && res.json.data;
      });
      for (const row of refusals) {
        assert.equal(row.status, 'failed');
        assert.equal(row.error_class, 'budget_exceeded');
        assert.equal(row.budget_id, budget.id);
        assert.equal(row.agent_id, agentId);
        assert.equal(row.payment_amount, null);
      }
      assert.deepEqual(refusals.map((r: { mode: string }) => r.mode).sort(), ['streaming', 'transactional']);
      // Another budget's filter, or another tenant's, lists none of them.
      const stranger = await newTenant();
      assert.deepEqual(
        (await call('GET', `/v1/invocations?budget_id=${budget.id}`, { token: stranger })).json.data,
        [],
      );
    });

    it("a tenant's exhausted budget over all its calls refuses none of another tenant's", async () => {
      const [mine, theirs] = [await newTenant(), await newTenant()];
      const myAgent = await createAgent(mine, { name: uniqueName('mine'), upstream_url: upstream.url });
      const theirAgent = await createAgent(theirs, { name: uniqueName('theirs'), upstream_url: upstream.url });
      const { json: budget } = await create(mine, { limit: { calls: 1 }, window: 'day', mode: 'hard' });
      assert.equal((await call('POST', `/v1/proxy/${myAgent}/stream`, { token: mine, body: 'x' })).status, 200);
      const refused = await call('POST', `/v1/proxy/${myAgent}/stream`, { token: mine, body: 'x' });
      assert.equal(refused.json.budget_id, budget.id);
      for (let i = 0; i < 3; i++)
        assert.equal((await call('POST', `/v1/proxy/${theirAgent}/stream`, { token: theirs, body: 'x' })).status, 200);
      // Nor may a tenant name another's agent in a scope to reach it: the budget counts its own calls only.
      const { json: aimed } = await create(mine, {
        scope: { agent_id: theirAgent },
        limit: { calls: 1 },
        window: 'day',
        mode: 'hard',
      });
      for (let i = 0; i < 2; i++)
        assert.equal((await call('POST', `/v1/proxy/${theirAgent}/stream`, { token: theirs, body: 'x' })).status, 200);
      assert.deepEqual((await call('GET', `/v1/budgets/${aimed.id}`, { token: mine })).json.used, {
        amount: '0',
        calls: 0,
      });
    });

    it('a budget raised by PATCH admits again at once', async () => {
      const token = await newTenant();
      const agentId = await createAgent(token, { name: uniqueName('raised'), upstream_url: upstream.url });
      const { json: budget } = await create(token, { limit: { calls: 1 }, window: 'day', mode: 'hard' });
      const send = () => call('POST', `/v1/proxy/${agentId}/stream`, { token, body: 'x' });
      assert.equal((await send()).status, 200);
      assert.equal((await send()).status, 429);
      await call('PATCH', `/v1/budgets/${budget.id}`, { token, json: { limit: { calls: 2 } } });
      assert.equal((await send()).status, 200);
      assert.equal((await send()).status, 429);
    });
  });

  describe('alerts', () => {
    let receiver: TestUpstream;
    let failuresLeft = 2;
    const attempts: Array<{ status: number; req: Received }> = [];
    before(async () => {
      receiver = await startUpstream((req, res) => {
        const status = failuresLeft-- > 0 ? 500 : 204;
        attempts.push({ status, req });
        res.statusCode = status;
        res.end();
      });
    });
    after(() => receiver.close());

    it('a soft budget never refuses and delivers each threshold once, signed, through a receiver failing twice', async () => {
      const tenant = `tenant-budgets-${randomUUID()}`;
      const token = await stack().token(tenant);
      const agentId = await createAgent(token, { name: uniqueName('alerted'), upstream_url: upstream.url });
      const created = await create(token, {
        scope: { agent_id: agentId },
        limit: { calls: 4 },
        window: 'month',
        mode: 'soft',
        alerts: { thresholds: [1, 0.5], webhook_url: `${receiver.url}/budget-hook` },
      });
      assert.equal(created.status, 201, created.text);
      const budget = created.json;
      const secret = budget.alert_secret as string;
      assert.deepEqual(budget.alerts.thresholds, [0.5, 1], 'sorted');
      for (let i = 0; i < 6; i++) {
        const res = await call('POST', `/v1/proxy/${agentId}/stream`, { token, body: 'x' });
        assert.equal(res.status, 200, `soft: call ${i + 1} admitted`);
      }
      const delivered = () => attempts.filter((a) => a.status === 204);
      await waitFor(() => delivered().length === 2, {
        timeoutMs: 30_000,
        what: 'both alerts delivered',
        state: () => attempts.map((a) => a.status).join(' '),
      });
      assert.equal(attempts.filter((a) => a.status === 500).length, 2, 'the first two attempts failed');

      const bodies = delivered().map((a) => {
        const text = a.req.body.toString('utf8');
        const signature = String(a.req.headers['x-gateway-signature']);
        assert.ok(
          verifySignature(secret, text, signature, Math.floor(Date.now() / 1000)),
          'signed with the tenant secret',
        );
        assert.ok(!verifySignature('whsec_wrong', text, signature, Math.floor(Date.now() / 1000)));
        assert.equal(a.req.url, `${new URL(receiver.url).pathname}/budget-hook`);
        assert.equal(a.req.headers['content-type'], 'application/json');
        return JSON.parse(text) as Record<string, unknown>;
      });
      assert.deepEqual(bodies.map((b) => b.threshold).sort(), [0.5, 1]);
      for (const body of bodies) {
        assert.equal(body.type, 'budget.threshold_crossed');
        assert.equal(body.budget_id, budget.id);
        assert.equal(body.window_start, budget.window_start);
        assert.deepEqual(body.limit, { amount: null, calls: 4 });
      }
      // Each alert's workflow, visible in Temporal, completed once its receiver took it.
      for (const body of bodies) {
        const handle = stack().temporal.workflow.getHandle(`budget-${String(body.id)}`);
        const described = await waitFor(async () => {
          const d = await handle.describe();
          return d.status.name === 'COMPLETED' && d;
        });
        assert.equal(described.type, 'BudgetAlertWorkflow');
      }
      // Filed under its tenant: a visibility query by TenantId finds both (visibility is eventually consistent).
      const query = `TenantId = '${tenant}' AND WorkflowType = 'BudgetAlertWorkflow'`;
      const listed = await waitFor(async () => {
        const ids: string[] = [];
        for await (const wf of stack().temporal.workflow.list({ query })) ids.push(wf.workflowId);
        return ids.length === 2 && ids.sort();
      });
      assert.deepEqual(listed, bodies.map((b) => `budget-${String(b.id)}`).sort());
      // More calls in the same window cross nothing again.
      for (let i = 0; i < 2; i++) await call('POST', `/v1/proxy/${agentId}/stream`, { token, body: 'x' });
      const shown = await waitFor(async () => {
        const res = await call('GET', `/v1/budgets/${budget.id}`, { token });
        return res.json.used.calls === 8 && res.json;
      });
      assert.deepEqual(shown.remaining, { amount: null, calls: 0 }, 'never below 0');
      assert.equal(delivered().length, 2);
    });

    it('npm run rotate-kek re-wraps the alert secret, and alerts are still signed with the secret shown at creation', async () => {
      const tenant = `tenant-budgets-kek-${randomUUID()}`;
      const token = await stack().token(tenant);
      const hooks: Received[] = [];
      const hook = await startUpstream((req, res) => {
        hooks.push(req);
        res.statusCode = 204;
        res.end();
      });
      try {
        const agentId = await createAgent(token, { name: uniqueName('rotated'), upstream_url: upstream.url });
        const created = await create(token, {
          scope: { agent_id: agentId },
          limit: { calls: 2 },
          window: 'month',
          mode: 'soft',
          alerts: { thresholds: [0.5], webhook_url: `${hook.url}/rotated` },
        });
        assert.equal(created.status, 201, created.text);
        const secret = created.json.alert_secret as string;
        const rowOf = async () =>
          (
            await stack()
              .orm.em.fork()
              .getConnection()
              .execute<Array<{ kek_id: string; wrapped_key: Buffer; secret_ciphertext: Buffer }>>(
                'select kek_id, wrapped_key, secret_ciphertext from budget_alert_secrets where tenant_id = ?',
                [tenant],
              )
          )[0];
        const before = await rowOf();
        assert.equal(before.kek_id, 'dev');

        const keyring = stack().config.vault.keyring;
        const run = spawnSync('npm', ['run', '--silent', 'rotate-kek'], {
          env: {
            ...process.env,
            DATABASE_URL: stack().config.databaseUrl,
            VAULT_KEKS: [...keyring.keys.entries()].map(([id, key]) => `${id}:${key.toString('base64')}`).join(','),
            VAULT_KEK_CURRENT: 'next',
          },
          encoding: 'utf8',
          timeout: 60_000,
        });
        assert.equal(run.status, 0, run.stdout + run.stderr);
        assert.match(run.stdout, /re-wrapped [1-9]\d*/);
        const after = await rowOf();
        assert.equal(after.kek_id, 'next');
        assert.notDeepEqual(after.wrapped_key, before.wrapped_key);
        assert.deepEqual(after.secret_ciphertext, before.secret_ciphertext, 'the secret itself is untouched');

        // The worker unwraps the re-wrapped key: the alert is signed with the same secret.
        assert.equal((await call('POST', `/v1/proxy/${agentId}/stream`, { token, body: 'x' })).status, 200);
        await waitFor(() => hooks.length === 1, { timeoutMs: 30_000, what: 'the alert delivered' });
        const text = hooks[0].body.toString('utf8');
        const signature = String(hooks[0].headers['x-gateway-signature']);
        assert.ok(verifySignature(secret, text, signature, Math.floor(Date.now() / 1000)));
      } finally {
        await hook.close();
      }
    });
  });
});
