// A member's priced tool paid through a virtual MCP server of three MCP agents (one free, one
// slow to list, one priced per tool) with the x402 MCP transport, through the unmodified MCP SDK
// client. The slow member is left out of the list without holding it (its tool still callable).
// The priced member is priced from the start (a flat price and a tool's own), yet its session and
// lists are the server's own requests and cost nothing; an unpaid call of its priced tool is the
// payment-required tool result, a paid one (the payment in `_meta["x402/payment"]`) comes back
// with its receipt in `_meta["x402/payment-response"]`, the payer's balance moved on chain, and
// the member's invocation records the payment and the server.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { getAddress } from 'ethers';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { call } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { waitFor } from '../support/wait.ts';
import { balanceOf, newPayTo, newPayer, transfersTo, v2PayerClient } from '../support/x402.ts';

const PRICE = 9_000n;
const FUNDS = 1_000_000n;

type ToolResult = {
  content: unknown;
  isError?: boolean;
  structuredContent?: unknown;
  _meta?: Record<string, unknown>;
};

describe('MCP: a priced member tool paid through a virtual MCP server', function () {
  this.timeout(120_000);
  let paying: PayingTenant;
  withPayingTenant('mcps-x402', (p) => (paying = p));

  for (const answer of ['sse', 'json'] as const) {
    it(`pays with _meta["x402/payment"] and gets the receipt in _meta["x402/payment-response"] (member answering in ${answer})`, async () => {
      const { token, provider } = paying;
      const free = await startMcpServer();
      const slow = await startMcpServer({ listDelayMs: 10_000 });
      const priced = await startMcpServer({ json: answer === 'json' });
      try {
        const payTo = newPayTo();
        const freeId = await createAgent(token, {
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          name: `free-${randomUUID()}`,
          upstream_url: free.url,
        });
        const slowId = await createAgent(token, {
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          name: `slow-${randomUUID()}`,
          upstream_url: slow.url,
        });
        const pricedId = await createAgent(token, {
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          name: `priced-${randomUUID()}`,
          upstream_url: priced.url,
          pricing: { amount: '1', asset: 'USDC', network: 'base', pay_to: payTo, tools: { echo: String(PRICE) } },
        });
        const created = await call('POST', '/v1/mcp-servers', {
          token,
          json: {
            name: `paid-${randomUUID()}`,
            members: [
              { agent_id: freeId, prefix: 'free' },
              { agent_id: slowId, prefix: 'slow' },
              { agent_id: pricedId, prefix: 'paid' },
            ],
          },
        });
        assert.equal(created.status, 201, created.text);

        const client = new Client({ name: 'federation-x402-test', version: '1.0.0' });
        const transport = new StreamableHTTPClientTransport(new URL(created.json.mcp_url as string), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        });
        await client.connect(transport);
        try {
          // The priced member's session and list are the server's own: listed without any payment;
          // the slow member is left out once its time is up, its tool still callable.
          const tools = await client.listTools();
          assert.deepEqual(tools.tools.map((t) => t.name).sort(), [
            'free_count',
            'free_echo',
            'paid_count',
            'paid_echo',
          ]);

          // Unpaid: the x402 MCP transport's payment-required tool result, nothing reaching the member.
          const unpaid = (await client.callTool({ name: 'paid_echo', arguments: { text: 'unpaid' } })) as ToolResult;
          assert.equal(unpaid.isError, true, JSON.stringify(unpaid));
          const required = PaymentRequiredV2Schema.parse(unpaid.structuredContent);
          assert.equal(required.accepts[0].amount, String(PRICE));
          assert.equal(getAddress(required.accepts[0].payTo), getAddress(payTo));
          assert.ok(!JSON.stringify(priced.bodies).includes('unpaid'), 'an unpaid call never reached the member');

          const wallet = await newPayer(FUNDS);
          const payer = v2PayerClient(wallet);
          const payment = await payer.createPaymentPayload(
            required as Parameters<typeof payer.createPaymentPayload>[0],
          );
          const marker = `paid through the server ${randomUUID()}`;
          const result = (await client.callTool({
            name: 'paid_echo',
            arguments: { text: marker },
            _meta: { 'x402/payment': payment, 'other/key': 'kept' },
          })) as ToolResult;
          assert.deepEqual(result.content, [{ type: 'text', text: `echo: ${marker}` }]);
          assert.notEqual(result.isError, true);
          const receipt = result._meta?.['x402/payment-response'] as
            { success: boolean; transaction: string; payer: string } | undefined;
          assert.ok(receipt, `the result carries _meta["x402/payment-response"]: ${JSON.stringify(result)}`);
          assert.equal(receipt.success, true);
          assert.equal(getAddress(receipt.payer), wallet.address);
          assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: PRICE }]);
          assert.equal(await balanceOf(provider, wallet.address), FUNDS - PRICE);

          // The member got the call under its own name, without the payment, the rest of _meta kept.
          const reached = priced.bodies.filter((b) => JSON.stringify(b).includes(marker)) as Array<{
            params: { name: string; _meta?: Record<string, unknown> };
          }>;
          assert.equal(reached.length, 1);
          assert.equal(reached[0].params.name, 'echo');
          assert.deepEqual(reached[0].params._meta, { 'other/key': 'kept' });
          assert.ok(!JSON.stringify(priced.bodies).includes('x402/payment'), 'no payment reached the member');

          // The other members' tools next to it cost nothing.
          const freeCall = (await client.callTool({ name: 'free_echo', arguments: { text: 'free' } })) as ToolResult;
          assert.deepEqual(freeCall.content, [{ type: 'text', text: 'echo: free' }]);
          const slowCall = (await client.callTool({ name: 'slow_echo', arguments: { text: 'slow' } })) as ToolResult;
          assert.deepEqual(slowCall.content, [{ type: 'text', text: 'echo: slow' }]);

          // The paid call is the priced member's invocation, through the server, with its payment.
          const row = await waitFor(
            async () => {
              const listed = await call('GET', `/v1/invocations?agent_id=${pricedId}&limit=100`, { token });
              return (listed.json.data as Array<Record<string, unknown>>).find(
                (r) => r.mcp_method === 'tools/call' && r.payment_transaction === receipt.transaction,
              );
            },
            { everyMs: 50, what: 'the paid call recorded' },
          );
          assert.equal(row.mcp_tool, 'echo');
          assert.equal(row.mcp_server_id, created.json.id);
          assert.equal(row.payment_amount, String(PRICE));
        } finally {
          await transport.terminateSession();
          await client.close();
        }
      } finally {
        await Promise.all([free.close(), slow.close(), priced.close()]);
      }
    });
  }
});
