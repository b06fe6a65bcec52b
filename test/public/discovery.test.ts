// The discovery catalog on the real stack (docs/API.md "Selling an agent to any x402 client",
// "Finding agents"): the unmodified Bazaar client of @x402/extensions lists and searches the
// public agents, pages through them, never sees a closed agent or anything secret; the v2
// challenge of a public agent declares the same bazaar extension; a tenant's description is
// validated on save; an MCP agent's tools take the schemas its own tools/list gives.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { HTTPFacilitatorClient, decodePaymentRequiredHeader } from '@x402/core/http';
import { validateDiscoveryExtension, withBazaar, type DiscoveryExtension } from '@x402/extensions/bazaar';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { newAccount, newPayTo, settlingTenant, type TestAccount } from '../support/x402.ts';

const SECRET = `upstream-secret-${randomUUID()}`;
const PRICE = { amount: '10000', asset: 'USDC', network: 'base' } as const;

/** The Bazaar client as any x402 buyer builds it, pointed at a gateway's base URL. */
const bazaarAt = (url: string) => withBazaar(new HTTPFacilitatorClient({ url })).extensions.bazaar;

describe('discovery (x402 Bazaar)', function () {
  this.timeout(180_000);
  let upstream: TestUpstream;
  let account: TestAccount;
  let tenant: string;
  let token: string;
  let credentialId: string;
  // Its discovery limits out of the way: these tests read the catalog often.
  let gateway: ExtraGateway;

  before(async () => {
    upstream = await startUpstream();
    account = await newAccount(`discovery-${randomUUID()}`);
    tenant = `tenant-discovery-${randomUUID()}`;
    token = await settlingTenant(tenant, account);
    const credential = await call('POST', '/v1/credentials', {
      token,
      json: { name: uniqueName('cred'), auth_type: 'bearer', source: 'managed', plaintext: SECRET },
    });
    assert.equal(credential.status, 201, credential.text);
    credentialId = credential.json.id;
    gateway = await startCapturedGateway({ discovery: { rpsPerClient: 1000, rps: 1000, maxAgents: 10_000 } });
  });
  after(async () => {
    await gateway?.close();
    await upstream.close();
    await account.client.close();
  });

  async function agent(json: Record<string, unknown>): Promise<any> {
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('disc'),
        upstream_url: upstream.url,
        credential_ref: credentialId,
        tags: ['internal-tag'],
        metadata: { internal: 'metadata' },
        public: true,
        ...json,
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json;
  }

  const HTTP_INTERFACE = {
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    input_example: { city: 'Lisbon' },
    output_example: { forecast: 'sunny' },
  };

  it('lists an http agent as one resource and a public MCP agent as one resource per priced tool', async () => {
    const payTo = newPayTo();
    const word = `w${randomUUID().slice(0, 8)}`;
    const http = await agent({
      pricing: { ...PRICE, pay_to: payTo },
      public_description: `Weather forecasts ${word}`,
      public_interface: HTTP_INTERFACE,
    });
    const mcp = await agent({
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
      pricing: { ...PRICE, pay_to: payTo, tools: { search: '2000', ping: '0' } },
      public_description: `Search tools ${word}`,
      public_interface: {
        tools: {
          search: {
            description: 'Search the web',
            input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
            example: { q: 'x402' },
          },
        },
      },
    });
    // Not public: never listed.
    await agent({ public: false, pricing: { ...PRICE, pay_to: payTo }, public_description: word });

    const listed = await bazaarAt(gateway.url).listResources({ payTo, limit: 100 });
    assert.equal(listed.x402Version, 2);
    assert.equal(listed.pagination.total, 2, JSON.stringify(listed));
    const [httpItem, searchItem] = listed.items;
    assert.equal(httpItem.resource, `${gateway.url}/public/agents/${http.id}/stream`);
    assert.equal(httpItem.type, 'http');
    assert.equal(httpItem.accepts[0].amount, '10000');
    assert.equal(httpItem.accepts[0].network, 'eip155:8453');
    assert.equal(httpItem.accepts[0].payTo.toLowerCase(), payTo.toLowerCase());
    const httpBazaar = httpItem.extensions!.bazaar as DiscoveryExtension;
    assert.deepEqual(validateDiscoveryExtension(httpBazaar), { valid: true });
    assert.deepEqual(httpBazaar.info.input, {
      type: 'http',
      method: 'POST',
      bodyType: 'json',
      body: { city: 'Lisbon' },
    });
    assert.deepEqual(httpBazaar.info.output, { type: 'json', example: { forecast: 'sunny' } });

    // The MCP agent: its priced tool (ping is free, so not for sale here), at its streaming URL.
    assert.equal(searchItem.resource, `${gateway.url}/public/agents/${mcp.id}/stream`);
    assert.equal(searchItem.type, 'mcp');
    assert.equal(searchItem.accepts[0].amount, '2000');
    const mcpBazaar = searchItem.extensions!.bazaar as DiscoveryExtension;
    assert.deepEqual(validateDiscoveryExtension(mcpBazaar), { valid: true });
    assert.equal(mcpBazaar.info.input.type, 'mcp');
    assert.deepEqual(mcpBazaar.info.input, {
      type: 'mcp',
      toolName: 'search',
      description: 'Search the web',
      transport: 'streamable-http',
      inputSchema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
      example: { q: 'x402' },
    });

    // Filters.
    assert.equal((await bazaarAt(gateway.url).listResources({ payTo, type: 'mcp' })).items.length, 1);
    assert.equal((await bazaarAt(gateway.url).listResources({ payTo, network: 'eip155:1' })).items.length, 0);
    assert.equal((await bazaarAt(gateway.url).listResources({ payTo, extensions: 'bazaar' })).items.length, 2);

    // Search: every word, case-insensitive, in the name, public description or tool.
    const found = await bazaarAt(gateway.url).search({ query: `${word.toUpperCase()} weather` });
    assert.deepEqual(
      found.resources.map((r) => r.resource),
      [httpItem.resource],
    );
    const web = await bazaarAt(gateway.url).search({ query: `${word} web` });
    assert.equal(web.resources.length, 1, JSON.stringify(web.resources));

    // The agent's v2 challenge declares the same bazaar extension (an MCP tool's, once the tool is known).
    const challenge = await callAt(gateway.url, 'POST', `/public/agents/${http.id}/stream`, { body: '{}' });
    assert.equal(challenge.status, 402);
    const required = decodePaymentRequiredHeader(challenge.headers['payment-required'] as string);
    assert.deepEqual(required.extensions?.bazaar, httpBazaar);
    assert.ok(required.extensions?.['payment-identifier']);
  });

  it("lists an MCP agent's tools with the schemas of its own tools/list, the tenant's description winning", async () => {
    const mcpUpstream = await startMcpServer();
    try {
      const payTo = newPayTo();
      // A price for every tool; the tenant describes echo's purpose only.
      const mcp = await agent({
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        upstream_url: mcpUpstream.url,
        pricing: { ...PRICE, pay_to: payTo },
        public_interface: { tools: { echo: { description: 'Repeats what you say' } } },
      });
      // Listed on this replica at once: creating a public agent waits for every replica's feed.
      const listed = await bazaarAt(gateway.url).listResources({ payTo, limit: 100 });
      const inputs = listed.items.map((item) => (item.extensions!.bazaar as DiscoveryExtension).info.input as any);
      assert.deepEqual(
        inputs.map((input) => input.toolName),
        ['count', 'echo'],
      );
      const [count, echo] = inputs;
      // count: all from the upstream's tools/list.
      assert.equal(count.description, 'Counts to n, logging as it goes');
      assert.equal(count.inputSchema.properties.n.type, 'integer');
      assert.deepEqual(count.inputSchema.required, ['n']);
      // echo: the tenant's description, the upstream's schema.
      assert.equal(echo.description, 'Repeats what you say');
      assert.equal(echo.inputSchema.properties.text.type, 'string');
      for (const item of listed.items) {
        assert.deepEqual(validateDiscoveryExtension(item.extensions!.bazaar as DiscoveryExtension), { valid: true });
        assert.equal(item.resource, `${gateway.url}/public/agents/${mcp.id}/stream`);
      }
      // Read with the agent's credential, which appears nowhere in the catalog.
      assert.ok(mcpUpstream.seen.some((headers) => headers.authorization === `Bearer ${SECRET}`));
      assert.ok(!JSON.stringify(listed).includes(SECRET));
      assert.ok(!JSON.stringify(listed).includes(mcpUpstream.url));
      const search = await bazaarAt(gateway.url).search({ query: 'counts logging' });
      assert.ok(search.resources.some((r) => r.resource.endsWith(`/${mcp.id}/stream`)));

      // A rebuild (another agent's write) reads the upstream again only for an agent that changed.
      const posts = mcpUpstream.bodies.length;
      await agent({ public: false, pricing: { ...PRICE, pay_to: payTo } });
      assert.equal((await bazaarAt(gateway.url).listResources({ payTo, limit: 100 })).items.length, 2);
      assert.equal(mcpUpstream.bodies.length, posts);

      // An upstream that no longer answers: the save is not held, the tenant's tools stay listed.
      await mcpUpstream.close();
      const moved = await call('PATCH', `/v1/agents/${mcp.id}`, {
        token,
        json: { upstream_url: upstream.url, public_interface: { tools: { echo: { description: 'Repeats' } } } },
      });
      assert.equal(moved.status, 200, moved.text);
      const after = await bazaarAt(gateway.url).listResources({ payTo, limit: 100 });
      assert.deepEqual(
        after.items.map((item) => (item.extensions!.bazaar as DiscoveryExtension).info.input as any),
        [
          {
            type: 'mcp',
            toolName: 'echo',
            description: 'Repeats',
            transport: 'streamable-http',
            inputSchema: { type: 'object' },
          },
        ],
      );
    } finally {
      await mcpUpstream.close().catch(() => undefined);
    }
  });

  it('pages the listing by offset and the search by cursor', async () => {
    const payTo = newPayTo();
    const word = `p${randomUUID().slice(0, 8)}`;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++)
      ids.push((await agent({ pricing: { ...PRICE, pay_to: payTo }, public_description: `paged ${word}` })).id);
    const bazaar = bazaarAt(gateway.url);
    const seen: string[] = [];
    for (let offset = 0; ; offset += 2) {
      const page = await bazaar.listResources({ payTo, limit: 2, offset });
      assert.equal(page.pagination.total, 5);
      assert.equal(page.pagination.limit, 2);
      seen.push(...page.items.map((item) => item.resource));
      if (page.items.length < 2) break;
    }
    assert.deepEqual(
      seen,
      ids.map((id) => `${gateway.url}/public/agents/${id}/stream`),
    );

    const searched: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await bazaar.search({ query: word, limit: 2, cursor });
      assert.ok(page.resources.length <= 2);
      searched.push(...page.resources.map((r) => r.resource));
      cursor = page.pagination?.cursor ?? undefined;
    } while (cursor);
    assert.deepEqual(searched, seen);

    // A page is bounded whatever the client asks; bad paging is a 400, not a 5xx.
    assert.equal((await bazaar.listResources({ limit: 100_000 })).pagination.limit, 100);
    for (const query of ['offset=-1', 'limit=abc', 'offset=1&offset=2'])
      assert.equal((await callAt(gateway.url, 'GET', `/discovery/resources?${query}`)).status, 400, query);
    for (const query of ['', 'query=x&cursor=abc', `query=${'x'.repeat(501)}`])
      assert.equal((await callAt(gateway.url, 'GET', `/discovery/search?${query}`)).status, 400, query);
  });

  it('drops an agent turned private, suspended or deleted at once, and shows nothing secret', async () => {
    const payTo = newPayTo();
    const agents: Array<{ id: string }> = [];
    for (let i = 0; i < 3; i++)
      agents.push(
        await agent({
          pricing: { ...PRICE, pay_to: payTo },
          public_description: 'closing',
          public_interface: HTTP_INTERFACE,
        }),
      );
    const bazaar = bazaarAt(gateway.url);
    const listed = async () => (await bazaar.listResources({ payTo })).items.map((item) => item.resource);
    assert.equal((await listed()).length, 3);

    const text =
      JSON.stringify(await bazaar.listResources({ payTo })) + JSON.stringify(await bazaar.search({ query: 'closing' }));
    for (const secret of [SECRET, upstream.url, tenant, credentialId, 'internal-tag', 'internal', account.account.id])
      assert.ok(!text.includes(secret), `the catalog shows ${secret}`);

    // The stack's API applies the change; the other replica's catalog follows it before the writer answers.
    const changes = [
      (id: string) => call('PATCH', `/v1/agents/${id}`, { token, json: { public: false } }),
      (id: string) => call('POST', `/v1/agents/${id}/suspend`, { token, json: {} }),
      (id: string) => call('DELETE', `/v1/agents/${id}`, { token }),
    ];
    for (const [i, change] of changes.entries()) {
      const res = await change(agents[i].id);
      assert.ok(res.status < 300, res.text);
      const now = await listed();
      assert.equal(now.length, 2 - i);
      assert.ok(!now.some((url) => url.includes(agents[i].id)));
    }
  });

  it('validates the public interface on save: JSON Schema, bounded, never a credential', async () => {
    const pricing = { ...PRICE, pay_to: newPayTo() };
    const refused = async (publicInterface: unknown, message: RegExp) => {
      const res = await call('POST', '/v1/agents', {
        token,
        json: { name: uniqueName('bad'), upstream_url: upstream.url, pricing, public_interface: publicInterface },
      });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error, message);
    };
    await refused({ input_schema: { type: 'not-a-type' } }, /JSON Schema/);
    await refused({ input_schema: { properties: 'x' } }, /JSON Schema/);
    await refused({ output_example: { auth: 'Bearer abcdefghijklmnopqrstuvwxyz' } }, /credential/);
    await refused({ input_example: { key: 'sk-abcdefghijklmnopqrstuvwxyz012345' } }, /credential/);
    await refused({ output_example: { big: 'x'.repeat(20_000) } }, /larger than/);
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 20; i++) deep = { d: deep };
    await refused({ output_example: deep }, /deeper than/);
    await refused({ unknown_field: 1 }, /unknown field/);
    // A $schema the gateway cannot check against is refused, never a 500.
    await refused({ input_schema: { $schema: 'https://example.com/meta', type: 'object' } }, /JSON Schema/);
    await refused({ input_schema: { $schema: 'http://json-schema.org/draft-07/schema#', type: 7 } }, /JSON Schema/);
    const draft07 = await agent({
      pricing,
      public_interface: { input_schema: { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object' } },
    });
    assert.equal(draft07.public_interface.input_schema.type, 'object');

    const ok = await agent({ pricing, public_interface: HTTP_INTERFACE });
    assert.deepEqual(ok.public_interface, HTTP_INTERFACE);
    const cleared = await call('PATCH', `/v1/agents/${ok.id}`, { token, json: { public_interface: null } });
    assert.equal(cleared.status, 200, cleared.text);
    assert.equal(cleared.json.public_interface, null);
  });

  it('limits the anonymous endpoints per client address and in total', async () => {
    const limited = await startCapturedGateway({ discovery: { rpsPerClient: 1, rps: 1000, maxAgents: 10_000 } });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await callAt(limited.url, 'GET', '/discovery/resources')).status);
      assert.deepEqual(statuses, [200, 200, 429, 429]);
    } finally {
      await limited.close();
    }
    const total = await startCapturedGateway({ discovery: { rpsPerClient: 1000, rps: 1, maxAgents: 10_000 } });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await callAt(total.url, 'GET', '/discovery/search?query=x')).status);
      assert.deepEqual(statuses.slice(2), [429, 429]);
    } finally {
      await total.close();
    }
  });
});
