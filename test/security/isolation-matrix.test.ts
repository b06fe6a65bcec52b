// The tenant-isolation matrix: two tenants, each with a full set of resources (active,
// pending, suspended, deleted and priced agents, a credential, a settlement configuration, a
// policy with recorded decisions, a completed invocation with its receipt, analytics). Every
// endpoint that takes an id is called by each tenant with every resource id of the other (in
// every id slot, including the invocation poll's mixed pairs) and must answer 404 with a
// coarse `{error}`; every list and aggregate, filtered by the other tenant's ids, shows none
// of them; the tenant's own writes touch only its own rows. Afterwards the other tenant's
// view of everything, its row counts and the upstream's request count are unchanged.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { assertError, clientTlsBundle } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { newPayTo, newPayer, signPayment, encodePayment } from '../support/x402.ts';
import { workflowResult } from '../support/workflows.ts';

type Json = Record<string, any>;

type Tenant = {
  name: string;
  token: string;
  agents: { active: string; pending: string; suspended: string; deleted: string; priced: string };
  credential: string;
  invocation: string;
  decision: string;
  facilitatorUrl: string;
};

const sql = <T = Json>(query: string, params: unknown[] = []) =>
  stack().orm.em.fork().getConnection().execute<T[]>(query, params);

describe('tenant isolation matrix', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  const tenants: Tenant[] = [];
  const since = new Date(Date.now() - 3600_000).toISOString();

  async function ok(
    method: string,
    path: string,
    token: string,
    json?: unknown,
    status = [200, 201, 202, 204],
  ): Promise<Json> {
    const res = await call(method, path, { token, ...(json === undefined ? {} : { json }) });
    assert.ok(status.includes(res.status), `${method} ${path}: ${res.status} ${res.text}`);
    return res.json;
  }

  async function setUpTenant(label: string): Promise<Tenant> {
    const name = `tenant-iso-${label}-${randomUUID()}`;
    const token = await stack().token(name);
    const credential = (
      await ok('POST', '/v1/credentials', token, {
        name: 'facilitator-cert',
        auth_type: 'none',
        source: 'managed',
        plaintext: clientTlsBundle(),
      })
    ).id;
    const agent = async (fields: Json) =>
      (await ok('POST', '/v1/agents', token, { name: uniqueName(label), tags: [`tag-${label}`], ...fields }))
        .id as string;
    const agents = {
      active: await agent({ upstream_url: upstream.url, credential_ref: credential, emit_receipts: true }),
      pending: await agent({}),
      suspended: await agent({ upstream_url: upstream.url }),
      deleted: await agent({ upstream_url: upstream.url }),
      priced: await agent({
        upstream_url: upstream.url,
        pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
      }),
    };
    await ok('POST', `/v1/agents/${agents.suspended}/suspend`, token, { reason: 'iso' });
    await ok('DELETE', `/v1/agents/${agents.deleted}`, token);
    const facilitatorUrl = `https://facilitator-${label}.example.com`;
    await ok('PUT', '/v1/settlement/config', token, {
      facilitator_url: facilitatorUrl,
      facilitator_credential_ref: credential,
    });
    // A warn rule for every call: each invocation leaves a decision behind.
    await ok('PUT', '/v1/policy', token, {
      default: 'allow',
      on_error: 'deny',
      rules: [{ action: 'warn', match: { agents: [agents.active] } }],
    });
    const invoked = await ok('POST', `/v1/proxy/${agents.active}`, token, { hello: label });
    const done = await waitForInvocation(token, agents.active, invoked.invocation_id);
    assert.equal(done.status, 'succeeded');
    await workflowResult(invoked.invocation_id);
    const decisions = await ok('GET', '/v1/policy/decisions?limit=100', token);
    assert.ok(decisions.data.length > 0, 'a decision was recorded');
    return {
      name,
      token,
      agents,
      credential,
      invocation: invoked.invocation_id,
      decision: decisions.data[0].id,
      facilitatorUrl,
    };
  }

  before(async () => {
    upstream = await startUpstream();
    tenants.push(await setUpTenant('a'), await setUpTenant('b'));
  });
  after(() => upstream.close());

  /** Everything a tenant can see of itself, plus its rows, read as the tenant (and by SQL). */
  async function viewOf(t: Tenant): Promise<Json> {
    const get = async (path: string) => {
      const res = await call('GET', path, { token: t.token });
      return { status: res.status, body: res.json };
    };
    const view: Json = {};
    for (const [k, id] of Object.entries(t.agents)) view[`agent:${k}`] = await get(`/v1/agents/${id}`);
    view.credential = await get(`/v1/credentials/${t.credential}`);
    view.settlement = await get('/v1/settlement/config');
    view.policy = await get('/v1/policy');
    view.decisions = await get('/v1/policy/decisions?limit=100');
    view.poll = await get(`/v1/proxy/${t.agents.active}/invocations/${t.invocation}`);
    view.receipt = await get(`/v1/invocations/${t.invocation}/receipt`);
    view.invocations = await get('/v1/invocations?limit=100');
    view.agents = await get('/v1/agents?limit=100');
    view.credentials = await get('/v1/credentials?limit=100');
    view.rows = {
      invocations: await sql('select id, status, updated_at from invocations where tenant_id = ? order by id', [
        t.name,
      ]),
      claims: await sql('select id, invocation_id from payment_claims where tenant_id = ? order by id', [t.name]),
      agents: await sql(
        'select id, name, suspended, deleted_at, updated_at from agents where tenant_id = ? order by id',
        [t.name],
      ),
      credentials: await sql('select id, version, updated_at from credentials where tenant_id = ? order by id', [
        t.name,
      ]),
    };
    return view;
  }

  for (const [me, other] of [
    [0, 1],
    [1, 0],
  ] as const) {
    it(`tenant ${'ab'[me]}: every id of tenant ${'ab'[other]} in every id slot of every endpoint is a 404, and changes nothing`, async () => {
      const self = tenants[me];
      const victim = tenants[other];
      const before = await viewOf(victim);
      const received = upstream.received.length;
      const theirIds = [...Object.values(victim.agents), victim.credential, victim.invocation, victim.decision];
      const payment = encodePayment(await signPayment(await newPayer(0n), { payTo: newPayTo(), value: 1000n }));

      const slots: Array<[string, (id: string) => string, unknown?, Record<string, string>?]> = [
        ['GET', (id) => `/v1/agents/${id}`],
        ['PATCH', (id) => `/v1/agents/${id}`, { description: 'hijacked', upstream_url: null }],
        ['DELETE', (id) => `/v1/agents/${id}`],
        ['POST', (id) => `/v1/agents/${id}/suspend`, { reason: 'hijacked' }],
        ['POST', (id) => `/v1/agents/${id}/unsuspend`, {}],
        ['GET', (id) => `/v1/credentials/${id}`],
        ['PUT', (id) => `/v1/credentials/${id}`, { name: 'hijacked', plaintext: 'hijacked-secret-value' }],
        ['DELETE', (id) => `/v1/credentials/${id}`],
        ['POST', (id) => `/v1/proxy/${id}`, { call: 'hijacked' }],
        ['POST', (id) => `/v1/proxy/${id}`, { call: 'hijacked' }, { 'x-payment': payment, 'x-gateway-model': 'm' }],
        ['POST', (id) => `/v1/proxy/${id}/stream`, { call: 'hijacked' }],
        ['POST', (id) => `/v1/proxy/${id}/stream`, { call: 'hijacked' }, { 'x-payment': payment }],
        ['GET', (id) => `/v1/invocations/${id}/receipt`],
        // The poll's two slots: their id beside one of ours, theirs in both, ours beside theirs.
        ['GET', (id) => `/v1/proxy/${self.agents.active}/invocations/${id}`],
        ['GET', (id) => `/v1/proxy/${id}/invocations/${self.invocation}`],
        ['GET', (id) => `/v1/proxy/${id}/invocations/${victim.invocation}`],
      ];
      let calls = 0;
      for (const [method, path, json, headers] of slots) {
        for (const id of theirIds) {
          const res = await call(method, path(id), {
            token: self.token,
            headers,
            ...(json === undefined ? {} : { json }),
          });
          assertError(res, 404);
          assert.ok(
            !theirIds.some((x) => res.text.includes(x)) && !res.text.includes(victim.name),
            `${method} ${path(id)}: the 404 names the resource`,
          );
          calls += 1;
        }
      }
      assert.ok(calls >= 16 * 8);

      // Lists and aggregates, filtered by their ids: empty of them.
      const theirs = (rows: Json[], key = 'id') =>
        rows.filter((r) => theirIds.includes(r[key]) || theirIds.includes(r.agent_id));
      for (const agentId of Object.values(victim.agents)) {
        const listed = await ok('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, self.token);
        assert.deepEqual(listed.data, [], 'their invocations listed by their agent id');
      }
      for (const status of ['pending', 'active', 'inactive']) {
        const listed = await ok('GET', `/v1/agents?status=${status}&tag=tag-${'ab'[other]}&limit=100`, self.token);
        assert.deepEqual(listed.data, [], `their agents listed (${status}, by their tag)`);
        assert.deepEqual(theirs((await ok('GET', `/v1/agents?status=${status}&limit=100`, self.token)).data), []);
      }
      assert.deepEqual(
        theirs((await ok('GET', '/v1/credentials?limit=100', self.token)).data),
        [],
        'their credentials listed',
      );
      assert.deepEqual(
        theirs((await ok('GET', '/v1/invocations?status=succeeded&limit=100', self.token)).data),
        [],
        'their invocations listed',
      );
      const decisions = await ok('GET', '/v1/policy/decisions?limit=100', self.token);
      assert.deepEqual(theirs(decisions.data), [], 'their decisions listed');
      assert.ok(decisions.data.every((d: Json) => Object.values(self.agents).includes(d.agent_id)));
      for (const bucket of ['hour', 'day']) {
        const analytics = await ok(
          'GET',
          `/v1/analytics?since=${encodeURIComponent(since)}&bucket=${bucket}`,
          self.token,
        );
        assert.deepEqual(theirs(analytics.groups, 'agent_id'), [], `their agents in analytics (${bucket})`);
        assert.ok(analytics.groups.every((g: Json) => Object.values(self.agents).includes(g.agent_id)));
      }
      // Tenant-wide singletons answer with the caller's own, never theirs.
      assert.equal((await ok('GET', '/v1/settlement/config', self.token)).facilitator_url, self.facilitatorUrl);
      assert.deepEqual((await ok('GET', '/v1/policy', self.token)).rules[0].match.agents, [self.agents.active]);

      // Their ids in bodies: references to their credential are refused as if absent.
      assertError(
        await call('POST', '/v1/agents', {
          token: self.token,
          json: { name: uniqueName('iso'), credential_ref: victim.credential },
        }),
        400,
      );
      assertError(
        await call('PATCH', `/v1/agents/${self.agents.pending}`, {
          token: self.token,
          json: { credential_ref: victim.credential },
        }),
        400,
      );
      assertError(
        await call('PUT', '/v1/settlement/config', {
          token: self.token,
          json: { facilitator_url: self.facilitatorUrl, facilitator_credential_ref: victim.credential },
        }),
        400,
      );
      // Writes to the caller's own singletons touch only its own.
      await ok('PUT', '/v1/settlement/config', self.token, {
        facilitator_url: self.facilitatorUrl,
        facilitator_credential_ref: self.credential,
      });
      await ok('PUT', '/v1/policy', self.token, {
        default: 'allow',
        on_error: 'deny',
        rules: [{ action: 'warn', match: { agents: [self.agents.active] } }],
      });

      assert.deepEqual(await viewOf(victim), before, 'their resources changed');
      assert.equal(upstream.received.length, received, 'something was forwarded upstream');
    });
  }
});
