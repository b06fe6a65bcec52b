// The x402 MCP transport through the gateway's /v1 streaming endpoint: the MCP SDK's Client calls
// a priced tool of a real McpServer with the payment in `params._meta["x402/payment"]`, and reads
// the settlement in the result's `_meta["x402/payment-response"]`, for an upstream answering over
// SSE and one answering in plain JSON. There is no published x402 MCP client package, so the
// test builds the PaymentPayload the way one would: @x402/core's x402Client with @x402/evm's
// ExactEvmScheme, from the PaymentRequired of the gateway's 402. The upstream never sees the
// payment, and an unpaid priced tools/call on /v1 is still the spec's HTTP 402.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { getAddress } from 'ethers';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { appendPaymentIdentifierToExtensions, generatePaymentId } from '@x402/extensions/payment-identifier';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { invocationRow } from '../support/proxy-helpers.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import {
  balanceOf,
  chainProvider,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  transfersTo,
  v2PayerClient,
  type TestAccount,
} from '../support/x402.ts';

const NETWORK = 'eip155:8453';
const PRICE = 9_000n;

type ToolResult = { content: unknown; isError?: boolean; _meta?: Record<string, unknown> };

describe('x402 MCP transport: a tool paid in _meta through /v1', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let facilitatorAccount: TestAccount;
  let token: string;

  before(async () => {
    provider = chainProvider();
    facilitatorAccount = await newAccount(`gateway-mcp-x402-${randomUUID()}`);
    token = await settlingTenant(`tenant-mcp-x402-${randomUUID()}`, facilitatorAccount);
  });
  after(async () => {
    await facilitatorAccount.client.close();
    provider.destroy();
  });

  for (const answer of ['sse', 'json'] as const) {
    it(`pays a priced tool with _meta["x402/payment"] and reads _meta["x402/payment-response"] (upstream answering in ${answer})`, async () => {
      const mcp = await startMcpServer({ json: answer === 'json' });
      try {
        const payTo = newPayTo();
        const created = await call('POST', '/v1/agents', {
          token,
          json: {
            name: uniqueName('mcp-x402'),
            upstream_url: mcp.url,
            protocol: 'mcp',
            mcp_transport: 'streamable_http',
            mcp_protocol_version: '2025-06-18',
          },
        });
        assert.equal(created.status, 201, created.text);
        const agentId = created.json.id as string;
        const endpoint = `${stack().apiUrl}/v1/proxy/${agentId}/stream`;

        // SPEC: every non-tool MCP method of a priced agent pays the flat price, so the session
        // is opened while the agent is free, then the agent is priced (echo at its own price).
        const client = new Client({ name: 'x402-mcp-test', version: '1.0.0' });
        const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        });
        await client.connect(transport);
        try {
          const priced = await call('PATCH', `/v1/agents/${agentId}`, {
            token,
            json: {
              pricing: { amount: '1', asset: 'USDC', network: 'base', pay_to: payTo, tools: { echo: String(PRICE) } },
            },
          });
          assert.equal(priced.status, 200, priced.text);

          // Unpaid on /v1: the spec's HTTP 402, whose PAYMENT-REQUIRED declares the payment-identifier extension.
          const unpaid = await call('POST', `/v1/proxy/${agentId}/stream`, {
            token,
            headers: { 'content-type': 'application/json', 'mcp-session-id': transport.sessionId! },
            body: JSON.stringify({
              jsonrpc: '2.0',
              id: 1,
              method: 'tools/call',
              params: { name: 'echo', arguments: { text: 'unpaid' } },
            }),
          });
          assert.equal(unpaid.status, 402, unpaid.text);
          const required = decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string);
          PaymentRequiredV2Schema.parse(required);
          assert.equal(required.accepts[0].amount, String(PRICE));
          assert.deepEqual((required.extensions?.['payment-identifier'] as { info: unknown }).info, {
            required: false,
          });
          await assert.rejects(
            client.callTool({ name: 'echo', arguments: { text: 'unpaid' } }),
            (err: { code?: number }) => err.code === 402,
            'the SDK client sees the 402 of an unpaid call',
          );

          const payer = await newPayer(1_000_000n);
          const payment = await v2PayerClient(payer).createPaymentPayload(required);

          const marker = `paid in meta ${randomUUID()}`;
          const result = (await client.callTool({
            name: 'echo',
            arguments: { text: marker },
            _meta: { 'x402/payment': payment, 'other/key': 'kept' },
          })) as ToolResult;
          assert.deepEqual(result.content, [{ type: 'text', text: `echo: ${marker}` }]);
          assert.notEqual(result.isError, true);
          const receipt = result._meta?.['x402/payment-response'] as {
            success: boolean;
            transaction: string;
            network: string;
            payer: string;
          };
          assert.ok(receipt, `the result carries _meta["x402/payment-response"]: ${JSON.stringify(result)}`);
          assert.equal(receipt.success, true);
          assert.equal(receipt.network, NETWORK);
          assert.equal(getAddress(receipt.payer), payer.address);
          assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: PRICE }]);
          assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE);

          // The upstream got the call without the payment, the rest of _meta unchanged.
          const reached = mcp.bodies.filter((b) => JSON.stringify(b).includes(marker)) as Array<{
            params: { _meta?: Record<string, unknown> };
          }>;
          assert.equal(reached.length, 1);
          assert.deepEqual(reached[0].params._meta, { 'other/key': 'kept' });
          assert.ok(!JSON.stringify(mcp.bodies).includes('x402/payment'), 'no payment ever reached the upstream');
        } finally {
          await client.close();
        }
      } finally {
        await mcp.close();
      }
    });
  }
  it('accepts a _meta payment on the transactional endpoint too: 202 with PAYMENT-RESPONSE, the body forwarded and stored without it, a resend under its identifier answered with the same call', async () => {
    const mcp = await startMcpServer({ json: true });
    try {
      const payTo = newPayTo();
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('mcp-x402-tx'),
          upstream_url: mcp.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          capture_body: true,
          pricing: { amount: '1', asset: 'USDC', network: 'base', pay_to: payTo, tools: { echo: String(PRICE) } },
        },
      });
      assert.equal(created.status, 201, created.text);
      const agentId = created.json.id as string;
      const marker = `transactional meta ${randomUUID()}`;
      const request = (meta?: Record<string, unknown>) =>
        call('POST', `/v1/proxy/${agentId}`, {
          token,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 'tx-1',
            method: 'tools/call',
            params: { name: 'echo', arguments: { text: marker }, ...(meta ? { _meta: meta } : {}) },
          }),
        });
      const unpaid = await request();
      assert.equal(unpaid.status, 402, unpaid.text);
      const payer = await newPayer(1_000_000n);
      const payment = await v2PayerClient(payer).createPaymentPayload(
        decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string),
      );
      // With a payment identifier: the resend below gets the same call back.
      payment.extensions = appendPaymentIdentifierToExtensions(payment.extensions ?? {}, generatePaymentId());
      const paid = await request({ 'x402/payment': payment });
      assert.equal(paid.status, 202, paid.text);
      const receipt = decodePaymentResponseHeader(paid.headers['payment-response'] as string);
      assert.equal(receipt.success, true);
      const done = await waitForInvocation(token, agentId, paid.json.invocation_id);
      assert.equal(done.payment_transaction, receipt.transaction);
      const resent = await request({ 'x402/payment': payment });
      assert.equal(resent.status, 202, resent.text);
      assert.deepEqual(resent.json, { invocation_id: paid.json.invocation_id });
      assert.equal(
        decodePaymentResponseHeader(resent.headers['payment-response'] as string).transaction,
        receipt.transaction,
      );
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: receipt.transaction, value: PRICE }]);
      const reached = mcp.bodies.filter((b) => JSON.stringify(b).includes(marker)) as Array<{
        params: { _meta?: Record<string, unknown> };
      }>;
      assert.equal(reached.length, 1);
      assert.deepEqual(reached[0].params._meta, {});
      const row = await invocationRow(paid.json.invocation_id);
      assert.equal(
        row?.requestBytes,
        Buffer.byteLength(JSON.stringify(reached[0])),
        'the stored body is the one forwarded',
      );
    } finally {
      await mcp.close();
    }
  });

  it('refuses, on both endpoints and before any upstream call, a large body with a _meta payment and a payment key the parsed request does not show', async () => {
    const mcp = await startMcpServer({ json: true });
    try {
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('mcp-x402-big'),
          upstream_url: mcp.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
        },
      });
      assert.equal(created.status, 201, created.text);
      const agentId = created.json.id as string;
      const numbers = Array.from({ length: 4 * 1024 * 1024 }, (_, i) => i % 10).join(',');
      const large = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":[${numbers}]},"_meta":{"x402/payment":0}}}`;
      assert.ok(large.length >= 8 * 1024 * 1024);
      const hidden =
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"x402/payment":0},"_meta":{}}}';
      for (const path of [`/v1/proxy/${agentId}`, `/v1/proxy/${agentId}/stream`]) {
        const big = await call('POST', path, { token, headers: { 'content-type': 'application/json' }, body: large });
        assert.equal(big.status, 400, big.text);
        assert.match(big.json.error as string, /x402\/payment.*at most 64 KiB/);
        const duplicate = await call('POST', path, {
          token,
          headers: { 'content-type': 'application/json' },
          body: hidden,
        });
        assert.equal(duplicate.status, 400, duplicate.text);
        assert.match(duplicate.json.error as string, /duplicate or hidden x402\/payment/);
      }
      assert.equal(mcp.bodies.length, 0, 'nothing reached the upstream');
    } finally {
      await mcp.close();
    }
  });
});
