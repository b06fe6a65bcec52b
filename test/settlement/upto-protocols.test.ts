// `upto` beyond the plain token endpoint: a public agent (no token) paid by the unmodified
// @x402/fetch + @x402/evm upto client, and an MCP agent priced upto per tool whose payment rides
// in the tool call's `_meta["x402/payment"]` (the x402 MCP transport). Each is charged, after
// its answer, exactly what the upstream's header meter states, settled on chain once; a tool
// that fails is charged nothing, and no other request of its caller's can pass for it.
import assert from 'node:assert/strict';
import { type JsonRpcProvider } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import type { ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
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

  /** An MCP agent priced upto per tool (`tools`), and a tools/call of it on /v1 with id 7, `_meta` as given. */
  async function uptoMcpAgent(upstreamUrl: string, tools: Record<string, string>, captureBody = false) {
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('upto-mcp'),
        upstream_url: upstreamUrl,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        pricing: {
          scheme: 'upto',
          amount: MAX,
          asset: 'USDC',
          network: 'base',
          pay_to: newPayTo(),
          meter: METER,
          tools,
        },
        ...(captureBody ? { capture_body: true } : {}),
      },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.json.id as string;
    const toolCall = (
      name: string,
      args: Record<string, unknown>,
      meta?: Record<string, unknown>,
      endpoint = '/stream',
    ) =>
      callAt(stack().apiUrl, 'POST', `/v1/proxy/${agentId}${endpoint}`, {
        token,
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 7,
          method: 'tools/call',
          params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
        }),
      });
    return { agentId, toolCall };
  }

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
      const { toolCall: tool, agentId } = await uptoMcpAgent(upstream.url, { echo: '9000' });
      const toolCall = (meta?: Record<string, unknown>, text = 'hi') => tool('echo', { text }, meta);
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

  it("an MCP tool priced upto goes up under the gateway's own id: another request with its id cannot take its answer or zero its charge; an encoded answer comes down decoded; an id named twice is a 400", async () => {
    // An upstream that routes answers by JSON-RPC id, as the MCP SDK's server does within a
    // session: two requests in flight under one id get each other's answers. The caller sends
    // the paid call and, with the same id, a free tool that fails.
    const seen: Array<{ id: unknown; method: string; params?: { name?: string } }> = [];
    const pending = new Map<string, { res: ServerResponse; answer: (res: ServerResponse) => void }>();
    const upstream = await rawUpstream((req, res) => {
      void readAll(req).then((body) => {
        const rpc = JSON.parse(body.toString()) as (typeof seen)[number];
        seen.push(rpc);
        if (rpc.params?.name === 'zipped') {
          // Encoded although asked not to be.
          res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'x-usage-cost': '5' });
          res.end(
            gzipSync(
              JSON.stringify({
                jsonrpc: '2.0',
                id: rpc.id,
                result: { content: [{ type: 'text', text: `zipped ${String(rpc.id)}` }] },
              }),
            ),
          );
          return;
        }
        const answer =
          rpc.params?.name === 'echo'
            ? (to: ServerResponse) => {
                // An event stream: a progress note naming the request, then its result.
                to.writeHead(200, { 'content-type': 'text/event-stream', 'x-usage-cost': '321' });
                const note = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: rpc.id } };
                const result = { jsonrpc: '2.0', id: rpc.id, result: { content: [{ type: 'text', text: 'done' }] } };
                to.end(
                  `event: message\ndata: ${JSON.stringify(note)}\n\nevent: message\ndata: ${JSON.stringify(result)}\n\n`,
                );
              }
            : (to: ServerResponse) => {
                to.writeHead(200, { 'content-type': 'application/json' });
                to.end(JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result: { isError: true, content: [] } }));
              };
        const key = JSON.stringify(rpc.id);
        const other = pending.get(key);
        if (other) {
          pending.delete(key);
          answer(other.res);
          other.answer(res);
          return;
        }
        pending.set(key, { res, answer });
        // Alone under its id for 1.5 s: answered as asked.
        setTimeout(() => {
          if (pending.get(key)?.res !== res) return;
          pending.delete(key);
          answer(res);
        }, 1_500);
      });
    });
    try {
      const { toolCall: tool, agentId } = await uptoMcpAgent(
        upstream.url,
        { echo: '9000', free: '0', zipped: '9000' },
        true,
      );
      const toolCall = (name: string, meta?: Record<string, unknown>, endpoint?: string) =>
        tool(name, {}, meta, endpoint);
      const unpaid = await toolCall('echo');
      assert.equal(unpaid.status, 402, unpaid.text);
      const required = JSON.parse(Buffer.from(String(unpaid.headers['payment-required']), 'base64').toString('utf8'));
      const payer = await uptoPayer(provider, 1_000_000n);
      const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
      const paidCall = toolCall('echo', { 'x402/payment': wire });
      // The free call is sent once the paid one is in flight at the upstream.
      const deadline = Date.now() + 10_000;
      while (!seen.some((rpc) => rpc.params?.name === 'echo') && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      const [paid, free] = await Promise.all([paidCall, toolCall('free')]);

      // Each got its own answer, under the id it was sent with.
      assert.equal(paid.status, 200, paid.text);
      const events = paid.text
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => JSON.parse(line.slice(6)));
      assert.deepEqual(
        events[0].params,
        { requestId: 7 },
        "the upstream's mention of the request names the caller's id",
      );
      assert.equal(events[1].id, 7);
      assert.deepEqual(events[1].result.content, [{ type: 'text', text: 'done' }]);
      assert.equal(free.status, 200, free.text);
      assert.equal(free.json.id, 7);
      assert.equal(free.json.result.isError, true);
      // The upstream saw the paid call under an id of the gateway's, never shown to the caller.
      const paidSeen = seen.filter((rpc) => rpc.params?.name === 'echo');
      assert.equal(paidSeen.length, 1);
      assert.match(String(paidSeen[0].id), /^x402gw[0-9a-f]{32}$/);
      assert.ok(!paid.text.includes(String(paidSeen[0].id)));
      // Charged what its meter read, not zeroed by the other request's failure.
      const done = await settledInvocation(token, agentId, String(paid.headers['x-gateway-invocation-id']));
      assert.equal(done.payment_settlement, 'settled');
      assert.equal(done.payment_charge, '321');
      assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 321n);

      // An answer the upstream encoded anyway comes down decoded, under the caller's id, even
      // where the upstream wrote its id into the text.
      const zippedUnpaid = await toolCall('zipped');
      const zippedRequired = JSON.parse(
        Buffer.from(String(zippedUnpaid.headers['payment-required']), 'base64').toString('utf8'),
      );
      const zippedPayment = await payUptoChallenge(
        payer.privateKey,
        zippedRequired,
        rpcReader(stack().infra.chainRpcUrl),
      );
      const zipped = await toolCall('zipped', { 'x402/payment': zippedPayment.wire });
      assert.equal(zipped.status, 200, zipped.text);
      assert.equal(zipped.headers['content-encoding'], undefined);
      assert.equal(zipped.json.id, 7);
      assert.deepEqual(zipped.json.result.content, [{ type: 'text', text: 'zipped 7' }]);
      // So is it kept, on the transactional endpoint.
      const zippedAgain = await payUptoChallenge(
        payer.privateKey,
        zippedRequired,
        rpcReader(stack().infra.chainRpcUrl),
      );
      const accepted = await toolCall('zipped', { 'x402/payment': zippedAgain.wire }, '');
      assert.equal(accepted.status, 202, accepted.text);
      const kept = await waitForInvocation(token, agentId, accepted.json.invocation_id);
      assert.equal(kept.status, 'succeeded', JSON.stringify(kept));
      const keptAnswer = JSON.parse(Buffer.from(String(kept.response_body_b64), 'base64').toString('utf8'));
      assert.equal(keptAnswer.id, 7);
      assert.deepEqual(keptAnswer.result.content, [{ type: 'text', text: 'zipped 7' }]);

      // A request naming its id twice is refused before anything is asked of the payment or the upstream.
      const before = seen.length;
      const twice = await callAt(stack().apiUrl, 'POST', `/v1/proxy/${agentId}/stream`, {
        token,
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}},"id":8}',
      });
      assert.equal(twice.status, 400, twice.text);
      assert.match(twice.json.error, /id twice/);
      assert.equal(seen.length, before);
    } finally {
      await upstream.close();
    }
  });
});
