// `upto` beyond the plain token endpoint: a public agent (no token) paid by the unmodified
// @x402/fetch + @x402/evm upto client, and an MCP agent priced upto per tool whose payment rides
// in the tool call's `_meta["x402/payment"]` (the x402 MCP transport). Each is charged, after
// its answer, exactly what the upstream's header meter states, settled on chain once; a tool
// that fails is charged nothing.
import assert from 'node:assert/strict';
import { type JsonRpcProvider } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { rawUpstream, readAll } from '../support/proxy-helpers.ts';
import { payUptoChallenge, rpcReader, settledInvocation, uptoPayer } from '../support/upto.ts';
import { withPayingTenant } from '../support/settling.ts';
import { balanceOf, CHAIN_ID, newPayTo, transfersTo } from '../support/x402.ts';

const MAX = '50000';
const METER = { kind: 'header', header: 'X-Usage-Cost' };

describe('upto on the public door and the x402 MCP transport', function () {
  this.timeout(120_000);
  let token: string;
  let provider: JsonRpcProvider;
  let gateway: ExtraGateway;
  withPayingTenant('upto-protocols', (paying) => {
    token = paying.token;
    provider = paying.provider;
  });

  before(async () => {
    // A replica whose public buckets do not run dry (the stack's are shared by every test).
    const roomy = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000 };
    gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...roomy } });
  });
  after(() => gateway?.close());

  it('a public agent priced upto is paid with no token by the unmodified client, charged what its meter read', async () => {
    const upstream = await rawUpstream((req, res) => {
      void readAll(req).then(() => {
        res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': '2345' });
        res.end('{"public":true}');
      });
    });
    try {
      const payTo = newPayTo();
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('upto-public'),
          upstream_url: upstream.url,
          public: true,
          pricing: { scheme: 'upto', amount: MAX, asset: 'USDC', network: 'base', pay_to: payTo, meter: METER },
        },
      });
      assert.equal(created.status, 201, created.text);
      const payer = await uptoPayer(provider, 1_000_000n);
      const signer = toClientEvmSigner(
        privateKeyToAccount(payer.privateKey as `0x${string}`),
        rpcReader(stack().infra.chainRpcUrl) as Parameters<typeof toClientEvmSigner>[1],
      );
      const client = new x402Client().register('eip155:*', new UptoEvmScheme(signer));
      client.setSpendControls({
        allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }],
      });
      const url = `${gateway.url}${new URL(created.json.public_stream_url).pathname}`;
      const res = await wrapFetchWithPayment(fetch, client)(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"q":1}',
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal(await res.text(), '{"public":true}');
      const id = res.headers.get('x-gateway-invocation-id');
      assert.ok(id);
      const done = await settledInvocation(token, created.json.id, id);
      assert.equal(done.payment_settlement, 'settled');
      assert.equal(done.payment_charge, '2345');
      assert.equal(done.caller_kind, 'x402');
      assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 2345n);
      assert.deepEqual(
        (await transfersTo(provider, payTo)).map((t) => t.value),
        [2345n],
      );
    } finally {
      await upstream.close();
    }
  });

  it('an MCP tool priced upto is paid in _meta["x402/payment"], charged after the answer what its meter read', async () => {
    const seen: unknown[] = [];
    // A minimal MCP upstream: a tools/call answered in JSON, its cost in the header meter's header.
    const upstream = await rawUpstream((req, res) => {
      void readAll(req).then((body) => {
        const rpc = JSON.parse(body.toString()) as { id: number; params?: unknown };
        seen.push(rpc);
        res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': '321' });
        // A tool asked to fail says so in its result (the meter's header still states a cost).
        const failed = (rpc.params as { arguments?: { text?: string } } | undefined)?.arguments?.text === 'fail';
        const result = {
          content: [{ type: 'text', text: failed ? 'it failed' : 'done' }],
          ...(failed ? { isError: true } : {}),
        };
        res.end(JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result }));
      });
    });
    try {
      const payTo = newPayTo();
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('upto-mcp'),
          upstream_url: upstream.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          pricing: {
            scheme: 'upto',
            amount: MAX,
            asset: 'USDC',
            network: 'base',
            pay_to: payTo,
            meter: METER,
            tools: { echo: '9000' },
          },
        },
      });
      assert.equal(created.status, 201, created.text);
      const agentId = created.json.id as string;
      const toolCall = (meta?: Record<string, unknown>, text = 'hi') =>
        callAt(stack().apiUrl, 'POST', `/v1/proxy/${agentId}/stream`, {
          token,
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 7,
            method: 'tools/call',
            params: { name: 'echo', arguments: { text }, ...(meta ? { _meta: meta } : {}) },
          }),
        });
      const unpaid = await toolCall();
      assert.equal(unpaid.status, 402, unpaid.text);
      const required = JSON.parse(Buffer.from(String(unpaid.headers['payment-required']), 'base64').toString('utf8'));
      assert.equal(required.accepts[0].scheme, 'upto');
      assert.equal(required.accepts[0].amount, '9000', "the tool's maximum");
      const payer = await uptoPayer(provider, 1_000_000n);
      const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
      const paid = await toolCall({ 'x402/payment': wire });
      assert.equal(paid.status, 200, paid.text);
      assert.deepEqual(paid.json.result.content, [{ type: 'text', text: 'done' }]);
      const id = String(paid.headers['x-gateway-invocation-id']);
      const done = await settledInvocation(token, agentId, id);
      assert.equal(done.payment_settlement, 'settled');
      assert.equal(done.payment_max_amount, '9000');
      assert.equal(done.payment_charge, '321');
      assert.equal(done.mcp_tool, 'echo');
      assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 321n);
      assert.ok(!JSON.stringify(seen).includes('x402/payment'), 'the payment never reached the upstream');
      // A replay of the same authorization buys nothing more.
      const replay = await toolCall({ 'x402/payment': wire });
      assert.notEqual(replay.status, 200);
      assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 321n);

      // A tool that fails (its result's isError) costs nothing, whatever its meter says, as the
      // x402 MCP reference server settles only a tool that did not fail.
      const again = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
      const failing = await toolCall({ 'x402/payment': again.wire }, 'fail');
      assert.equal(failing.status, 200, failing.text);
      assert.equal(failing.json.result.isError, true);
      const failed = await settledInvocation(token, agentId, String(failing.headers['x-gateway-invocation-id']));
      assert.equal(failed.payment_charge, '0');
      assert.equal(failed.payment_transaction ?? null, null, 'nothing settled');
      assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 321n);
    } finally {
      await upstream.close();
    }
  });
});
