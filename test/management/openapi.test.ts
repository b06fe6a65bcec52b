// The OpenAPI 3.1 document and the reference page match what the server does: every live
// answer of a scenario that walks all management endpoints (every documented status of the
// Agents, Credentials, Settlement and Policy operations, 500s from a gateway whose database is
// gone) and the proxy's answers and records (a captured body, a failed call, a streaming call,
// an MCP call, a 402 challenge and a paid call) is checked against the document's operation
// and validated with Ajv (JSON Schema 2020-12), strictly: every object the document declares
// is closed for the check, so a field an answer carries that the document does not declare
// fails it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { clientTlsBundle, startBrokenGateway } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { encodePayment, newPayTo, newPayer, signPayment } from '../support/x402.ts';
import { agentRoutes } from '../../api/routes/agents.ts';
import { createAgentRows } from '../../gateway/agents/rows.ts';
import { mcpServerRoutes } from '../../api/routes/mcp-servers.ts';
import { budgetRoutes } from '../../api/routes/budgets.ts';
import { credentialRoutes } from '../../api/routes/credentials.ts';
import { settlementRoutes } from '../../api/routes/settlement.ts';
import { channelRoutes } from '../../api/routes/channels.ts';
import { policyRoutes } from '../../api/routes/policy.ts';
import { analyticsRoutes } from '../../api/routes/analytics.ts';
import { jwksRoutes, receiptRoutes } from '../../api/routes/receipts.ts';
import { healthRoutes } from '../../api/routes/health.ts';
import { proxyRoutes } from '../../api/routes/proxy.ts';
import { invocationRoutes } from '../../api/routes/invocations.ts';
import { publicRoutes } from '../../api/routes/public.ts';
import { discoveryRoutes } from '../../api/routes/discovery.ts';
import { openapiRoutes } from '../../api/openapi/routes.ts';
import { consoleRoutes } from '../../api/console/routes.ts';
import type { AppDeps } from '../../api/deps.ts';
import { createLogger } from '../../lib/log.ts';
import type { PolicyEngine } from '../../gateway/policy/engine.ts';
import type { ProxyParts } from '../../api/proxy/pipeline-parts.ts';
import type { Limiter } from '../../gateway/analytics/limiter.ts';
import { waitFor } from '../support/wait.ts';

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;
/** The tags whose every documented status is answered live below. */
const CHECKED_TAGS = new Set(['Agents', 'Credentials', 'Settlement', 'Policy']);

/**
 * The schema with every object that declares properties closed (additionalProperties false
 * where it is absent or `{}`): a field the document does not declare fails validation. Maps
 * (additionalProperties with a schema of their own) stay maps.
 */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!schema || typeof schema !== 'object') return schema;
  // An if/then/not subschema constrains some properties of the object it sits in: never closed.
  const out: Record<string, unknown> = Object.fromEntries(
    Object.entries(schema).map(([k, v]) => [k, ['if', 'then', 'else', 'not'].includes(k) ? v : closed(v)]),
  );
  const extra = out.additionalProperties;
  const open = extra === undefined || (typeof extra === 'object' && extra !== null && Object.keys(extra).length === 0);
  if (out.properties && open) out.additionalProperties = false;
  return out;
}

/** A local port nothing listens on: an upstream that refuses connections. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, any>>;
  components: { schemas: Record<string, unknown> };
};

describe('OpenAPI document and reference page', () => {
  let doc: Doc;
  let ajv: Ajv2020;
  let upstream: TestUpstream;
  /** operationId → statuses seen live and validated. */
  const seen = new Map<string, Set<string>>();

  before(async () => {
    upstream = await startUpstream();
    const res = await call('GET', '/v1/openapi.json');
    assert.equal(res.status, 200);
    doc = res.json;
    ajv = new Ajv2020({ strict: true, allErrors: true, strictRequired: false });
    ajv.addKeyword('example');
    addFormats(ajv);
    // The components, addressable as openapi.json#/$defs/<name> (their own $refs rewritten to match).
    const defs = closed(
      JSON.parse(JSON.stringify(doc.components.schemas).replaceAll('"#/components/schemas/', '"#/$defs/')),
    );
    ajv.addSchema({ $id: 'openapi.json', $defs: defs }, 'openapi.json');
  });
  after(() => upstream.close());

  /** Finds the documented operation for a concrete request and validates the live answer against it. */
  function check(method: string, path: string, res: Reply): void {
    const bare = path.split('?')[0];
    const entry = Object.entries(doc.paths).find(([template]) =>
      new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(bare),
    );
    assert.ok(entry, `${method} ${bare} is documented`);
    const op = entry[1][method.toLowerCase()];
    assert.ok(op, `${method} ${entry[0]} is documented`);
    const status = String(res.status);
    const response = op.responses[status] ?? op.responses.default;
    assert.ok(response, `${op.operationId}: status ${status} is documented (${res.text})`);
    const json = response.content?.['application/json'];
    if (!response.content) {
      assert.equal(res.text, '', `${op.operationId} ${status} has no body`);
    } else if (json?.schema) {
      const schema = closed(
        JSON.parse(JSON.stringify(json.schema).replaceAll('"#/components/schemas/', '"openapi.json#/$defs/')),
      ) as object;
      const validate = ajv.compile(schema);
      assert.ok(validate(res.json), `${op.operationId} ${status}: ${ajv.errorsText(validate.errors)} in ${res.text}`);
      assert.match(String(res.headers['content-type']), /application\/json/);
    }
    if (!seen.has(op.operationId)) seen.set(op.operationId, new Set());
    seen.get(op.operationId)!.add(status);
  }

  async function checked(
    method: string,
    path: string,
    opts: Parameters<typeof call>[2] = {},
    base?: string,
  ): Promise<Reply> {
    const res = base ? await callAt(base, method, path, opts as any) : await call(method, path, opts);
    check(method, path, res);
    return res;
  }

  it('is OpenAPI 3.1 whose schemas all compile under JSON Schema 2020-12', () => {
    assert.equal(doc.openapi, '3.1.0');
    for (const name of Object.keys(doc.components.schemas)) ajv.compile({ $ref: `openapi.json#/$defs/${name}` });
    assert.ok(
      doc.paths['/v1/agents'].post.requestBody.content['application/json'].schema.$ref.endsWith('/AgentCreate'),
    );
    const credential = doc.components.schemas.Credential as any;
    assert.ok(!('plaintext' in credential.properties), 'the secret is not a response field');
    // CredentialCreate is one variant per source and auth type: each that takes a plaintext marks it write-only.
    const plaintexts: any[] = [];
    const walk = (schema: any): void => {
      if (schema?.properties?.plaintext?.type) plaintexts.push(schema.properties.plaintext);
      for (const variant of schema?.oneOf ?? []) walk(variant);
    };
    walk(doc.components.schemas.CredentialCreate);
    assert.equal(plaintexts.length, 3);
    for (const plaintext of plaintexts) assert.equal(plaintext.writeOnly, true);
  });

  it('the check is strict: an answer carrying a field the document does not declare fails it', () => {
    const validate = ajv.compile({ $ref: 'openapi.json#/$defs/Invocation' });
    const now = new Date().toISOString();
    const invocation = {
      invocation_id: 'inv_0190a0a0-0000-7000-8000-000000000000',
      agent_id: 'agt_0190a0a0-0000-7000-8000-000000000000',
      status: 'succeeded',
      created_at: now,
      updated_at: now,
      completed_at: now,
      upstream_status: 200,
      latency_ms: 3,
      ttft_ms: null,
      error_class: null,
      mode: 'transactional',
      model: null,
      request_id: 'r',
      caller_kind: 'token',
      mcp_method: null,
      mcp_tool: null,
      mcp_server_id: null,
      budget_id: null,
      a2a_method: null,
      a2a_skill: null,
      a2a_task_id: null,
      a2a_context_id: null,
      payment_network: null,
      payment_asset: null,
      payment_amount: null,
      payment_payer: null,
      payment_nonce: null,
      payment_transaction: null,
    };
    assert.ok(validate(invocation), ajv.errorsText(validate.errors));
    assert.equal(validate({ ...invocation, undeclared: 1 }), false);
    const decisions = ajv.compile({ $ref: 'openapi.json#/$defs/PolicyDecisionList' });
    assert.equal(decisions({ data: [], limit: 1, undeclared: true }), false);
  });

  it('what the document allows is accepted and what it forbids is a 400 (queries and bodies the fuzzers found)', async () => {
    const token = await stack().token(`tenant-openapi-agree-${uniqueName()}`);
    const { agentMaxRps } = stack().config.rateLimit;
    /** Does the document's operation take this request? Query values are read as the server reads them. */
    function documentTakes(method: string, template: string, query: Record<string, string>, json?: unknown): boolean {
      const op = doc.paths[template][method];
      const params: any[] = (op.parameters ?? []).filter((p: any) => p.in === 'query');
      for (const p of params) if (p.required && !(p.name in query)) return false;
      for (const [name, raw] of Object.entries(query)) {
        const param = params.find((p) => p.name === name);
        if (!param) continue;
        const value = param.schema.type === 'integer' && /^-?[0-9]+$/.test(raw) ? Number(raw) : raw;
        if (!ajv.compile(param.schema)(value)) return false;
      }
      if (json === undefined) return true;
      const schema = JSON.parse(
        JSON.stringify(op.requestBody.content['application/json'].schema).replaceAll(
          '"#/components/schemas/',
          '"openapi.json#/$defs/',
        ),
      );
      return ajv.compile(schema)(json);
    }
    const PRICING = { amount: '10', asset: 'USDC', network: 'base', pay_to: newPayTo().toLowerCase() };
    const MCP_BODY = { protocol: 'mcp', mcp_transport: 'streamable_http' };
    const cases: Array<[string, string, Record<string, string>, unknown, boolean]> = [
      ['get', '/v1/agents', { cursor: '' }, undefined, false],
      ['get', '/v1/agents', { limit: '-5' }, undefined, true],
      ['get', '/v1/credentials', { limit: '1e2' }, undefined, false],
      ['get', '/v1/invocations', { agent_id: '' }, undefined, false],
      ['get', '/v1/invocations', { status: '' }, undefined, false],
      ['get', '/v1/invocations', { limit: '-1', since: '' }, undefined, false],
      ['get', '/v1/invocations', { limit: '-1' }, undefined, true],
      ['get', '/v1/policy/decisions', { limit: 'abc' }, undefined, true],
      ['get', '/v1/analytics', { bucket: 'day' }, undefined, false],
      ['post', '/v1/credentials', {}, { name: uniqueName('c'), auth_type: 'bearer', source: 'managed' }, false],
      ['post', '/v1/credentials', {}, { name: uniqueName('c'), auth_type: 'none', source: 'managed' }, true],
      ['post', '/v1/credentials', {}, { name: 'a\u0000b', auth_type: 'none', source: 'managed' }, false],
      ['post', '/v1/credentials', {}, { name: ' \u3000', auth_type: 'none', source: 'managed' }, false],
      [
        'post',
        '/v1/credentials',
        {},
        { name: uniqueName('c'), auth_type: 'bearer', source: 'managed', plaintext: 'a b\n' },
        false,
      ],
      ['post', '/v1/agents', {}, { name: uniqueName(), protocol: 'mcp' }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), protocol: 'mcp', mcp_transport: 'streamable_http' }, true],
      ['post', '/v1/agents', {}, { name: uniqueName(), mcp_transport: 'streamable_http' }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), metadata: { k: ['a\u0000'] } }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), metadata: { k: [1, { n: null }] } }, true],
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_rps: agentMaxRps + 1 }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_rps: agentMaxRps }, true],
      // A rule across fields the document states too (if/then): a burst needs a rate.
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_burst: 5 }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_burst: 5, rate_limit_rps: null }, false],
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_burst: 5, rate_limit_rps: 1 }, true],
      ['post', '/v1/agents', {}, { name: uniqueName(), rate_limit_burst: null }, true],
      ['post', '/v1/agents', {}, { name: 'x'.repeat(199) + '  ' }, false],
      // Lengths are characters (code points), as JSON Schema counts them, not UTF-16 units.
      ['post', '/v1/agents', {}, { name: `${'\u{1F600}'.repeat(150)}${uniqueName()}` }, true],
      ['post', '/v1/agents', {}, { name: '\u{1F600}'.repeat(201) }, false],
      // Metered pricing: scheme upto takes a meter and only it does; a tokens meter is http's; the
      // header and prices the meters take (if/then/else and not, in the document too).
      ...(
        [
          [{ scheme: 'upto', meter: { kind: 'header', header: 'X-Cost' } }, {}, true],
          [{ scheme: 'upto', meter: { kind: 'tokens', input_per_1k: '0', output_per_1k: '1' } }, {}, true],
          [{ scheme: 'upto' }, {}, false],
          [{ meter: { kind: 'header', header: 'X-Cost' } }, {}, false],
          [{ scheme: 'exact', meter: { kind: 'header', header: 'X-Cost' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'header', header: 'Content-LENGTH' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'header', header: 'x-gateway-cost' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'header', header: 'a b' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'tokens', input_per_1k: '0', output_per_1k: '0' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'tokens', input_per_1k: '01', output_per_1k: '1' } }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'header', header: 'X-Cost' } }, MCP_BODY, true],
          [{ scheme: 'upto', meter: { kind: 'tokens', input_per_1k: '1', output_per_1k: '1' } }, MCP_BODY, false],
          // Channel pricing: batch-settlement may take a meter, and it alone takes min_deposit and
          // withdraw_delay, the delay within the channel contract's bounds (if/else and not).
          [{ scheme: 'batch-settlement' }, {}, true],
          [{ scheme: 'batch-settlement', meter: { kind: 'header', header: 'X-Cost' } }, {}, true],
          [{ scheme: 'batch-settlement', min_deposit: '10', withdraw_delay: 900 }, {}, true],
          [{ scheme: 'batch-settlement', withdraw_delay: 2_592_000 }, MCP_BODY, true],
          [{ scheme: 'batch-settlement', withdraw_delay: 899 }, {}, false],
          [{ scheme: 'batch-settlement', withdraw_delay: 2_592_001 }, {}, false],
          [{ scheme: 'batch-settlement', withdraw_delay: 900.5 }, {}, false],
          [{ scheme: 'batch-settlement', min_deposit: '0' }, {}, false],
          [
            { scheme: 'batch-settlement', meter: { kind: 'tokens', input_per_1k: '1', output_per_1k: '1' } },
            MCP_BODY,
            false,
          ],
          [{ min_deposit: '10' }, {}, false],
          [{ scheme: 'exact', withdraw_delay: 900 }, {}, false],
          [{ scheme: 'upto', meter: { kind: 'header', header: 'X-Cost' }, min_deposit: '10' }, {}, false],
        ] as const
      ).map(([metered, body, expected]): [string, string, Record<string, string>, unknown, boolean] => [
        'post',
        '/v1/agents',
        {},
        { name: uniqueName(), ...body, pricing: { ...PRICING, ...metered } },
        expected,
      ]),
      [
        'put',
        '/v1/policy',
        {},
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['a*b'] } }] },
        false,
      ],
      [
        'put',
        '/v1/policy',
        {},
        { default: 'allow', on_error: 'deny', rules: [{ action: 'deny', match: { tools: ['a_*'] } }] },
        true,
      ],
    ];
    for (const [method, template, query, json, expected] of cases) {
      const what = `${method} ${template} ${JSON.stringify(query)} ${JSON.stringify(json) ?? ''}`;
      assert.equal(documentTakes(method, template, query, json), expected, `the document on ${what}`);
      const res = await call(method.toUpperCase(), `${template}?${new URLSearchParams(query)}`, {
        token,
        ...(json === undefined ? {} : { json }),
      });
      assert.equal(res.status < 400, expected, `the server on ${what}: ${res.status} ${res.text}`);
      if (!expected) assert.equal(res.status, 400, `${what}: ${res.text}`);
    }
  });

  it('documents exactly the routes the API serves', () => {
    const deps = {
      config: stack().config,
      orm: stack().orm,
      feed: stack().feed,
      log: createLogger('api', 'silent'),
    } as AppDeps;
    const none = {} as never;
    const served = new Set<string>();
    const routers: Array<[string, { stack: Array<{ path: string | RegExp; methods: string[] }> }]> = [
      ['', healthRoutes(deps, none)],
      ['', openapiRoutes({ rps: 1, burst: 1 })],
      ['', consoleRoutes(deps)],
      ['', jwksRoutes(deps)],
      ['', publicRoutes(deps, none as ProxyParts)],
      ['', discoveryRoutes(deps, none as ProxyParts)],
      ...[
        agentRoutes(deps, createAgentRows(deps.orm, stack().feed), none),
        credentialRoutes(deps),
        mcpServerRoutes(deps, none as ProxyParts),
        budgetRoutes(deps, { budgets: none }),
        settlementRoutes(deps),
        channelRoutes(deps),
        proxyRoutes(deps, none as ProxyParts),
        policyRoutes(deps, none as PolicyEngine),
        analyticsRoutes(deps, none as Limiter),
        receiptRoutes(deps),
        invocationRoutes(deps),
      ].map((router): [string, (typeof routers)[number][1]] => ['/v1', router]),
    ];
    for (const [prefix, router] of routers) {
      for (const layer of router.stack) {
        for (const method of layer.methods.filter((m) => m !== 'HEAD'))
          served.add(`${method.toLowerCase()} ${prefix}${String(layer.path).replace(/:(\w+)/g, '{$1}')}`);
      }
    }
    const documented = new Set<string>();
    for (const [path, ops] of Object.entries(doc.paths))
      for (const method of Object.keys(ops)) documented.add(`${method} ${path.replace('{inv_id}', '{invId}')}`);
    assert.deepEqual([...served].sort(), [...documented].sort());
  });

  it('serves every documented operation (no path of the document is unrouted)', async () => {
    const token = await stack().token(`tenant-openapi-routes-${uniqueName()}`);
    for (const [template, ops] of Object.entries(doc.paths)) {
      const path = template
        .replace('{id}', 'agt_0190a0a0-0000-7000-8000-000000000000')
        .replace('{inv_id}', 'inv_0190a0a0-0000-7000-8000-000000000000');
      for (const method of Object.keys(ops)) {
        const res = await call(method.toUpperCase(), path, {
          token,
          ...(method === 'get' || method === 'delete' ? {} : { json: {} }),
        });
        assert.ok(
          ![405, 501].includes(res.status) && !(res.status === 404 && res.json === undefined),
          `${method} ${template} is routed (${res.status} ${res.text.slice(0, 60)})`,
        );
      }
    }
  });

  it('every documented status of every management operation is what the server answers, live', async function () {
    this.timeout(120_000);
    const tenant = `tenant-openapi-${uniqueName()}`;
    const token = await stack().token(tenant);
    const other = await stack().token(`${tenant}-other`);
    const unknownAgent = 'agt_0190a0a0-0000-7000-8000-000000000000';
    const unknownCred = 'cred_0190a0a0-0000-7000-8000-000000000000';
    const huge = { filler: 'x'.repeat(1024 * 1024 + 1) }; // over the 1 MiB JSON cap

    // Service endpoints.
    await checked('GET', '/healthz');
    await checked('GET', '/readyz');
    await checked('GET', '/version');

    // Credentials.
    const cred = (
      await checked('POST', '/v1/credentials', {
        token,
        json: { name: 'bearer', auth_type: 'bearer', source: 'managed', plaintext: 'openapi-secret-0001' },
      })
    ).json;
    await checked('POST', '/v1/credentials', {
      token,
      json: {
        name: 'vault',
        auth_type: 'api_key',
        source: 'vault',
        vault_ref: `secret/data/tenants/${tenant}/x#y`,
        header_name: 'X-Key',
      },
    });
    const pem = (
      await checked('POST', '/v1/credentials', {
        token,
        json: { name: 'pem', auth_type: 'none', source: 'managed', plaintext: clientTlsBundle() },
      })
    ).json;
    await checked('POST', '/v1/credentials', { token, json: { name: 'bearer', auth_type: 'none', source: 'managed' } }); // 409
    await checked('POST', '/v1/credentials', { token, json: { name: 'x', auth_type: 'bearer', source: 'managed' } }); // 400
    await checked('POST', '/v1/credentials', { json: {} }); // 401
    await checked('POST', '/v1/credentials', { token, json: huge }); // 413
    await checked('GET', '/v1/credentials?limit=1', { token });
    await checked('GET', '/v1/credentials?cursor=zzz', { token });
    await checked('GET', '/v1/credentials', {});
    await checked('GET', `/v1/credentials/${cred.id}`, { token });
    await checked('GET', `/v1/credentials/${cred.id}`, { token: other });
    await checked('GET', `/v1/credentials/${cred.id}`, {});
    await checked('PUT', `/v1/credentials/${cred.id}`, { token, json: { plaintext: 'openapi-secret-0002' } });
    await checked('PUT', `/v1/credentials/${cred.id}`, { token, json: { name: '' } });
    await checked('PUT', `/v1/credentials/${cred.id}`, { token, json: { name: 'pem' } }); // 409
    await checked('PUT', `/v1/credentials/${unknownCred}`, { token, json: {} });
    await checked('PUT', `/v1/credentials/${cred.id}`, { json: {} });
    await checked('PUT', `/v1/credentials/${cred.id}`, { token, json: huge }); // 413

    // Agents.
    const agent = (
      await checked('POST', '/v1/agents', {
        token,
        json: { name: 'a1', upstream_url: upstream.url, credential_ref: cred.id, pricing: undefined, tags: ['x'] },
      })
    ).json;
    const priced = (
      await checked('POST', '/v1/agents', {
        token,
        json: {
          name: 'a2',
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          pricing: {
            amount: '1000',
            asset: 'USDC',
            network: 'base',
            pay_to: '0x52908400098527886e0f7030069857d2e4169ee7',
            tools: { t: '1' },
          },
          rate_limit_rps: 3,
        },
      })
    ).json;
    await checked('POST', '/v1/agents', { token, json: { name: 'a1' } }); // 409
    await checked('POST', '/v1/agents', { token, json: { name: 'a3', protocol: 'mcp' } }); // 400
    await checked('POST', '/v1/agents', { json: { name: 'a4' } }); // 401
    await checked('POST', '/v1/agents', { token, json: huge }); // 413
    await checked('GET', '/v1/agents?limit=1', { token });
    await checked('GET', '/v1/agents?status=nope', { token });
    await checked('GET', '/v1/agents', {});
    await checked('GET', `/v1/agents/${priced.id}`, { token });
    await checked('GET', `/v1/agents/${agent.id}`, { token: other });
    await checked('GET', `/v1/agents/${agent.id}`, {});
    await checked('PATCH', `/v1/agents/${priced.id}`, { token, json: { pricing: null, description: 'd' } });
    await checked('PATCH', `/v1/agents/${priced.id}`, { token, json: { name: 'a1' } }); // 409
    await checked('PATCH', `/v1/agents/${priced.id}`, { token, json: { protocol: 'nope' } }); // 400
    await checked('PATCH', `/v1/agents/${unknownAgent}`, { token, json: {} });
    await checked('PATCH', `/v1/agents/${priced.id}`, { json: {} });
    await checked('PATCH', `/v1/agents/${priced.id}`, { token, json: huge }); // 413
    await checked('POST', `/v1/agents/${priced.id}/suspend`, { token, json: { reason: 'r' } });
    await checked('POST', `/v1/agents/${priced.id}/suspend`, { token, json: { reason: 1 } });
    await checked('POST', `/v1/agents/${unknownAgent}/suspend`, { token });
    await checked('POST', `/v1/agents/${priced.id}/suspend`, {});
    await checked('POST', `/v1/agents/${priced.id}/suspend`, { token, json: huge }); // 413
    await checked('POST', `/v1/agents/${priced.id}/unsuspend`, { token });
    await checked('POST', `/v1/agents/${priced.id}/unsuspend`, { token, json: { x: 1 } });
    await checked('POST', `/v1/agents/${unknownAgent}/unsuspend`, { token });
    await checked('POST', `/v1/agents/${priced.id}/unsuspend`, {});
    await checked('POST', `/v1/agents/${priced.id}/unsuspend`, { token, json: huge }); // 413

    // Proxy: one call through, polled.
    const invoked = await checked('POST', `/v1/proxy/${agent.id}`, { token, body: 'hi' });
    await waitForInvocation(token, agent.id, invoked.json.invocation_id);
    await checked('GET', `/v1/proxy/${agent.id}/invocations/${invoked.json.invocation_id}`, { token });

    // Every field a poll or a list answers, from real calls.
    const poll = async (agentId: string, invocationId: string) => {
      // A streaming call's row is written beside the call: it may not be there at once.
      await waitFor(
        async () => (await call('GET', `/v1/proxy/${agentId}/invocations/${invocationId}`, { token })).status === 200,
        { everyMs: 100, what: `the row of ${invocationId}` },
      );
      await waitForInvocation(token, agentId, invocationId);
      return (await checked('GET', `/v1/proxy/${agentId}/invocations/${invocationId}`, { token })).json;
    };
    // A captured body, the caller's model and request id.
    const capturing = (
      await checked('POST', '/v1/agents', {
        token,
        json: { name: 'cap', upstream_url: upstream.url, capture_body: true },
      })
    ).json;
    const kept = await checked('POST', `/v1/proxy/${capturing.id}`, {
      token,
      body: 'keep',
      headers: { 'x-gateway-model': 'model-1', 'x-request-id': 'openapi-request-1' },
    });
    const keptPoll = await poll(capturing.id, kept.json.invocation_id);
    assert.ok(keptPoll.response_body_b64, 'the captured body is polled');
    assert.deepEqual(
      [keptPoll.model, keptPoll.request_id, keptPoll.mode],
      ['model-1', 'openapi-request-1', 'transactional'],
    );
    // A failed call: its error class.
    const down = (
      await checked('POST', '/v1/agents', {
        token,
        json: { name: 'down', upstream_url: `http://127.0.0.1:${await closedPort()}/` },
      })
    ).json;
    const refused = await checked('POST', `/v1/proxy/${down.id}`, { token, body: 'x' });
    assert.equal((await poll(down.id, refused.json.invocation_id)).error_class, 'connect');
    // A streaming call: its mode and time to first byte.
    const streamed = await checked('POST', `/v1/proxy/${agent.id}/stream`, { token, body: 'stream' });
    const streamedId = String(streamed.headers['x-gateway-invocation-id']);
    const streamedPoll = await poll(agent.id, streamedId);
    assert.equal(streamedPoll.mode, 'streaming');
    assert.equal(typeof streamedPoll.ttft_ms, 'number');
    // A priced agent: the 402 challenge, then a paid call (verified only: no settlement configured yet).
    const payTo = newPayTo();
    const paid = (
      await checked('POST', '/v1/agents', {
        token,
        json: {
          name: 'paid',
          upstream_url: upstream.url,
          pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: payTo },
        },
      })
    ).json;
    const challenge = await checked('POST', `/v1/proxy/${paid.id}`, { token, body: 'pay?' });
    assert.equal(challenge.status, 402);
    const payer = await newPayer(100_000n);
    const payment = encodePayment(await signPayment(payer, { payTo, value: 1000n }));
    const bought = await checked('POST', `/v1/proxy/${paid.id}`, {
      token,
      body: 'paid',
      headers: { 'x-payment': payment },
    });
    assert.equal(bought.status, 202, bought.text);
    const boughtPoll = await poll(paid.id, bought.json.invocation_id);
    assert.deepEqual(
      [boughtPoll.payment_amount, boughtPoll.payment_network, boughtPoll.payment_payer],
      ['1000', 'base', payer.address],
    );
    await checked('GET', `/v1/invocations?agent_id=${down.id}`, { token });
    await checked('GET', `/v1/invocations?agent_id=${paid.id}`, { token });
    await checked('GET', `/v1/invocations?since=${new Date(Date.now() - 3_600_000).toISOString()}`, { token });

    // Invocation records, receipts, policy and analytics (their modules own them; the document must still be true).
    await checked('GET', `/v1/invocations?agent_id=${agent.id}`, { token });
    await checked('GET', '/v1/invocations?status=bogus', { token });
    await checked('GET', `/v1/invocations/${invoked.json.invocation_id}/receipt`, { token });
    await checked('GET', '/.well-known/jwks.json');
    await checked('GET', '/v1/policy', { token });
    await checked('PUT', '/v1/policy', { token, json: { default: 'allow', on_error: 'deny' } });
    await checked('PUT', '/v1/policy', {
      token,
      json: { default: 'allow', on_error: 'deny', rules: [{ action: 'warn', match: { tools: ['read_*'] } }] },
    });
    await checked('PUT', '/v1/policy', { token, json: { default: 'maybe' } });
    await checked('PUT', '/v1/policy', { json: { default: 'allow', on_error: 'deny' } }); // 401
    await checked('PUT', '/v1/policy', { token, json: huge }); // 413
    await checked('GET', '/v1/policy', { token });
    await checked('GET', '/v1/policy', {}); // 401
    // An MCP call the policy warns on: its decision names the invocation it decided.
    const mcp = (
      await checked('POST', '/v1/agents', {
        token,
        json: { name: 'mcp', protocol: 'mcp', mcp_transport: 'streamable_http', upstream_url: upstream.url },
      })
    ).json;
    const tool = await checked('POST', `/v1/proxy/${mcp.id}`, {
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'read_file' } }),
    });
    const toolPoll = await poll(mcp.id, tool.json.invocation_id);
    assert.deepEqual([toolPoll.mcp_method, toolPoll.mcp_tool], ['tools/call', 'read_file']);
    const decisions = await checked('GET', '/v1/policy/decisions?limit=5', { token });
    assert.equal(decisions.json.data[0].invocation_id, tool.json.invocation_id);
    await checked('GET', '/v1/policy/decisions?since=yesterday', { token }); // 400
    await checked('GET', '/v1/policy/decisions', {}); // 401
    await checked('DELETE', '/v1/policy', { token });
    await checked('DELETE', '/v1/policy', { token }); // 404
    await checked('DELETE', '/v1/policy', {}); // 401
    await checked('GET', '/v1/policy', { token }); // 404
    await checked('GET', `/v1/analytics?since=${new Date(Date.now() - 3_600_000).toISOString()}`, { token });
    await checked('GET', '/v1/analytics', { token });

    // Settlement.
    await checked('GET', '/v1/settlement/config', { token });
    await checked('GET', '/v1/settlement/config', {});
    await checked('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: 'https://facilitator.example.com', facilitator_credential_ref: pem.id },
    });
    await checked('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: 'https://facilitator.example.com', facilitator_credential_ref: pem.id },
    });
    await checked('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: 'https://facilitator.example.com', facilitator_credential_ref: cred.id },
    });
    await checked('PUT', '/v1/settlement/config', { json: {} });
    await checked('PUT', '/v1/settlement/config', { token, json: huge }); // 413
    await checked('GET', '/v1/settlement/config', { token });
    await checked('DELETE', `/v1/credentials/${pem.id}`, { token }); // 409: facilitator credential
    await checked('DELETE', '/v1/settlement/config', { token });
    await checked('DELETE', '/v1/settlement/config', { token });
    await checked('DELETE', '/v1/settlement/config', {});

    // Channels: one of the tenant's, as the admission writes it.
    const channelId = `0x${randomBytes(32).toString('hex')}`;
    const party = `0x${randomBytes(20).toString('hex')}`;
    await stack()
      .orm.em.getConnection()
      .execute(
        `insert into channels (id, tenant_id, payer, receiver, receiver_authorizer, config) values (?, ?, ?, ?, ?, ?::jsonb)`,
        [
          channelId,
          tenant,
          party,
          party,
          party,
          JSON.stringify({
            payer: party,
            payerAuthorizer: party,
            receiver: party,
            receiverAuthorizer: party,
            token: stack().infra.tokenAddress,
            withdrawDelay: 900,
            salt: `0x${'0'.repeat(64)}`,
          }),
        ],
      );
    await checked('GET', '/v1/channels', { token });
    await checked('GET', '/v1/channels?cursor=nope', { token }); // 400
    await checked('GET', '/v1/channels', {}); // 401
    await checked('GET', `/v1/channels/${channelId}`, { token });
    await checked('GET', `/v1/channels/${channelId}`, { token: other }); // 404
    await checked('GET', `/v1/channels/${channelId}`, {}); // 401

    // Deletes.
    await checked('DELETE', `/v1/agents/${agent.id}`, { token });
    await checked('POST', `/v1/agents/${agent.id}/suspend`, { token }); // 409 inactive
    await checked('POST', `/v1/agents/${agent.id}/unsuspend`, { token }); // 409 inactive
    await checked('DELETE', `/v1/agents/${unknownAgent}`, { token });
    await checked('DELETE', `/v1/agents/${agent.id}`, {});
    await checked('DELETE', `/v1/credentials/${cred.id}`, { token });
    await checked('DELETE', `/v1/credentials/${cred.id}`, { token });
    await checked('DELETE', `/v1/credentials/${cred.id}`, {});

    // 500s from a gateway whose database is gone.
    const broken = await startBrokenGateway();
    try {
      for (const [method, path, json] of [
        ['POST', '/v1/agents', { name: 'x' }],
        ['GET', '/v1/agents'],
        ['GET', `/v1/agents/${unknownAgent}`],
        ['PATCH', `/v1/agents/${unknownAgent}`, {}],
        ['DELETE', `/v1/agents/${unknownAgent}`],
        ['POST', `/v1/agents/${unknownAgent}/suspend`],
        ['POST', `/v1/agents/${unknownAgent}/unsuspend`],
        ['POST', '/v1/credentials', { name: 'x', auth_type: 'none', source: 'managed' }],
        ['GET', '/v1/credentials'],
        ['GET', `/v1/credentials/${unknownCred}`],
        ['PUT', `/v1/credentials/${unknownCred}`, {}],
        ['DELETE', `/v1/credentials/${unknownCred}`],
        ['GET', '/v1/settlement/config'],
        [
          'PUT',
          '/v1/settlement/config',
          { facilitator_url: 'https://f.example.com', facilitator_credential_ref: unknownCred },
        ],
        ['DELETE', '/v1/settlement/config'],
        ['GET', '/v1/channels'],
        ['GET', `/v1/channels/0x${'ab'.repeat(32)}`],
        ['PUT', '/v1/policy', { default: 'allow', on_error: 'deny' }],
        ['GET', '/v1/policy'],
        ['DELETE', '/v1/policy'],
        ['GET', '/v1/policy/decisions'],
      ] as Array<[string, string, unknown?]>) {
        await checked(method, path, { token, ...(json === undefined ? {} : { json }) }, broken.url);
      }
    } finally {
      await broken.close();
    }

    // Every documented status of every management operation was answered and matched.
    const missing: string[] = [];
    for (const ops of Object.values(doc.paths)) {
      for (const op of Object.values(ops)) {
        if (!CHECKED_TAGS.has(op.tags[0])) continue;
        for (const status of Object.keys(op.responses))
          if (!seen.get(op.operationId)?.has(status)) missing.push(`${op.operationId} ${status}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  it('renders the reference page from the same document', async () => {
    const page = await call('GET', '/docs');
    assert.equal(page.status, 200);
    assert.match(String(page.headers['content-type']), /text\/html/);
    assert.match(String(page.headers['content-security-policy']), /default-src 'none'/);
    for (const ops of Object.values(doc.paths))
      for (const op of Object.values(ops)) assert.ok(page.text.includes(`id="op-${op.operationId}"`), op.operationId);
    for (const name of Object.keys(doc.components.schemas)) assert.ok(page.text.includes(`id="schema-${name}"`), name);
    assert.ok(page.text.includes('mcp_transport') && page.text.includes('facilitator_credential_ref'));
  });
});
