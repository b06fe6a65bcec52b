// The agent catalog through HTTP: create rules, PATCH, soft delete, suspension, list with
// filters and cursor pagination, and every status code of docs/API.md "Agents".
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { assertError } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { upstreamUrlProblem } from '../../api/upstream-url.ts';
import { loadGatewayConfig } from '../../gateway/config.ts';

const PAY_TO_LOWER = '0x52908400098527886e0f7030069857d2e4169ee7';
const PAY_TO_CHECKSUMMED = '0x52908400098527886E0F7030069857D2E4169EE7';
const pricing = { amount: '10000', asset: 'USDC', network: 'base', pay_to: PAY_TO_LOWER };

describe('agents: the catalog', () => {
  let upstream: TestUpstream;
  let token: string;
  before(async () => {
    upstream = await startUpstream();
    token = await stack().token('tenant-agents', 'alice');
  });
  after(() => upstream.close());

  const create = (json: unknown, as = token) => call('POST', '/v1/agents', { token: as, json });

  describe('POST /v1/agents', () => {
    it('creates with defaults: protocol http, pending without upstream_url, creator, timestamps', async () => {
      const res = await create({ name: uniqueName() });
      assert.equal(res.status, 201);
      const a = res.json;
      assert.match(a.id, /^agt_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      assert.equal(a.status, 'pending');
      assert.equal(a.protocol, 'http');
      assert.equal(a.tenant_id, 'tenant-agents');
      assert.equal(a.created_by, 'alice');
      assert.deepEqual([a.tags, a.metadata, a.pricing, a.upstream_url, a.credential_ref], [[], {}, null, null, null]);
      assert.deepEqual([a.emit_receipts, a.capture_body, a.suspended, a.suspended_reason], [false, false, false, null]);
      assert.deepEqual(
        [a.rate_limit_rps, a.rate_limit_burst, a.mcp_transport, a.mcp_protocol_version],
        [null, null, null, null],
      );
      assert.ok(!Number.isNaN(Date.parse(a.created_at)) && a.created_at === a.updated_at);
    });

    it('creates an active agent with every field; pay_to comes back checksummed; burst defaults to 20', async () => {
      const name = uniqueName();
      const res = await create({
        name,
        description: 'echo',
        tags: ['a', 'b'],
        metadata: { team: 'x', n: 1 },
        upstream_url: upstream.url,
        emit_receipts: true,
        capture_body: true,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        mcp_protocol_version: '2025-06-18',
        pricing: { ...pricing, tools: { search: '5000', free: '0' } },
        rate_limit_rps: 2.5,
        retry_non_idempotent: true,
      });
      assert.equal(res.status, 201, res.text);
      const a = res.json;
      assert.equal(a.status, 'active');
      assert.deepEqual(a.pricing, {
        amount: '10000',
        asset: 'USDC',
        network: 'base',
        pay_to: PAY_TO_CHECKSUMMED,
        tools: { search: '5000', free: '0' },
      });
      assert.equal(a.rate_limit_rps, 2.5);
      assert.equal(a.rate_limit_burst, 20);
      assert.deepEqual([a.name, a.description, a.tags, a.metadata], [name, 'echo', ['a', 'b'], { team: 'x', n: 1 }]);
      assert.deepEqual([a.protocol, a.mcp_transport, a.mcp_protocol_version], ['mcp', 'streamable_http', '2025-06-18']);
      assert.equal(
        (await create({ name: uniqueName(), rate_limit_rps: 1, rate_limit_burst: 3 })).json.rate_limit_burst,
        3,
      );
    });

    it('does not validate mcp_protocol_version for http agents', async () => {
      assert.equal((await create({ name: uniqueName(), mcp_protocol_version: 'anything' })).status, 201);
    });

    it('answers 400 for invalid bodies, naming the field', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{}, /name is required/],
        [{ name: '' }, /name/],
        [{ name: '   ' }, /name/],
        [{ name: 42 }, /name/],
        [{ name: 'x', surprise: 1 }, /unknown field: surprise/],
        [{ name: 'x', tags: 'a' }, /tags/],
        [{ name: 'x', metadata: [] }, /metadata/],
        [{ name: 'x', emit_receipts: 'yes' }, /emit_receipts/],
        [{ name: 'x', protocol: 'grpc' }, /protocol/],
        [{ name: 'x', protocol: 'mcp' }, /mcp_transport/],
        [{ name: 'x', protocol: 'mcp', mcp_transport: 'sse' }, /mcp_transport/],
        [{ name: 'x', mcp_transport: 'streamable_http' }, /mcp_transport is only valid/],
        [
          { name: 'x', protocol: 'mcp', mcp_transport: 'streamable_http', mcp_protocol_version: '2023-01-01' },
          /mcp_protocol_version/,
        ],
        [{ name: 'x', pricing: { ...pricing, asset: 'ETH' } }, /pricing.asset/],
        [{ name: 'x', pricing: { ...pricing, network: 'base-sepolia' } }, /pricing.network/],
        [{ name: 'x', pricing: { ...pricing, amount: '1.5' } }, /pricing.amount/],
        [{ name: 'x', pricing: { ...pricing, amount: 10000 } }, /pricing.amount/],
        [{ name: 'x', pricing: { ...pricing, amount: '0' } }, /pricing.amount/],
        [{ name: 'x', pricing: { ...pricing, amount: (1n << 256n).toString() } }, /pricing.amount/],
        [{ name: 'x', pricing: { ...pricing, pay_to: 'alice' } }, /pricing.pay_to/],
        [{ name: 'x', pricing: { ...pricing, pay_to: '0x52908400098527886E0F7030069857D2E4169Ee7' } }, /checksum/],
        [{ name: 'x', pricing: { amount: '1', asset: 'USDC', network: 'base' } }, /pricing.pay_to/],
        [{ name: 'x', pricing: { ...pricing, tools: { search: '1' } } }, /pricing.tools requires protocol mcp/],
        [{ name: 'x', rate_limit_burst: 5 }, /rate_limit_burst requires rate_limit_rps/],
        [{ name: 'x', rate_limit_rps: -1 }, /rate_limit_rps/],
        [{ name: 'x', credential_ref: 'cred_nope' }, /credential_ref/],
      ];
      for (const [json, message] of cases) assertError(await create(json), 400, message);
      // Not JSON at all, or not an object.
      assertError(
        await call('POST', '/v1/agents', { token, body: '{"name":', headers: { 'content-type': 'application/json' } }),
        400,
      );
      assertError(await call('POST', '/v1/agents', { token, json: ['x'] }), 400);
    });

    it('rejects upstream_url schemes, userinfo, localhost, loopback, private, link-local and unique-local hosts', async () => {
      const bad = [
        'ftp://example.com/x',
        'not a url',
        'http://',
        'http://user:pw@example.com/',
        'http://localhost:8080/',
        'http://api.localhost/',
        'http://127.0.0.2/', // 127.0.0.1 itself is allow-listed for the tests' upstreams
        'http://0.0.0.0/',
        'http://10.1.2.3/',
        'http://172.16.0.1/',
        'http://192.168.1.1/',
        'http://169.254.169.254/latest/meta-data',
        'http://100.64.0.1/',
        'http://[::1]/',
        'http://[fe80::1]/',
        'http://[fc00::1]/',
        'http://[fd12:3456::1]/',
        'http://[::ffff:10.0.0.1]/',
        'http://[::ffff:127.0.0.2]/',
        'http://0x7f000002/',
        'http://2130706434/',
      ];
      for (const url of bad) assertError(await create({ name: uniqueName(), upstream_url: url }), 400, /upstream_url/);
      assert.equal((await create({ name: uniqueName(), upstream_url: 'https://agents.example.com/v1' })).status, 201);
    });

    it('names the cause of an invalid upstream_url, on create and PATCH', async () => {
      const causes: Array<[string, string]> = [
        ['not a url', 'invalid upstream_url: not an absolute URL'],
        ['ftp://example.com/x', 'invalid upstream_url: the scheme must be http or https'],
        ['http://user:pw@example.com/', 'invalid upstream_url: credentials in the URL are not accepted'],
        ['http://localhost:8080/', 'invalid upstream_url: localhost is not reachable through the gateway'],
        ['http://127.0.0.2/', 'invalid upstream_url: a loopback address is not reachable through the gateway'],
        ['http://[::1]/', 'invalid upstream_url: a loopback address'],
        ['http://10.1.2.3/', 'invalid upstream_url: a private address'],
        ['http://[fd12:3456::1]/', 'invalid upstream_url: a private address'],
        ['http://169.254.169.254/latest/meta-data', 'invalid upstream_url: a link-local address'],
        ['http://0.0.0.0/', 'invalid upstream_url: an unspecified address'],
        ['http://192.0.2.1/', 'invalid upstream_url: a reserved address'],
      ];
      const pending = (await create({ name: uniqueName() })).json;
      for (const [url, message] of causes) {
        for (const res of [
          await create({ name: uniqueName(), upstream_url: url }),
          await call('PATCH', `/v1/agents/${pending.id}`, { token, json: { upstream_url: url } }),
        ]) {
          assert.equal(res.status, 400, url);
          assert.deepEqual(Object.keys(res.json), ['error']);
          assert.ok(res.json.error.startsWith(message), `${url}: ${res.json.error}`);
          // The stack is not `npm start`: no hint at the operator's allow-list.
          assert.ok(!res.json.error.includes('UPSTREAM_ALLOW'), res.json.error);
        }
      }
    });

    it('under npm start (UPSTREAM_ALLOW_HINT), a refused local host is told the UPSTREAM_ALLOW that admits it', () => {
      const upstream = { allow: ['127.0.0.1:8099', '127.0.0.1:8443'], allowHint: true };
      assert.equal(
        upstreamUrlProblem('upstream_url', 'http://127.0.0.1:9000/agent', upstream),
        'invalid upstream_url: a loopback address is not reachable through the gateway; to allow it, restart npm start with UPSTREAM_ALLOW=127.0.0.1:8099,127.0.0.1:8443,127.0.0.1:9000',
      );
      assert.match(
        upstreamUrlProblem('upstream_url', 'http://localhost/', upstream)!,
        /UPSTREAM_ALLOW=127\.0\.0\.1:8099,127\.0\.0\.1:8443,localhost:80$/,
      );
      assert.match(upstreamUrlProblem('upstream_url', 'https://[::1]/', upstream)!, /,::1$/);
      // Causes no allow-list entry fixes get no hint.
      assert.equal(
        upstreamUrlProblem('upstream_url', 'ftp://127.0.0.1/', upstream),
        'invalid upstream_url: the scheme must be http or https',
      );
      assert.equal(upstreamUrlProblem('upstream_url', 'http://127.0.0.1:8099/', upstream), undefined);
      assert.equal(loadGatewayConfig({ AUTH_JWT_SECRET: 'x'.repeat(32) }).upstream.allowHint, false);
      assert.equal(
        loadGatewayConfig({ AUTH_JWT_SECRET: 'x'.repeat(32), UPSTREAM_ALLOW_HINT: 'true' }).upstream.allowHint,
        true,
      );
    });

    it('answers 409 for a name held by an active or pending agent, and frees it on delete', async () => {
      const name = uniqueName();
      const first = await create({ name });
      assertError(await create({ name, upstream_url: upstream.url }), 409, /name/);
      // Other tenants are unaffected.
      assert.equal((await create({ name }, await stack().token('tenant-agents-other'))).status, 201);
      assert.equal((await call('DELETE', `/v1/agents/${first.json.id}`, { token })).status, 204);
      assert.equal((await create({ name })).status, 201);
    });

    it('lets exactly one of many concurrent creates with one name win', async () => {
      const name = uniqueName();
      const results = await Promise.all(Array.from({ length: 8 }, () => create({ name })));
      assert.deepEqual(results.map((r) => r.status).sort(), [201, 409, 409, 409, 409, 409, 409, 409]);
    });
  });

  describe('GET /v1/agents/{id}', () => {
    it('returns the agent, and 404 for unknown or malformed ids', async () => {
      const created = await create({ name: uniqueName() });
      const got = await call('GET', `/v1/agents/${created.json.id}`, { token });
      assert.equal(got.status, 200);
      assert.deepEqual(got.json, created.json);
      assertError(await call('GET', '/v1/agents/agt_0190a0a0-0000-7000-8000-000000000000', { token }), 404);
      assertError(await call('GET', '/v1/agents/nonsense', { token }), 404);
    });
  });

  describe('PATCH /v1/agents/{id}', () => {
    it('updates every mutable field and validates the result like create', async () => {
      const a = (await create({ name: uniqueName() })).json;
      const patch = async (json: unknown) => call('PATCH', `/v1/agents/${a.id}`, { token, json });
      const name = uniqueName();
      const res = await patch({
        name,
        description: 'd',
        tags: ['t'],
        metadata: { k: 'v' },
        emit_receipts: true,
        capture_body: true,
        rate_limit_rps: 5,
        rate_limit_burst: 7,
        retry_non_idempotent: true,
        pricing,
      });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(
        [
          res.json.name,
          res.json.description,
          res.json.tags,
          res.json.metadata,
          res.json.emit_receipts,
          res.json.capture_body,
          res.json.rate_limit_rps,
          res.json.rate_limit_burst,
          res.json.retry_non_idempotent,
        ],
        [name, 'd', ['t'], { k: 'v' }, true, true, 5, 7, true],
      );
      assert.equal(res.json.pricing.pay_to, PAY_TO_CHECKSUMMED);
      assert.ok(Date.parse(res.json.updated_at) >= Date.parse(a.updated_at));
      assert.equal(res.json.created_at, a.created_at);

      // pending ↔ active follows upstream_url.
      assert.equal(res.json.status, 'pending');
      assert.equal((await patch({ upstream_url: upstream.url })).json.status, 'active');
      assert.equal((await patch({ upstream_url: null })).json.status, 'pending');

      // pricing: null removes the price; same rules as create.
      assert.equal((await patch({ pricing: null })).json.pricing, null);
      assertError(await patch({ pricing: { ...pricing, network: 'ethereum' } }), 400, /pricing.network/);
      assertError(await patch({ pricing: { ...pricing, tools: { a: '1' } } }), 400, /pricing.tools/);
      assertError(await patch({ protocol: 'mcp' }), 400, /mcp_transport/);
      const mcp = await patch({
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        mcp_protocol_version: '2025-03-26',
        pricing: { ...pricing, tools: { a: '1' } },
      });
      assert.equal(mcp.status, 200, mcp.text);
      assertError(await patch({ protocol: 'http' }), 400, /mcp_transport/);
      assertError(await patch({ mcp_protocol_version: '1999-01-01' }), 400, /mcp_protocol_version/);
      assertError(await patch({ upstream_url: 'http://10.0.0.1/' }), 400, /upstream_url/);
      assertError(await patch({ rate_limit_rps: null }), 400, /rate_limit_burst requires/);
      assertError(await patch({ name: '' }), 400, /name/);
      assertError(await patch({ id: 'agt_x' }), 400, /unknown field: id/);
      assertError(await patch({ status: 'active' }), 400, /unknown field: status/);
      assertError(await patch({ credential_ref: 'cred_0190a0a0-0000-7000-8000-000000000000' }), 400, /credential_ref/);
      // Nothing of the refused patches stuck.
      const now = (await call('GET', `/v1/agents/${a.id}`, { token })).json;
      assert.deepEqual([now.protocol, now.mcp_protocol_version, now.upstream_url], ['mcp', '2025-03-26', null]);
    });

    it('answers 409 for a taken name or an inactive agent, 404 for an unknown one', async () => {
      const taken = (await create({ name: uniqueName() })).json;
      const a = (await create({ name: uniqueName() })).json;
      assertError(await call('PATCH', `/v1/agents/${a.id}`, { token, json: { name: taken.name } }), 409);
      assert.equal((await call('PATCH', `/v1/agents/${a.id}`, { token, json: { name: a.name } })).status, 200);
      await call('DELETE', `/v1/agents/${a.id}`, { token });
      assertError(await call('PATCH', `/v1/agents/${a.id}`, { token, json: { description: 'x' } }), 409, /inactive/);
      assertError(await call('PATCH', '/v1/agents/agt_0190a0a0-0000-7000-8000-000000000000', { token, json: {} }), 404);
    });
  });

  describe('DELETE /v1/agents/{id}', () => {
    it('soft-deletes: 204, status inactive, not invocable, listed only with status=inactive; again is 204', async () => {
      const a = (await create({ name: uniqueName(), upstream_url: upstream.url })).json;
      const del = await call('DELETE', `/v1/agents/${a.id}`, { token });
      assert.equal(del.status, 204);
      assert.equal(del.text, '');
      const got = await call('GET', `/v1/agents/${a.id}`, { token });
      assert.equal(got.json.status, 'inactive');
      assertError(await call('POST', `/v1/proxy/${a.id}`, { token, body: 'x' }), 422);
      const listed = async (query: string) =>
        (await call('GET', `/v1/agents?limit=100${query}`, { token })).json.data.map((x: any) => x.id);
      assert.ok(!(await listed('')).includes(a.id));
      assert.ok((await listed('&status=inactive')).includes(a.id));
      assert.equal((await call('DELETE', `/v1/agents/${a.id}`, { token })).status, 204);
      assert.equal((await call('GET', `/v1/agents/${a.id}`, { token })).json.updated_at, got.json.updated_at);
      assertError(await call('DELETE', '/v1/agents/agt_0190a0a0-0000-7000-8000-000000000000', { token }), 404);
    });
  });

  describe('suspension', () => {
    it('suspends with a reason (invocations answer 422) and unsuspends', async () => {
      const a = (await create({ name: uniqueName(), upstream_url: upstream.url })).json;
      const s = await call('POST', `/v1/agents/${a.id}/suspend`, { token, json: { reason: 'abuse report' } });
      assert.equal(s.status, 200);
      assert.deepEqual([s.json.suspended, s.json.suspended_reason, s.json.status], [true, 'abuse report', 'active']);
      assertError(await call('POST', `/v1/proxy/${a.id}`, { token, body: 'x' }), 422);
      // Still listed, still readable.
      assert.equal((await call('GET', `/v1/agents/${a.id}`, { token })).json.suspended, true);
      const u = await call('POST', `/v1/agents/${a.id}/unsuspend`, { token });
      assert.deepEqual([u.status, u.json.suspended, u.json.suspended_reason], [200, false, null]);
      assert.equal((await call('POST', `/v1/proxy/${a.id}`, { token, body: 'x' })).status, 202);
      // Suspending without a body is fine too.
      assert.equal((await call('POST', `/v1/agents/${a.id}/suspend`, { token })).json.suspended_reason, null);
    });

    it('answers 400 for a bad body, 404 for unknown, 409 for inactive agents', async () => {
      const a = (await create({ name: uniqueName() })).json;
      assertError(await call('POST', `/v1/agents/${a.id}/suspend`, { token, json: { reason: 7 } }), 400, /reason/);
      assertError(
        await call('POST', `/v1/agents/${a.id}/unsuspend`, { token, json: { reason: 'x' } }),
        400,
        /unknown field/,
      );
      assertError(await call('POST', '/v1/agents/agt_0190a0a0-0000-7000-8000-000000000000/suspend', { token }), 404);
      await call('DELETE', `/v1/agents/${a.id}`, { token });
      assertError(await call('POST', `/v1/agents/${a.id}/suspend`, { token }), 409);
      assertError(await call('POST', `/v1/agents/${a.id}/unsuspend`, { token }), 409);
    });
  });

  describe('GET /v1/agents', () => {
    it('pages with limit and cursor, oldest first, and filters by status, tag and protocol', async () => {
      const t = await stack().token(`tenant-list-${uniqueName()}`);
      const made: any[] = [];
      for (let i = 0; i < 5; i++) {
        const mcp = i % 2 === 0;
        made.push(
          (
            await create(
              {
                name: `list-${i}`,
                tags: i < 3 ? ['blue'] : ['green'],
                ...(i === 4 ? {} : { upstream_url: upstream.url }),
                ...(mcp ? { protocol: 'mcp', mcp_transport: 'streamable_http' } : {}),
              },
              t,
            )
          ).json,
        );
      }
      await call('DELETE', `/v1/agents/${made[1].id}`, { token: t });

      const pages: string[][] = [];
      let cursor: string | null = null;
      do {
        const res: any = await call('GET', `/v1/agents?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { token: t });
        assert.equal(res.status, 200);
        assert.deepEqual(Object.keys(res.json).sort(), ['data', 'next_cursor']);
        pages.push(res.json.data.map((a: any) => a.name));
        cursor = res.json.next_cursor;
      } while (cursor);
      assert.deepEqual(pages, [
        ['list-0', 'list-2'],
        ['list-3', 'list-4'],
      ]);

      const names = async (q: string) =>
        (await call('GET', `/v1/agents?${q}`, { token: t })).json.data.map((a: any) => a.name);
      assert.deepEqual(await names('status=inactive'), ['list-1']);
      assert.deepEqual(await names('status=pending'), ['list-4']);
      assert.deepEqual(await names('status=active'), ['list-0', 'list-2', 'list-3']);
      assert.deepEqual(await names('tag=blue'), ['list-0', 'list-2']);
      assert.deepEqual(await names('tag=green&protocol=mcp'), ['list-4']);
      assert.deepEqual(await names('protocol=http'), ['list-3']);
      assert.deepEqual(await names('tag=none'), []);
      // limit is clamped to [1, 100]; default 20.
      assert.equal((await names('limit=0')).length, 1);
      assert.equal((await names('limit=1000')).length, 4);
    });

    it('answers 400 for invalid filters, limit or cursor', async () => {
      assertError(await call('GET', '/v1/agents?status=deleted', { token }), 400, /status/);
      assertError(await call('GET', '/v1/agents?protocol=grpc', { token }), 400, /protocol/);
      assertError(await call('GET', '/v1/agents?limit=ten', { token }), 400, /limit/);
      assertError(await call('GET', '/v1/agents?cursor=bogus', { token }), 400, /cursor/);
      assertError(await call('GET', '/v1/agents?tag=a&tag=b', { token }), 400, /tag/);
    });
  });
});
