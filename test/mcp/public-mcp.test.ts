// A public MCP agent paid the way the x402 MCP transport says (docs/API.md "Selling an agent to
// any x402 client", "MCP agents"), on the real stack: found in the catalog with @x402/extensions'
// Bazaar client, called with the MCP SDK's unmodified Client and no token. An unpaid priced
// tools/call is answered as a JSON-RPC tool result (`isError: true`, the PaymentRequired in
// `structuredContent` and as JSON in `content[0].text`, declaring the bazaar extension); the
// tool is paid in `params._meta["x402/payment"]`, which never reaches the agent, and its result
// carries `_meta["x402/payment-response"]`.
// There is no published x402 MCP client package, so the test builds the PaymentPayload as one
// would: @x402/core's x402Client with @x402/evm's ExactEvmScheme (test/support/x402.ts
// v2PayerClient), from the PaymentRequired of the tool result. The session's other methods
// (initialize, the initialized notification) pay the agent's flat price over HTTP 402, so the
// SDK's transport is given @x402/fetch's paying fetch, unmodified too.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { getAddress } from 'ethers';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { HTTPFacilitatorClient } from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { withBazaar } from '@x402/extensions/bazaar';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { startMcpServer } from '../support/mcp-server.ts';
import { payingFetch } from '../support/paying-client.ts';
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

const FLAT = 1n;
const TOOL_PRICE = 9_000n;

type ToolResult = {
  content: Array<{ type: string; text: string }>;
  structuredContent?: unknown;
  isError?: boolean;
  _meta?: Record<string, unknown>;
};

describe('public MCP agents: the x402 MCP transport with no token', function () {
  this.timeout(180_000);
  let provider: ReturnType<typeof chainProvider>;
  let account: TestAccount;
  let token: string;

  before(async () => {
    provider = chainProvider();
    account = await newAccount(`public-mcp-${randomUUID()}`);
    token = await settlingTenant(`tenant-public-mcp-${randomUUID()}`, account);
  });
  after(async () => {
    await account.client.close();
    provider.destroy();
  });

  it('an MCP SDK client finds the tool in the catalog, is told to pay in a tool result, pays in _meta and reads the receipt', async () => {
    const mcp = await startMcpServer();
    try {
      const payTo = newPayTo();
      const echoSchema = { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] };
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName('public-mcp'),
          upstream_url: mcp.url,
          protocol: 'mcp',
          mcp_transport: 'streamable_http',
          mcp_protocol_version: '2025-06-18',
          pricing: {
            amount: String(FLAT),
            asset: 'USDC',
            network: 'base',
            pay_to: payTo,
            tools: { echo: String(TOOL_PRICE) },
          },
          public: true,
          public_description: 'Echoes text',
          public_interface: { tools: { echo: { input_schema: echoSchema, example: { text: 'hi' } } } },
        },
      });
      assert.equal(created.status, 201, created.text);

      // The catalog lists the priced tools at the agent's streaming URL: echo at its own price,
      // and count, which the upstream's tools/list names, at the flat price.
      const bazaar = withBazaar(new HTTPFacilitatorClient({ url: stack().apiUrl })).extensions.bazaar;
      const listed = await bazaar.listResources({ payTo, type: 'mcp' });
      const toolOf = (item: (typeof listed.items)[number]) =>
        (item.extensions?.bazaar as { info: { input: { toolName: string } } }).info.input.toolName;
      assert.deepEqual(listed.items.map(toolOf), ['count', 'echo']);
      assert.equal(listed.items[0].accepts[0].amount, String(FLAT));
      const items = listed.items.filter((item) => toolOf(item) === 'echo');
      assert.equal(items[0].resource, created.json.public_stream_url);
      assert.equal(items[0].accepts[0].amount, String(TOOL_PRICE));

      const payer = await newPayer(1_000_000n);
      const buyer = v2PayerClient(payer);
      const client = new Client({ name: 'x402-public-mcp-test', version: '1.0.0' });
      const transport = new StreamableHTTPClientTransport(new URL(items[0].resource), {
        fetch: payingFetch('v2-only', payer).pay,
      });
      await client.connect(transport);
      try {
        // Unpaid: a tool result, not an HTTP 402.
        const unpaid = (await client.callTool({ name: 'echo', arguments: { text: 'unpaid' } })) as ToolResult;
        assert.equal(unpaid.isError, true);
        const required = PaymentRequiredV2Schema.parse(unpaid.structuredContent);
        assert.equal(unpaid.content[0].type, 'text');
        assert.deepEqual(JSON.parse(unpaid.content[0].text), unpaid.structuredContent);
        assert.equal(required.accepts[0].amount, String(TOOL_PRICE));
        assert.equal(required.resource?.url, items[0].resource);
        assert.deepEqual(required.extensions?.bazaar, items[0].extensions?.bazaar);
        assert.ok(!JSON.stringify(unpaid).includes(mcp.url), 'the upstream URL is not shown');

        const payment = await buyer.createPaymentPayload(required as Parameters<typeof buyer.createPaymentPayload>[0]);
        const marker = `public paid in meta ${randomUUID()}`;
        const result = (await client.callTool({
          name: 'echo',
          arguments: { text: marker },
          _meta: { 'x402/payment': payment },
        })) as ToolResult;
        assert.deepEqual(result.content, [{ type: 'text', text: `echo: ${marker}` }]);
        assert.notEqual(result.isError, true);
        const receipt = result._meta?.['x402/payment-response'] as {
          success: boolean;
          transaction: string;
          payer: string;
        };
        assert.ok(receipt, JSON.stringify(result));
        assert.equal(receipt.success, true);
        assert.equal(getAddress(receipt.payer), payer.address);
        const transfers = await transfersTo(provider, payTo);
        assert.deepEqual(
          transfers.filter((t) => t.hash === receipt.transaction),
          [{ hash: receipt.transaction, value: TOOL_PRICE }],
        );
        // The session's own methods paid the flat price each; the tool its own.
        const spent = transfers.reduce((sum, t) => sum + t.value, 0n);
        assert.equal(await balanceOf(provider, payer.address), 1_000_000n - spent);

        // The agent got the call without the payment.
        const reached = JSON.stringify(mcp.bodies);
        assert.ok(reached.includes(marker));
        assert.ok(!reached.includes('x402/payment'), 'no payment ever reached the upstream');
        assert.ok(!reached.includes('unpaid'), 'an unpaid call never reached the upstream');

        // Every call of the session is the payer's (no token).
        const listed = await call('GET', `/v1/invocations?agent_id=${created.json.id}&limit=100`, { token });
        assert.equal(listed.status, 200, listed.text);
        const calls = listed.json.data as Array<{ caller_kind: string; mcp_tool: string | null }>;
        assert.ok(calls.some((inv) => inv.mcp_tool === 'echo'));
        assert.ok(calls.every((inv) => inv.caller_kind === 'x402'));
      } finally {
        await client.close();
      }
    } finally {
      await mcp.close();
    }
  });
});
