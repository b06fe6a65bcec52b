// Metered (`upto`) pricing through the agents API (docs/API.md "Metered pricing"): every
// inconsistent combination of scheme, meter and protocol is a 400 naming the field, on create and
// on the agent a PATCH leaves (pricing is replaced whole); a valid upto agent reads back as set;
// an exact agent reads back exactly as before (no `scheme` key unless it was sent).
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { assertError } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';

const PAY_TO_LOWER = '0x52908400098527886e0f7030069857d2e4169ee7';
const PAY_TO_CHECKSUMMED = '0x52908400098527886E0F7030069857D2E4169EE7';
const pricing = { amount: '10000', asset: 'USDC', network: 'base', pay_to: PAY_TO_LOWER };
const HEADER = { kind: 'header', header: 'X-Usage-Cost' };
const TOKENS = { kind: 'tokens', input_per_1k: '3000', output_per_1k: '15000' };
const upto = (meter: unknown = HEADER, extra: Record<string, unknown> = {}) => ({
  ...pricing,
  scheme: 'upto',
  meter,
  ...extra,
});
const MCP = { protocol: 'mcp', mcp_transport: 'streamable_http' };

describe('agents: metered (upto) pricing', () => {
  let upstream: TestUpstream;
  let token: string;
  before(async () => {
    upstream = await startUpstream();
    token = await stack().token(`tenant-metered-${uniqueName()}`, 'alice');
  });
  after(() => upstream.close());

  const create = (json: Record<string, unknown>) =>
    call('POST', '/v1/agents', { token, json: { name: uniqueName(), ...json } });
  const read = async (id: string) => (await call('GET', `/v1/agents/${id}`, { token })).json;

  it('answers 400 naming the field for every inconsistent scheme, meter and protocol', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ pricing: { ...pricing, scheme: 'batch' } }, /^pricing\.scheme must be exact, upto or batch-settlement$/],
      [{ pricing: { ...pricing, scheme: 7 } }, /^pricing\.scheme must be exact, upto or batch-settlement$/],
      [{ pricing: { ...pricing, meter: HEADER } }, /^pricing\.meter requires scheme upto or batch-settlement$/],
      [
        { pricing: { ...pricing, scheme: 'exact', meter: TOKENS } },
        /^pricing\.meter requires scheme upto or batch-settlement$/,
      ],
      [{ pricing: { ...pricing, scheme: 'upto' } }, /^pricing\.scheme upto requires a meter$/],
      [{ pricing: upto(null) }, /^pricing\.meter/],
      [{ pricing: upto('tokens') }, /^pricing\.meter/],
      [{ pricing: upto({ kind: 'bytes' }) }, /^pricing\.meter\.kind must be header or tokens$/],
      [{ pricing: upto({ kind: 'header' }) }, /^pricing\.meter\.header/],
      [{ pricing: upto({ kind: 'header', header: 'X Cost' }) }, /^pricing\.meter\.header must be a header name/],
      [{ pricing: upto({ kind: 'header', header: '' }) }, /^pricing\.meter\.header must be a header name/],
      [{ pricing: upto({ kind: 'header', header: 'x'.repeat(129) }) }, /^pricing\.meter\.header must be/],
      [{ pricing: upto({ kind: 'header', header: 'Content-Length' }) }, /^pricing\.meter\.header cannot be/],
      [{ pricing: upto({ kind: 'header', header: 'X-Gateway-Cost' }) }, /^pricing\.meter\.header cannot be/],
      [{ pricing: upto({ kind: 'header', header: 'payment-response' }) }, /^pricing\.meter\.header cannot be/],
      [{ pricing: upto({ ...HEADER, extra: 1 }) }, /^unknown field: pricing\.meter\.extra$/],
      [{ pricing: upto({ kind: 'tokens', input_per_1k: '1' }) }, /^pricing\.meter\.output_per_1k/],
      [{ pricing: upto({ ...TOKENS, input_per_1k: 5 }) }, /^pricing\.meter\.input_per_1k/],
      [{ pricing: upto({ ...TOKENS, input_per_1k: '1.5' }) }, /^pricing\.meter\.input_per_1k/],
      [{ pricing: upto({ ...TOKENS, output_per_1k: (1n << 256n).toString() }) }, /^pricing\.meter\.output_per_1k/],
      [
        { pricing: upto({ ...TOKENS, input_per_1k: '0', output_per_1k: '0' }) },
        /^pricing\.meter: input_per_1k and output_per_1k cannot both be 0$/,
      ],
      [{ ...MCP, pricing: upto(TOKENS) }, /^pricing\.meter kind tokens requires protocol http$/],
      [{ protocol: 'a2a', pricing: upto(TOKENS) }, /^pricing\.meter kind tokens requires protocol http$/],
      // The other pricing rules hold for upto as for exact.
      [{ pricing: upto(HEADER, { tools: { a: '1' } }) }, /^pricing\.tools requires protocol mcp$/],
      [{ pricing: upto(HEADER, { amount: '0' }) }, /^pricing\.amount/],
    ];
    for (const [json, message] of cases) assertError(await create(json), 400, message);
    // Nothing was created.
    const listed = await call('GET', '/v1/agents?limit=100', { token });
    assert.equal(listed.status, 200);
    assert.equal(listed.json.data.length, 0, listed.text);
  });

  it('creates upto agents that read back as set: http with either meter, mcp per tool, a2a per method', async () => {
    const shapes: Record<string, unknown>[] = [
      { upstream_url: upstream.url, pricing: upto(HEADER) },
      { upstream_url: upstream.url, pricing: upto(TOKENS) },
      { upstream_url: upstream.url, pricing: upto({ ...TOKENS, input_per_1k: '0' }) },
      { ...MCP, pricing: upto({ kind: 'header', header: 'x-cost' }, { tools: { search: '5000', free: '0' } }) },
      { protocol: 'a2a', pricing: upto(HEADER, { methods: { SendMessage: '700' }, skills: { echo: '900' } }) },
    ];
    for (const json of shapes) {
      const res = await create(json);
      assert.equal(res.status, 201, res.text);
      const sent = json.pricing as Record<string, unknown>;
      const expected = { ...sent, pay_to: PAY_TO_CHECKSUMMED };
      assert.deepEqual(res.json.pricing, expected);
      assert.deepEqual((await read(res.json.id)).pricing, expected);
    }
  });

  it('leaves exact agents as they were: no scheme key unless sent, and an explicit exact as sent', async () => {
    const plain = await create({ pricing });
    assert.equal(plain.status, 201, plain.text);
    assert.deepEqual(plain.json.pricing, { ...pricing, pay_to: PAY_TO_CHECKSUMMED });
    assert.ok(!Object.hasOwn(plain.json.pricing, 'scheme'));
    assert.deepEqual((await read(plain.json.id)).pricing, { ...pricing, pay_to: PAY_TO_CHECKSUMMED });
    const explicit = await create({ pricing: { ...pricing, scheme: 'exact' } });
    assert.equal(explicit.status, 201, explicit.text);
    assert.deepEqual(explicit.json.pricing, { ...pricing, scheme: 'exact', pay_to: PAY_TO_CHECKSUMMED });
  });

  it('checks a PATCH on the agent it leaves: pricing is replaced whole, the protocol bounds the meter', async () => {
    const agent = (await create({ pricing: upto(TOKENS) })).json;
    const patch = (json: unknown) => call('PATCH', `/v1/agents/${agent.id}`, { token, json });

    // The stored tokens meter does not go with the protocol the PATCH sets.
    assertError(await patch({ ...MCP }), 400, /^pricing\.meter kind tokens requires protocol http$/);
    assertError(await patch({ protocol: 'a2a' }), 400, /^pricing\.meter kind tokens requires protocol http$/);
    // A pricing object sent alone is the whole pricing: a meter without upto is refused, whatever is stored.
    assertError(
      await patch({ pricing: { ...pricing, meter: HEADER } }),
      400,
      /^pricing\.meter requires scheme upto or batch-settlement$/,
    );
    assertError(
      await patch({ pricing: { ...pricing, scheme: 'upto' } }),
      400,
      /^pricing\.scheme upto requires a meter/,
    );
    // Nothing of the refused patches stuck.
    const unchanged = await read(agent.id);
    assert.equal(unchanged.protocol, 'http');
    assert.deepEqual(unchanged.pricing, { ...upto(TOKENS), pay_to: PAY_TO_CHECKSUMMED });

    // The protocol and a header meter together: accepted.
    const mcp = await patch({ ...MCP, pricing: upto(HEADER, { tools: { t: '10' } }) });
    assert.equal(mcp.status, 200, mcp.text);
    assert.deepEqual(mcp.json.pricing, { ...upto(HEADER, { tools: { t: '10' } }), pay_to: PAY_TO_CHECKSUMMED });
    assertError(await patch({ pricing: upto(TOKENS, { tools: { t: '10' } }) }), 400, /requires protocol http/);

    // Back to exact: the scheme and meter go with the pricing they were part of.
    const exact = await patch({ pricing });
    assert.equal(exact.status, 200, exact.text);
    assert.deepEqual(exact.json.pricing, { ...pricing, pay_to: PAY_TO_CHECKSUMMED });
  });
});
