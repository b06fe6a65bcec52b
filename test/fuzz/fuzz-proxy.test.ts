// Hostile input, proxy: property-based cases (fast-check, seed printed, FC_SEED to replay)
// over what a caller controls on both invoke endpoints: X-Gateway-Model, X-Request-ID and
// other headers, X-PAYMENT (arbitrary text, base64 of arbitrary bytes or JSON, real signed
// payments with one field mutated, in several encodings) and MCP JSON-RPC bodies. Never a
// 5xx; 4xx bodies are `{error}` (or the x402 challenge); nothing is left half-written: a
// refused call creates no invocation and no payment claim, an accepted one exactly one each.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { hexlify, type Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { uniqueName } from '../support/http.ts';
import type { Reply } from '../support/http.ts';
import type { TestUpstream } from '../support/upstream.ts';
import { newPayTo, newPayer, signPayment } from '../support/x402.ts';
import {
  assertErrorBody,
  assertSpecAnswer,
  forAllCases,
  show,
  useFuzzHarness,
  type FuzzClient,
} from '../support/fuzz.ts';
import { anyJson, headerValue, nastyString, requestIdValue, wireBytes } from '../support/fuzz-arbitraries.ts';
import { applyMutation, encodeHeader, encoding, garbageHeader, mutation } from '../support/fuzz-payments.ts';
import { waitFor } from '../support/wait.ts';

type Json = Record<string, any>;

const sql = <T = Json>(query: string, params: unknown[] = []) =>
  stack().orm.em.fork().getConnection().execute<T[]>(query, params);
const SPEC_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const PRICE = '1000';
const TOOL_PRICES = { search: '500', free: '0' };

/** A 402 challenge as x402 v1 clients read it. */
function assertChallenge(res: Reply, price: string, what: string): void {
  assert.equal(res.status, 402, what);
  assert.equal(res.json?.x402Version, 1, `${what}: challenge without x402Version: ${res.text.slice(0, 200)}`);
  assert.equal(typeof res.json.error, 'string');
  assert.equal(res.json.accepts?.length, 1);
  const [req] = res.json.accepts;
  assert.deepEqual(
    [req.scheme, req.network, req.maxAmountRequired, req.asset],
    ['exact', 'base', price, stack().infra.tokenAddress],
    `${what}: challenge terms`,
  );
}

describe('hostile input: the proxy (property-based)', function () {
  this.timeout(300_000);
  const harness = useFuzzHarness((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ok: true, bytes: req.body.length }));
  });
  let client: FuzzClient;
  let upstream: TestUpstream;
  let token: string;
  let tenant: string;
  const agents: Record<'priced' | 'replay' | 'free' | 'mcpPriced' | 'mcpFree', string> = {
    priced: '',
    replay: '',
    free: '',
    mcpPriced: '',
    mcpFree: '',
  };
  const payTo = newPayTo();
  let payer: Wallet;

  before(async () => {
    ({ client, upstream } = harness);
    tenant = `tenant-fz-proxy-${uniqueName()}`;
    token = await stack().token(tenant);
    // The rate limiter is not under test: give every agent a bucket the fuzz cannot drain.
    const common = { upstream_url: upstream.url, rate_limit_rps: 100_000, rate_limit_burst: 100_000 };
    const pricing = { amount: PRICE, asset: 'USDC', network: 'base', pay_to: payTo };
    const mcp = { protocol: 'mcp', mcp_transport: 'streamable_http' };
    const specs: Record<keyof typeof agents, Json> = {
      priced: { ...common, pricing },
      replay: { ...common, pricing },
      free: { ...common },
      mcpPriced: { ...common, ...mcp, pricing: { ...pricing, tools: TOOL_PRICES } },
      mcpFree: { ...common, ...mcp },
    };
    for (const [key, spec] of Object.entries(specs) as Array<[keyof typeof agents, Json]>) {
      const res = await client.send('POST', '/v1/agents', { token, json: { name: uniqueName(key), ...spec } });
      assert.equal(res.status, 201, res.text);
      agents[key] = res.json.id;
    }
    payer = await newPayer(0n);
  });

  const invocationsOf = async (agentId: string) =>
    Number((await sql<{ n: string }>('select count(*) as n from invocations where agent_id = ?', [agentId]))[0].n);

  /** Streaming rows are written beside the call (group commit): wait for the count to settle. */
  async function expectInvocations(agentId: string, expected: number, what: string): Promise<void> {
    await waitFor(async () => (await invocationsOf(agentId)) === expected, {
      timeoutMs: 15_000,
      everyMs: 100,
      what: `${expected} invocations (${what})`,
      state: async () => `${await invocationsOf(agentId)} rows`,
    });
  }

  it('one payment buys one call on the streaming endpoint too: the same X-PAYMENT again is a 402', async () => {
    const payment = await signPayment(payer, { payTo, value: PRICE });
    const header = encodeHeader(payment, 'base64');
    const first = await client.send('POST', `/v1/proxy/${agents.replay}/stream`, {
      token,
      headers: { 'x-payment': header },
      body: 'paid stream',
    });
    assert.equal(first.status, 200, first.text);
    for (const path of [`/v1/proxy/${agents.replay}/stream`, `/v1/proxy/${agents.replay}`]) {
      const again = await client.send('POST', path, { token, headers: { 'x-payment': header }, body: 'replayed' });
      assertSpecAnswer(again, [402], `the same X-PAYMENT replayed on ${path}`);
    }
    const claims = await sql<{ invocation_id: string | null }>(
      'select invocation_id from payment_claims where nonce = ?',
      [payment.payload.authorization.nonce.toLowerCase()],
    );
    assert.deepEqual(
      claims.map((c) => c.invocation_id),
      [first.headers['x-gateway-invocation-id']],
      'the claim is bound to the paid call',
    );
  });

  it('X-Gateway-Model, X-Request-ID and other headers on a priced agent: 402 challenge or 400, never a record', async () => {
    const arb = fc.record({
      stream: fc.boolean(),
      model: fc.option(headerValue, { nil: undefined }),
      requestId: fc.option(requestIdValue, { nil: undefined }),
      extra: fc.dictionary(fc.stringMatching(/^x-[a-z0-9-]{1,12}$/), headerValue, { maxKeys: 3 }),
      contentType: fc.option(
        fc.constantFrom(
          'application/json',
          'text/plain',
          'application/octet-stream',
          'multipart/form-data; boundary=x',
          'application/json; charset=utf-16',
        ),
        { nil: undefined },
      ),
      body: fc.oneof(
        fc.string({ maxLength: 200 }),
        fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
      ),
    });
    await forAllCases(
      'proxy headers (priced agent)',
      arb,
      1200,
      async (c) => {
        const headers: Record<string, string> = { ...c.extra };
        if (c.model !== undefined) headers['x-gateway-model'] = c.model;
        if (c.requestId !== undefined) headers['x-request-id'] = c.requestId;
        if (c.contentType) headers['content-type'] = c.contentType;
        const path = `/v1/proxy/${agents.priced}${c.stream ? '/stream' : ''}`;
        const res = await client.send('POST', path, { token, headers, body: c.body });
        const tooLong = c.model !== undefined && wireBytes(c.model) > 256;
        assertSpecAnswer(res, tooLong ? [400] : [402], `POST ${path}`, { ownBody: [402] });
        if (!tooLong) assertChallenge(res, PRICE, `POST ${path}`);
        // X-Request-ID: the caller's when it is a sane token, else one the gateway made.
        const given = c.requestId?.replace(/^[ \t]+|[ \t]+$/g, '');
        const answered = res.headers['x-request-id'];
        if (given !== undefined && SPEC_REQUEST_ID.test(given))
          assert.equal(answered, given, "the caller's X-Request-ID is honoured");
        else assert.match(String(answered), UUID, 'an unusable X-Request-ID is replaced');
      },
      {
        examples: [
          { stream: false, model: 'é'.repeat(200), requestId: undefined, extra: {}, contentType: undefined, body: 'x' },
        ],
      },
    );
    assert.equal(await invocationsOf(agents.priced), 0, 'no invocation record for a challenge or a refusal');
  });

  it("headers through the streaming endpoint of a free agent: forwarded with one request id, never the caller's token", async () => {
    const arb = fc.record({
      model: fc.option(headerValue, { nil: undefined }),
      requestId: fc.option(requestIdValue, { nil: undefined }),
      extra: fc.dictionary(fc.stringMatching(/^x-[a-z0-9-]{1,12}$/), headerValue, { maxKeys: 3 }),
      hostile: fc.subarray([
        'x-forwarded-for',
        'x-gateway-invocation-id',
        'proxy-authorization',
        'cookie',
        'x-payment',
        'forwarded',
        'x-real-ip',
      ]),
    });
    let accepted = 0;
    const runs = await forAllCases('proxy headers (streaming, free agent)', arb, 400, async (c, { index }) => {
      const marker = `case-${index}-${randomBytes(6).toString('hex')}`;
      const headers: Record<string, string> = { ...c.extra, 'content-type': 'text/plain' };
      for (const h of c.hostile) headers[h] = `hostile-${marker}`;
      if (c.model !== undefined) headers['x-gateway-model'] = c.model;
      if (c.requestId !== undefined) headers['x-request-id'] = c.requestId;
      const res = await client.send('POST', `/v1/proxy/${agents.free}/stream`, { token, headers, body: marker });
      const tooLong = c.model !== undefined && wireBytes(c.model) > 256;
      assertSpecAnswer(res, tooLong ? [400] : [200], 'POST /v1/proxy/{id}/stream');
      if (res.status !== 200) return;
      accepted += 1;
      assert.match(String(res.headers['x-gateway-invocation-id']), /^inv_/);
      const seen = upstream.received.filter((r) => r.body.toString() === marker);
      assert.equal(seen.length, 1, 'forwarded exactly once');
      const up = seen[0].headers;
      assert.equal(
        up['x-request-id'],
        res.headers['x-request-id'],
        'the upstream saw the request id the caller was given',
      );
      assert.equal(up.authorization, undefined, "the caller's token went upstream");
      for (const h of c.hostile) assert.ok(!String(up[h] ?? '').includes(marker), `${h} went upstream`);
      assert.equal(up['x-gateway-model'], undefined, 'X-Gateway-Model went upstream');
    });
    await expectInvocations(agents.free, accepted, 'one record per forwarded call');
    assert.ok(accepted > runs / 2, `too few forwarded (${accepted} of ${runs})`);
  });

  it('X-PAYMENT: garbage, base64 of anything, and signed payments with one field mutated: 402 {error} or one paid call', async () => {
    const arb = fc.oneof(
      { weight: 2, arbitrary: garbageHeader.map((header) => ({ kind: 'garbage' as const, header })) },
      {
        weight: 5,
        arbitrary: fc.record({
          kind: fc.constant('signed' as const),
          mutation,
          encoding,
          nonce: fc.uint8Array({ minLength: 32, maxLength: 32 }),
          stream: fc.boolean(),
        }),
      },
    );
    let paid = 0;
    const runs = await forAllCases(
      'X-PAYMENT on a priced agent',
      arb,
      1200,
      async (c) => {
        let header: string;
        let stream = false;
        if (c.kind === 'garbage') {
          header = c.header;
        } else {
          stream = c.stream;
          const payment = await signPayment(payer, { payTo, value: PRICE, nonce: hexlify(c.nonce) });
          header = encodeHeader(applyMutation(payment, c.mutation), c.encoding);
        }
        const path = `/v1/proxy/${agents.priced}${stream ? '/stream' : ''}`;
        const res = await client.send('POST', path, {
          token,
          headers: { 'x-payment': header, 'content-type': 'text/plain' },
          body: 'paid call',
        });
        assertSpecAnswer(res, stream ? [200, 402] : [202, 402], `POST ${path} with X-PAYMENT`, { ownBody: [402] });
        if (res.status === 402) {
          if (header.trim() === '') assertChallenge(res, PRICE, 'an empty X-PAYMENT');
          else {
            assertErrorBody(res, 'a refused payment');
            assert.ok(!/0x[0-9a-f]/i.test(res.json.error), `the refusal names internal detail: ${res.json.error}`);
          }
        } else {
          paid += 1;
          assert.match(String(res.headers['x-gateway-invocation-id']), /^inv_/);
        }
      },
      {
        examples: [
          // A recipient whose checksum is broken by one letter's case.
          {
            kind: 'signed',
            mutation: { path: ['payload', 'authorization', 'to'], how: 'flip-case', value: null, at: 0, numeric: '0' },
            encoding: 'base64',
            nonce: new Uint8Array(32).fill(7),
            stream: false,
          },
          {
            kind: 'signed',
            mutation: {
              path: ['payload', 'authorization', 'from'],
              how: 'flip-case',
              value: null,
              at: 3,
              numeric: '0',
            },
            encoding: 'base64',
            nonce: new Uint8Array(32).fill(8),
            stream: false,
          },
          // A value that is no decimal number at all.
          {
            kind: 'signed',
            mutation: {
              path: ['payload', 'authorization', 'value'],
              how: 'numeric',
              value: null,
              at: 0,
              numeric: '1e3',
            },
            encoding: 'base64',
            nonce: new Uint8Array(32).fill(9),
            stream: false,
          },
          {
            kind: 'signed',
            mutation: {
              path: ['payload', 'authorization', 'validBefore'],
              how: 'numeric',
              value: null,
              at: 0,
              numeric: '0x10',
            },
            encoding: 'base64',
            nonce: new Uint8Array(32).fill(10),
            stream: true,
          },
        ],
      },
    );
    // Exactly the paid calls left records: one invocation and one bound payment claim each.
    await expectInvocations(agents.priced, paid, 'one invocation per accepted payment, none for a refusal');
    const claims = await sql<{ invocation_id: string | null }>(
      'select invocation_id from payment_claims where agent_id = ?',
      [agents.priced],
    );
    assert.equal(claims.length, paid, 'one payment claim per accepted payment, none for a refusal');
    assert.ok(
      claims.every((c) => c.invocation_id !== null),
      `every claim is bound to its invocation: ${show(await sql('select * from payment_claims where agent_id = ? and invocation_id is null', [agents.priced]))}`,
    );
    assert.ok(paid > 0 && paid < runs, `paid ${paid} of ${runs}`);
  });

  it('MCP bodies: 400 for anything but one JSON-RPC request; the challenge prices the tool; forwarded ones are recorded', async () => {
    const toolName = fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom('search', 'free', 'other', 'read_file') },
      { weight: 2, arbitrary: nastyString },
      { weight: 1, arbitrary: fc.constantFrom('nul\u0000tool', 'x'.repeat(300), '__proto__') },
    );
    const rpc = fc.record(
      {
        jsonrpc: fc.oneof(
          { weight: 6, arbitrary: fc.constant('2.0') },
          { weight: 1, arbitrary: fc.constantFrom('1.0', 2, null) },
        ),
        method: fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom('tools/call', 'tools/list', 'initialize') },
          { weight: 2, arbitrary: nastyString },
          { weight: 1, arbitrary: fc.constantFrom('nul\u0000method', 'm'.repeat(257)) },
        ),
        id: fc.oneof(fc.integer(), fc.string({ maxLength: 10 }), fc.constant(null), fc.constant({})),
        params: fc.oneof(
          {
            weight: 4,
            arbitrary: fc.record({ name: fc.oneof(toolName, anyJson), arguments: anyJson }, { requiredKeys: [] }),
          },
          { weight: 1, arbitrary: anyJson },
        ),
      },
      { requiredKeys: ['jsonrpc', 'method'] },
    );
    const body = fc.oneof(
      { weight: 6, arbitrary: rpc.map((r) => JSON.stringify(r)) },
      { weight: 1, arbitrary: fc.array(rpc, { minLength: 1, maxLength: 3 }).map((r) => JSON.stringify(r)) },
      { weight: 1, arbitrary: anyJson.map((j) => JSON.stringify(j) ?? '') },
      {
        weight: 1,
        arbitrary: fc.oneof(
          fc.string({ maxLength: 100 }),
          fc.uint8Array({ maxLength: 100 }).map((b) => Buffer.from(b).toString('latin1')),
        ),
      },
    );
    let forwarded = 0;
    let freeTools = 0;
    await forAllCases(
      'MCP bodies',
      fc.record({ body, free: fc.boolean() }),
      900,
      async (c) => {
        const agentId = c.free ? agents.mcpFree : agents.mcpPriced;
        const path = `/v1/proxy/${agentId}${c.free ? '/stream' : ''}`;
        const res = await client.send('POST', path, {
          token,
          headers: { 'content-type': 'application/json' },
          body: c.body,
        });
        let parsed: any;
        try {
          parsed = JSON.parse(c.body);
        } catch {
          parsed = undefined;
        }
        const isRequest =
          parsed &&
          typeof parsed === 'object' &&
          !Array.isArray(parsed) &&
          parsed.jsonrpc === '2.0' &&
          typeof parsed.method === 'string' &&
          parsed.method.length >= 1 &&
          parsed.method.length <= 256 &&
          (parsed.id === undefined || ['string', 'number'].includes(typeof parsed.id));
        const tool =
          isRequest && parsed.method === 'tools/call' && typeof parsed.params?.name === 'string'
            ? parsed.params.name.slice(0, 256)
            : null;
        const price =
          tool !== null && Object.hasOwn(TOOL_PRICES, tool) ? TOOL_PRICES[tool as keyof typeof TOOL_PRICES] : PRICE;
        // A tool priced 0 is free: forwarded without a payment.
        const paidAllowed = c.free ? [200, 400] : price === '0' ? [202, 400] : [402, 400];
        assertSpecAnswer(res, isRequest ? paidAllowed : [400], `POST ${path}`, { ownBody: [402] });
        if (res.status === 200) forwarded += 1;
        if (res.status === 202) freeTools += 1;
        if (res.status === 402) assertChallenge(res, price, 'an MCP challenge');
      },
      {
        examples: [
          {
            body: JSON.stringify({ jsonrpc: '2.0', method: 'tools/call', id: 1, params: { name: 'nul\u0000tool' } }),
            free: true,
          },
          { body: JSON.stringify({ jsonrpc: '2.0', method: 'nul\u0000method', id: 1 }), free: true },
        ],
      },
    );
    await expectInvocations(agents.mcpFree, forwarded, 'one record per forwarded MCP call');
    assert.equal(
      await invocationsOf(agents.mcpPriced),
      freeTools,
      'a record per free tool call, none for a challenge or a refusal',
    );
  });
});
