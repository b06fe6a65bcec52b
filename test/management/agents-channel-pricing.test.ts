// Channel pricing (`batch-settlement`) through the agents API (docs/API.md "Channel pricing"):
// every inconsistent combination of scheme, meter, min_deposit, withdraw_delay, per-call prices
// and protocol is a 400 naming the field, on create and on the agent a PATCH leaves (pricing is
// replaced whole); a valid agent reads back as set, with the withdrawal delay its challenge
// offers (86400 when not set); exact and upto agents take neither channel term.
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { assertError } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';
import { MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY } from '../../x402/schemes/batch-settlement/typed-data.ts';

const PAY_TO_LOWER = '0x52908400098527886e0f7030069857d2e4169ee7';
const PAY_TO_CHECKSUMMED = '0x52908400098527886E0F7030069857D2E4169EE7';
const pricing = { amount: '10000', asset: 'USDC', network: 'base', pay_to: PAY_TO_LOWER };
const HEADER = { kind: 'header', header: 'X-Usage-Cost' };
const TOKENS = { kind: 'tokens', input_per_1k: '3000', output_per_1k: '15000' };
const channel = (extra: Record<string, unknown> = {}) => ({ ...pricing, scheme: SCHEME_BATCH_SETTLEMENT, ...extra });
const MCP = { protocol: 'mcp', mcp_transport: 'streamable_http' };
const DEFAULT_DELAY = 86_400;

const MIN_DEPOSIT_FORM = /^pricing\.min_deposit must be a positive decimal integer string/;
const DELAY_FORM = /^pricing\.withdraw_delay must be an integer number of seconds from 900 to 2592000$/;

describe('agents: channel (batch-settlement) pricing', () => {
  let upstream: TestUpstream;
  let token: string;
  before(async () => {
    upstream = await startUpstream();
    token = await stack().token(`tenant-channel-${uniqueName()}`, 'alice');
  });
  after(() => upstream.close());

  const create = (json: Record<string, unknown>) =>
    call('POST', '/v1/agents', { token, json: { name: uniqueName(), ...json } });
  const read = async (id: string) => (await call('GET', `/v1/agents/${id}`, { token })).json;

  it('answers 400 naming the field for every inconsistent scheme, term, meter, price and protocol', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ pricing: { ...pricing, scheme: 'batch' } }, /^pricing\.scheme must be exact, upto or batch-settlement$/],
      [{ pricing: { ...pricing, scheme: 'Batch-Settlement' } }, /^pricing\.scheme must be exact, upto/],
      // The channel terms are batch-settlement's alone.
      [{ pricing: { ...pricing, min_deposit: '10000' } }, /^pricing\.min_deposit requires scheme batch-settlement$/],
      [{ pricing: { ...pricing, withdraw_delay: 900 } }, /^pricing\.withdraw_delay requires scheme batch-settlement$/],
      [
        { pricing: { ...pricing, scheme: 'exact', withdraw_delay: DEFAULT_DELAY } },
        /^pricing\.withdraw_delay requires scheme batch-settlement$/,
      ],
      [
        { pricing: { ...pricing, scheme: 'upto', meter: HEADER, min_deposit: '10000' } },
        /^pricing\.min_deposit requires scheme batch-settlement$/,
      ],
      [
        { pricing: { ...pricing, scheme: 'upto', meter: HEADER, withdraw_delay: 900 } },
        /^pricing\.withdraw_delay requires scheme batch-settlement$/,
      ],
      // min_deposit: a positive uint256 decimal string, at least every per-call ceiling.
      ...['0', '-1', '1.5', '01', ' 1', '', '1e6', (1n << 256n).toString(), 5, null].map(
        (bad): [Record<string, unknown>, RegExp] => [{ pricing: channel({ min_deposit: bad }) }, MIN_DEPOSIT_FORM],
      ),
      [{ pricing: channel({ min_deposit: '9999' }) }, /^pricing\.min_deposit must be at least pricing\.amount/],
      [
        { ...MCP, pricing: channel({ min_deposit: '15000', tools: { search: '20000', ping: '0' } }) },
        /^pricing\.min_deposit must be at least every price in pricing\.tools$/,
      ],
      [
        { protocol: 'a2a', pricing: channel({ min_deposit: '10000', methods: { SendMessage: '10001' } }) },
        /^pricing\.min_deposit must be at least every price in pricing\.methods$/,
      ],
      [
        { protocol: 'a2a', pricing: channel({ min_deposit: '10000', skills: { echo: '99999' } }) },
        /^pricing\.min_deposit must be at least every price in pricing\.skills$/,
      ],
      // withdraw_delay: whole seconds within the channel contract's bounds.
      ...[MIN_WITHDRAW_DELAY - 1, MAX_WITHDRAW_DELAY + 1, 0, -900, 86_400.5, '86400', null].map(
        (bad): [Record<string, unknown>, RegExp] => [{ pricing: channel({ withdraw_delay: bad }) }, DELAY_FORM],
      ),
      // The meter's rules hold for batch-settlement as for upto.
      [{ pricing: channel({ meter: { kind: 'bytes' } }) }, /^pricing\.meter\.kind must be header or tokens$/],
      [
        { pricing: channel({ meter: { kind: 'header', header: 'Content-Length' } }) },
        /^pricing\.meter\.header cannot be/,
      ],
      [{ pricing: channel({ meter: null }) }, /^pricing\.meter/],
      [{ ...MCP, pricing: channel({ meter: TOKENS }) }, /^pricing\.meter kind tokens requires protocol http$/],
      [{ protocol: 'a2a', pricing: channel({ meter: TOKENS }) }, /^pricing\.meter kind tokens requires protocol http$/],
      // The other pricing rules hold for batch-settlement as for exact.
      [{ pricing: channel({ tools: { a: '1' } }) }, /^pricing\.tools requires protocol mcp$/],
      [{ pricing: channel({ methods: { SendMessage: '1' } }) }, /^pricing\.methods requires protocol a2a$/],
      [{ pricing: channel({ amount: '0' }) }, /^pricing\.amount/],
      [{ pricing: channel({ max_deposit: '1' }) }, /^unknown field: pricing\.max_deposit$/],
    ];
    for (const [json, message] of cases) assertError(await create(json), 400, message);
    // Nothing was created.
    const listed = await call('GET', '/v1/agents?limit=100', { token });
    assert.equal(listed.status, 200);
    assert.equal(listed.json.data.length, 0, listed.text);
  });

  it('creates channel-priced agents that read back as set, with the withdrawal delay their challenge offers', async () => {
    const max = ((1n << 256n) - 1n).toString();
    const shapes: Array<[Record<string, unknown>, Record<string, unknown>]> = [
      // No meter (the ceiling is the charge), no terms: the default delay is stored and answered.
      [{ upstream_url: upstream.url, pricing: channel() }, { withdraw_delay: DEFAULT_DELAY }],
      [
        { upstream_url: upstream.url, pricing: channel({ meter: HEADER, min_deposit: '10000', withdraw_delay: 900 }) },
        {},
      ],
      [
        { upstream_url: upstream.url, pricing: channel({ meter: TOKENS, min_deposit: max }) },
        { withdraw_delay: DEFAULT_DELAY },
      ],
      [{ pricing: channel({ withdraw_delay: MAX_WITHDRAW_DELAY }) }, {}],
      [
        { ...MCP, pricing: channel({ tools: { search: '50000', ping: '0' }, min_deposit: '50000' }) },
        { withdraw_delay: DEFAULT_DELAY },
      ],
      [{ ...MCP, pricing: channel({ meter: HEADER, tools: { search: '5000' }, withdraw_delay: 3600 }) }, {}],
      [
        {
          protocol: 'a2a',
          pricing: channel({ methods: { SendMessage: '700' }, skills: { echo: '20000' }, min_deposit: '20000' }),
        },
        { withdraw_delay: DEFAULT_DELAY },
      ],
    ];
    for (const [json, added] of shapes) {
      const res = await create(json);
      assert.equal(res.status, 201, res.text);
      const expected = { ...(json.pricing as Record<string, unknown>), pay_to: PAY_TO_CHECKSUMMED, ...added };
      assert.deepEqual(res.json.pricing, expected);
      assert.deepEqual((await read(res.json.id)).pricing, expected);
      // The list shows the same pricing as the agent.
      const listed = await call('GET', '/v1/agents?limit=100', { token });
      assert.deepEqual(listed.json.data.find((a: { id: string }) => a.id === res.json.id).pricing, expected);
    }
  });

  it('leaves exact and upto agents without channel terms: they read back exactly as sent', async () => {
    for (const sent of [pricing, { ...pricing, scheme: 'exact' }, { ...pricing, scheme: 'upto', meter: HEADER }]) {
      const res = await create({ pricing: sent });
      assert.equal(res.status, 201, res.text);
      const expected = { ...sent, pay_to: PAY_TO_CHECKSUMMED };
      assert.deepEqual(res.json.pricing, expected);
      assert.deepEqual((await read(res.json.id)).pricing, expected);
    }
  });

  it('checks a PATCH on the agent it leaves: pricing is replaced whole, the per-call prices bound min_deposit', async () => {
    const agent = (await create({ pricing: channel({ meter: TOKENS, min_deposit: '50000' }) })).json;
    const patch = (json: unknown) => call('PATCH', `/v1/agents/${agent.id}`, { token, json });
    const stored = {
      ...channel({ meter: TOKENS, min_deposit: '50000' }),
      pay_to: PAY_TO_CHECKSUMMED,
      withdraw_delay: DEFAULT_DELAY,
    };

    // The stored tokens meter does not go with the protocol the PATCH sets.
    assertError(await patch({ ...MCP }), 400, /^pricing\.meter kind tokens requires protocol http$/);
    // A pricing object sent alone is the whole pricing: channel terms without batch-settlement are refused.
    assertError(
      await patch({ pricing: { ...pricing, min_deposit: '50000' } }),
      400,
      /^pricing\.min_deposit requires scheme batch-settlement$/,
    );
    assertError(
      await patch({ pricing: { ...pricing, scheme: 'upto', meter: HEADER, withdraw_delay: DEFAULT_DELAY } }),
      400,
      /^pricing\.withdraw_delay requires scheme batch-settlement$/,
    );
    // An MCP agent whose tool costs more than the minimum deposit.
    assertError(
      await patch({ ...MCP, pricing: channel({ tools: { t: '60000' }, min_deposit: '50000' }) }),
      400,
      /^pricing\.min_deposit must be at least every price in pricing\.tools$/,
    );
    assertError(await patch({ pricing: channel({ amount: '50001', min_deposit: '50000' }) }), 400, /pricing\.amount/);
    // Nothing of the refused patches stuck.
    const unchanged = await read(agent.id);
    assert.equal(unchanged.protocol, 'http');
    assert.deepEqual(unchanged.pricing, stored);

    // A PATCH of another field leaves the pricing, its stored delay included.
    const described = await patch({ description: 'channel' });
    assert.equal(described.status, 200, described.text);
    assert.deepEqual(described.json.pricing, stored);

    // The protocol and a consistent pricing together: accepted; a new pricing without a delay gets the default.
    const mcp = await patch({ ...MCP, pricing: channel({ tools: { t: '60000' }, min_deposit: '60000' }) });
    assert.equal(mcp.status, 200, mcp.text);
    assert.deepEqual(mcp.json.pricing, {
      ...channel({ tools: { t: '60000' }, min_deposit: '60000' }),
      pay_to: PAY_TO_CHECKSUMMED,
      withdraw_delay: DEFAULT_DELAY,
    });

    // To exact: the channel terms go with the pricing they were part of.
    const exact = await patch({ pricing });
    assert.equal(exact.status, 200, exact.text);
    assert.deepEqual(exact.json.pricing, { ...pricing, pay_to: PAY_TO_CHECKSUMMED });
    assert.deepEqual((await read(agent.id)).pricing, { ...pricing, pay_to: PAY_TO_CHECKSUMMED });

    // And back to batch-settlement with a delay of its own.
    const back = await patch({ pricing: channel({ withdraw_delay: 7200 }) });
    assert.equal(back.status, 200, back.text);
    assert.deepEqual(back.json.pricing, { ...channel({ withdraw_delay: 7200 }), pay_to: PAY_TO_CHECKSUMMED });
  });

  it('never lets an unpaid or wrongly paid call through to the upstream', async () => {
    const agent = (await create({ upstream_url: upstream.url, pricing: channel({ min_deposit: '50000' }) })).json;
    const reached = upstream.received.length;
    const offers: Record<string, string>[] = [
      {},
      { 'x-payment': 'bm90IGEgcGF5bWVudA==' },
      { 'payment-signature': 'e30=' },
    ];
    for (const headers of offers) {
      const res = await call('POST', `/v1/proxy/${agent.id}`, { token, headers, json: { q: 1 } });
      // 402 once the scheme's challenge can be offered; 503 (fail closed) while it cannot.
      assert.ok([402, 503].includes(res.status), `${JSON.stringify(headers)}: ${res.status} ${res.text}`);
    }
    assert.equal(upstream.received.length, reached, 'no call reached the upstream');
  });
});
