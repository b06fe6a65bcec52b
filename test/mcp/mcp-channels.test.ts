// An MCP agent priced `batch-settlement` (payment channels) paid the way the x402 MCP transport
// says: the PaymentPayload in `params._meta["x402/payment"]`, the SettleResponse in the result's
// `_meta["x402/payment-response"]`. The payments are built by the unmodified reference client
// (@x402/core's x402Client with @x402/evm's BatchSettlementEvmScheme, reading the stack's chain),
// and the answers are handed back to it as the x402 reference MCP client does (x402MCPClient:
// the SettleResponse of `_meta`, or the PaymentRequired of a payment-required tool result, to
// `handlePaymentResponse`, which runs the scheme's hooks; one retry when they recover). No x402
// MCP client package is published, so that glue is written here; on /v1, whose refusals are HTTP
// 402s, the 402's PAYMENT-REQUIRED is handed over as @x402/fetch does. One deposit, then vouchers
// on one channel: on /v1's streaming endpoint (the MCP SDK's Client), its transactional one (the
// receipt in the 202's PAYMENT-RESPONSE), and a public agent's URL, where an unpaid or refused
// call is the transport's payment-required tool result. A forged voucher is refused with nothing
// forwarded; a client that forgot its channel recovers through the corrective answer.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { GetPromptResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { x402HTTPClient, type x402Client } from '@x402/core/client';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequired, SettleResponse } from '@x402/core/types';
import { wrapFetchWithPayment } from '@x402/fetch';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { invocationRow } from '../support/proxy-helpers.ts';
import { InvocationSchema } from '../../gateway/db/entities.ts';
import { startMcpServer } from '../support/mcp-server.ts';

type TestMcpServer = Awaited<ReturnType<typeof startMcpServer>>;
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { channelBuyer, forgedVoucher, handBack } from '../support/batch-settlement.ts';
import { balanceOf, newPayTo, newPayer } from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';

/** The flat price (every MCP method but a priced tool), the echo tool's, and the least deposit. */
const FLAT = 1_000n;
const TOOL = 700n;
const DEPOSIT = 20_000n;

type Json = Record<string, any>;
type ToolResult = {
  content: Array<{ type: string; text: string }>;
  isError?: boolean;
  structuredContent?: Json;
  _meta?: Record<string, unknown>;
};
type Receipt = SettleResponse & { extra: { chargedAmount: string; channelState: Json } };

const channelPricing = (payTo: string) => ({
  scheme: 'batch-settlement',
  amount: String(FLAT),
  asset: 'USDC',
  network: 'base',
  pay_to: payTo,
  tools: { echo: String(TOOL) },
  min_deposit: String(DEPOSIT),
  withdraw_delay: 900,
});

/** The SettleResponse a tool result carries in `_meta`, as the reference MCP client reads it. */
const receiptOf = (result: ToolResult) => (result._meta?.['x402/payment-response'] as Receipt | undefined) ?? undefined;

/** The PaymentRequired of a payment-required tool result (`isError`, in `structuredContent`), as the reference client reads it. */
function paymentRequiredOf(result: ToolResult): PaymentRequired | undefined {
  if (!result.isError || !result.structuredContent) return undefined;
  const parsed = PaymentRequiredV2Schema.safeParse(result.structuredContent);
  return parsed.success ? (result.structuredContent as PaymentRequired) : undefined;
}

/**
 * A priced tool call paid in `_meta` the way the reference x402MCPClient's callTool does: the call
 * unpaid, its payment-required tool result paid, the answer handed back, and once more with a
 * fresh payment when the scheme recovered from a corrective payment-required result.
 */
async function callToolPaying(client: Client, buyer: x402Client, name: string, args: Json) {
  const unpaid = (await client.callTool({ name, arguments: args })) as ToolResult;
  const required = paymentRequiredOf(unpaid);
  assert.ok(required, `a payment-required tool result: ${JSON.stringify(unpaid)}`);
  const payloads: PaymentPayload[] = [];
  const pay = async (requirements: PaymentRequired) => {
    const payload = await buyer.createPaymentPayload(requirements);
    payloads.push(payload);
    const result = (await client.callTool({ name, arguments: args, _meta: { 'x402/payment': payload } })) as ToolResult;
    const paymentRequired = paymentRequiredOf(result);
    const recovered = await handBack(buyer, payload, { settleResponse: receiptOf(result), paymentRequired });
    return { result, paymentRequired, recovered };
  };
  const first = await pay(required);
  if (!(first.recovered && first.paymentRequired)) return { ...first, payloads, corrective: undefined };
  const retried = await pay(first.paymentRequired);
  return { ...retried, payloads, corrective: first.paymentRequired };
}

describe('batch-settlement channels over the x402 MCP transport', function () {
  this.timeout(240_000);
  let paying: PayingTenant;
  withPayingTenant('mcp-channels', (p) => (paying = p));

  /** An MCP agent of the paying tenant, free until `priced` (its pricing is set once a session is open). */
  async function mcpAgent(upstreamUrl: string, fields: Json = {}): Promise<string> {
    const created = await call('POST', '/v1/agents', {
      token: paying.token,
      json: {
        name: uniqueName('mcp-channel'),
        upstream_url: upstreamUrl,
        protocol: 'mcp',
        mcp_transport: 'streamable_http',
        mcp_protocol_version: '2025-06-18',
        ...fields,
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id as string;
  }

  async function priced(agentId: string, payTo: string): Promise<void> {
    const patched = await call('PATCH', `/v1/agents/${agentId}`, {
      token: paying.token,
      json: { pricing: channelPricing(payTo) },
    });
    assert.equal(patched.status, 200, patched.text);
  }

  /** A session opened with the token while the agent is free (every MCP method of a priced agent is paid). */
  async function tokenSession(agentId: string) {
    const client = new Client({ name: 'x402-mcp-channels', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${stack().apiUrl}/v1/proxy/${agentId}/stream`), {
      requestInit: { headers: { authorization: `Bearer ${paying.token}` } },
    });
    await client.connect(transport);
    return { client, sessionId: transport.sessionId! };
  }

  /**
   * An MCP upstream and an agent of it, a session opened with the token while the agent is free,
   * then the agent priced from payment channels; `run`, then the session and upstream closed.
   */
  async function onPricedSession(
    opts: { json: boolean; agent?: Json },
    run: (s: { mcp: TestMcpServer; agentId: string; client: Client; sessionId: string }) => Promise<void>,
  ): Promise<void> {
    const mcp = await startMcpServer({ json: opts.json });
    try {
      const agentId = await mcpAgent(mcp.url, opts.agent);
      const { client, sessionId } = await tokenSession(agentId);
      try {
        await priced(agentId, newPayTo());
        await run({ mcp, agentId, client, sessionId });
      } finally {
        await client.close();
      }
    } finally {
      await mcp.close();
    }
  }

  /** A tools/call of echo on /v1, written by hand (its 402s' headers are read), `_meta` as given. */
  function rawEcho(agentId: string, sessionId: string, text: string, meta?: Json, path = '/stream') {
    return rawRequest(
      agentId,
      sessionId,
      'tools/call',
      { name: 'echo', arguments: { text }, ...(meta ? { _meta: meta } : {}) },
      path,
    );
  }

  /** The echo tool's challenge (its unpaid call's 402) and a new payer's channel client. */
  async function echoBuyer(agentId: string, sessionId: string) {
    const unpaid = await rawEcho(agentId, sessionId, 'unpaid');
    assert.equal(unpaid.status, 402, unpaid.text);
    const required = decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string);
    const payer = await newPayer(1_000_000n);
    return { required, payer, buyer: channelBuyer(payer.privateKey) };
  }

  /** A JSON-RPC request on /v1, written by hand. */
  function rawRequest(agentId: string, sessionId: string, method: string, params: Json, path = '/stream') {
    return call('POST', `/v1/proxy/${agentId}${path}`, {
      token: paying.token,
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: randomUUID(), method, params }),
    });
  }

  /** The channel as GET /v1/channels/{id} shows it, once its charged total is `charged`. */
  const channelCharged = (channelId: string, charged: bigint, token = paying.token) =>
    waitFor(
      async () => {
        const res = await call('GET', `/v1/channels/${channelId}`, { token });
        return res.status === 200 && res.json.charged_cumulative === String(charged) && res.json;
      },
      { timeoutMs: 30_000, what: `channel ${channelId} charged ${charged}` },
    );

  for (const answer of ['sse', 'json'] as const) {
    it(`/v1 streaming (upstream answering in ${answer}): one deposit, then vouchers, each result carrying the channel's state in _meta`, async () => {
      await onPricedSession({ json: answer === 'json' }, async ({ mcp, agentId, client, sessionId }) => {
        const unpaid = await rawEcho(agentId, sessionId, 'unpaid');
        assert.equal(unpaid.status, 402, unpaid.text);
        const required = decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string);
        assert.equal(required.accepts[0].scheme, 'batch-settlement');
        assert.equal(required.accepts[0].amount, String(TOOL));
        assert.equal(required.accepts[0].extra.minDeposit, String(DEPOSIT));

        const payer = await newPayer(1_000_000n);
        const buyer = channelBuyer(payer.privateKey);
        let channelId = '';
        const markers: string[] = [];
        for (let i = 1; i <= 4; i++) {
          // The reference client's callToolWithPayment: the price is known, so the call is paid at once.
          const payload = await buyer.createPaymentPayload(required);
          const { type, voucher } = payload.payload as { type: string; voucher: { maxClaimableAmount: string } };
          assert.equal(type, i === 1 ? 'deposit' : 'voucher');
          assert.equal(voucher.maxClaimableAmount, String(BigInt(i) * TOOL), 'the client knows what it was charged');
          const marker = `channel call ${i} ${randomUUID()}`;
          markers.push(marker);
          const result = (await client.callTool({
            name: 'echo',
            arguments: { text: marker },
            _meta: { 'x402/payment': payload, 'other/key': 'kept' },
          })) as ToolResult;
          assert.deepEqual(result.content, [{ type: 'text', text: `echo: ${marker}` }]);
          const receipt = receiptOf(result);
          assert.ok(receipt, `the result carries _meta["x402/payment-response"]: ${JSON.stringify(result)}`);
          assert.equal(receipt.success, true);
          assert.equal(receipt.extra.chargedAmount, String(TOOL));
          assert.equal(receipt.extra.channelState.chargedCumulativeAmount, String(BigInt(i) * TOOL));
          assert.equal(receipt.extra.channelState.balance, String(DEPOSIT));
          if (i === 1) {
            assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/, 'the deposit is a transaction');
            assert.equal(receipt.amount, String(DEPOSIT));
            channelId = receipt.extra.channelState.channelId as string;
          } else {
            assert.equal(receipt.transaction, '', 'a voucher moves nothing');
            assert.equal(receipt.extra.channelState.channelId, channelId);
          }
          assert.equal(await handBack(buyer, payload, { settleResponse: receipt }), false);
        }
        assert.equal(await balanceOf(paying.provider, payer.address), 1_000_000n - DEPOSIT, 'one deposit moved');
        const channel = await channelCharged(channelId, 4n * TOOL);
        assert.equal(channel.signed_max_claimable, String(4n * TOOL));
        assert.equal(channel.balance, String(DEPOSIT));

        // Each call reached the upstream once, without the payment; the rest of _meta kept.
        for (const marker of markers) {
          const reached = mcp.bodies.filter((b) => JSON.stringify(b).includes(marker)) as Array<{
            params: { _meta?: Json };
          }>;
          assert.equal(reached.length, 1);
          assert.deepEqual(reached[0].params._meta, { 'other/key': 'kept' });
        }
        assert.ok(!JSON.stringify(mcp.bodies).includes('x402/payment'), 'no payment reached the upstream');
      });
    });
  }

  it('/v1 transactional: the deposit and each voucher answered 202 with the channel state in PAYMENT-RESPONSE, each charged by its workflow', async () => {
    await onPricedSession({ json: true, agent: { capture_body: true } }, async ({ mcp, agentId, sessionId }) => {
      const unpaid = await rawEcho(agentId, sessionId, 'unpaid', undefined, '');
      assert.equal(unpaid.status, 402, unpaid.text);
      const required = decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string);
      const payer = await newPayer(1_000_000n);
      const buyer = channelBuyer(payer.privateKey);
      const http = new x402HTTPClient(buyer);
      let channelId = '';
      for (let i = 1; i <= 4; i++) {
        const payload = await buyer.createPaymentPayload(required);
        assert.equal((payload.payload as { type: string }).type, i === 1 ? 'deposit' : 'voucher');
        const marker = `transactional channel call ${i} ${randomUUID()}`;
        const paid = await rawEcho(agentId, sessionId, marker, { 'x402/payment': payload }, '');
        assert.equal(paid.status, 202, paid.text);
        const receipt = decodePaymentResponseHeader(paid.headers['payment-response'] as string) as Receipt;
        assert.equal(receipt.extra.channelState.chargedCumulativeAmount, String(BigInt(i) * TOOL));
        channelId = receipt.extra.channelState.channelId as string;
        // The receipt is a header here, handed to the client as @x402/fetch hands it.
        await http.processPaymentResult(payload, (name) => paid.headers[name.toLowerCase()] as string, paid.status);
        const done = await waitForInvocation(paying.token, agentId, paid.json.invocation_id);
        assert.equal(done.status, 'succeeded', JSON.stringify(done));
        // Its answer is kept under the caller's id, not the one the upstream was sent.
        const answer = Buffer.from(String(done.response_body_b64), 'base64').toString('utf8');
        assert.match(answer, /"id":"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"/, answer);
        assert.doesNotMatch(answer, /x402gw/);
        const row = await invocationRow(paid.json.invocation_id);
        assert.equal(row?.paymentScheme, 'batch-settlement');
        assert.equal(row?.paymentChannel, channelId);
        const reached = mcp.bodies.filter((b) => JSON.stringify(b).includes(marker));
        assert.equal(reached.length, 1);
        // Charged after its answer, the call went up under a JSON-RPC id of the gateway's own.
        const forwarded = reached[0] as { id: unknown };
        assert.match(String(forwarded.id), /^x402gw[0-9a-f]{32}$/);
        assert.equal(
          row?.requestBytes,
          Buffer.byteLength(JSON.stringify({ ...forwarded, id: randomUUID() })),
          "the stored body is the caller's: the one forwarded but for its id (a UUID)",
        );
      }
      await channelCharged(channelId, 4n * TOOL);
      assert.equal(await balanceOf(paying.provider, payer.address), 1_000_000n - DEPOSIT);
      assert.ok(!JSON.stringify(mcp.bodies).includes('x402/payment'), 'no payment reached the upstream');

      // A tool that fails costs nothing here too: its workflow's answer says so.
      const params = { name: 'no_such_tool', arguments: {} };
      const unpaidFailing = await rawRequest(agentId, sessionId, 'tools/call', params, '');
      const failing = await buyer.createPaymentPayload(
        decodePaymentRequiredHeader(unpaidFailing.headers['payment-required'] as string),
      );
      const accepted = await rawRequest(
        agentId,
        sessionId,
        'tools/call',
        { ...params, _meta: { 'x402/payment': failing } },
        '',
      );
      assert.equal(accepted.status, 202, accepted.text);
      const done = await waitForInvocation(paying.token, agentId, accepted.json.invocation_id);
      assert.equal(done.status, 'succeeded', JSON.stringify(done));
      const row = await invocationRow(accepted.json.invocation_id);
      assert.equal(row?.paymentMaxAmount, String(FLAT));
      assert.equal(row?.paymentCharge, '0');
      assert.equal(row?.meterReading?.reason, 'request_failed');
      // Its workflow lets the channel go having charged nothing (the channel's lease dropped).
      await waitFor(
        async () => {
          const [channel] = await stack()
            .orm.em.fork()
            .getConnection()
            .execute<Array<{ busy: string | null }>>('select busy_invocation as busy from channels where id = ?', [
              channelId,
            ]);
          return channel?.busy === null;
        },
        { timeoutMs: 30_000, what: 'the failed call to let its channel go' },
      );
      // The 202's receipt, handed back, said the ceiling: the client's next voucher is corrected
      // once, to a charged total that leaves the failed call out.
      await http.processPaymentResult(failing, (name) => accepted.headers[name.toLowerCase()] as string, 202);
      const ahead = await buyer.createPaymentPayload(required);
      const corrected = await rawEcho(agentId, sessionId, 'after a failed tool', { 'x402/payment': ahead }, '');
      assert.equal(corrected.status, 402, corrected.text);
      const corrective = decodePaymentRequiredHeader(corrected.headers['payment-required'] as string);
      assert.equal(await handBack(buyer, ahead, { paymentRequired: corrective }), true);
      const retried = await buyer.createPaymentPayload(required);
      const served = await rawEcho(agentId, sessionId, 'after a failed tool', { 'x402/payment': retried }, '');
      assert.equal(served.status, 202, served.text);
      const receipt = decodePaymentResponseHeader(served.headers['payment-response'] as string) as Receipt;
      assert.equal(receipt.extra.channelState.chargedCumulativeAmount, String(5n * TOOL));
    });
  });

  /** The completed rows of the agent's calls of `method`, oldest first. */
  async function completedRows(agentId: string, method: string, count: number) {
    return waitFor(
      async () => {
        const rows = await stack()
          .orm.em.fork()
          .find(InvocationSchema, { agentId, mcpMethod: method }, { orderBy: { createdAt: 'asc' } });
        return rows.length === count && rows.every((r) => r.status !== 'running') && rows;
      },
      { timeoutMs: 15_000, what: `${count} completed ${method} rows` },
    );
  }

  for (const answer of ['sse', 'json'] as const) {
    it(`/v1 (upstream answering in ${answer}): a failed tool and a JSON-RPC error cost nothing and carry no receipt; the next voucher needs no corrective round trip`, async () => {
      await onPricedSession({ json: answer === 'json' }, async ({ mcp, agentId, client, sessionId }) => {
        const { required, buyer } = await echoBuyer(agentId, sessionId);
        const paidEcho = async (text: string) => {
          const payload = await buyer.createPaymentPayload(required);
          const result = (await client.callTool({
            name: 'echo',
            arguments: { text },
            _meta: { 'x402/payment': payload },
          })) as ToolResult;
          const receipt = receiptOf(result);
          assert.ok(receipt, JSON.stringify(result));
          assert.equal(await handBack(buyer, payload, { settleResponse: receipt }), false);
          return { payload, receipt };
        };
        const deposit = await paidEcho('deposit');
        const channelId = deposit.receipt.extra.channelState.channelId as string;

        // A tool the upstream does not have: its result is a failed tool's (isError), priced FLAT.
        const challenge = async (method: string, params: Json) => {
          const res = await rawRequest(agentId, sessionId, method, params);
          assert.equal(res.status, 402, res.text);
          const entries = decodePaymentRequiredHeader(res.headers['payment-required'] as string);
          assert.equal(entries.accepts[0].amount, String(FLAT));
          return entries;
        };
        const failing = await buyer.createPaymentPayload(
          await challenge('tools/call', { name: 'no_such_tool', arguments: {} }),
        );
        assert.equal((failing.payload as { type: string }).type, 'voucher');
        const failed = (await client.callTool({
          name: 'no_such_tool',
          arguments: {},
          _meta: { 'x402/payment': failing },
        })) as ToolResult;
        assert.equal(failed.isError, true, JSON.stringify(failed));
        assert.equal(paymentRequiredOf(failed), undefined, 'the tool failed; the payment was not refused');
        assert.equal(receiptOf(failed), undefined, 'a failed tool carries no receipt: it costs nothing');

        // A method the upstream does not serve: a JSON-RPC error, priced FLAT.
        const erring = await buyer.createPaymentPayload(await challenge('prompts/get', { name: 'nothing' }));
        await assert.rejects(
          client.request(
            { method: 'prompts/get', params: { name: 'nothing', _meta: { 'x402/payment': erring } } },
            GetPromptResultSchema,
          ),
          (err: Error & { code?: number }) => err.code === -32601,
        );

        // The client kept its state (nothing handed back): its next voucher is accepted at once.
        const next = await paidEcho('after the failures');
        assert.equal(next.receipt.extra.channelState.chargedCumulativeAmount, String(2n * TOOL));
        await channelCharged(channelId, 2n * TOOL);

        const [toolRow, ...others] = (await completedRows(agentId, 'tools/call', 3)).filter(
          (r) => r.paymentMaxAmount === String(FLAT),
        );
        assert.equal(others.length, 0, 'one tools/call priced FLAT: the failed one');
        const [rpcRow] = await completedRows(agentId, 'prompts/get', 1);
        for (const row of [toolRow, rpcRow]) {
          assert.equal(row.paymentScheme, 'batch-settlement');
          assert.equal(row.paymentChannel, channelId);
          assert.equal(row.paymentMaxAmount, String(FLAT));
          assert.equal(row.paymentCharge, '0');
          assert.equal(row.meterReading?.reason, 'request_failed');
        }
        assert.equal(mcp.bodies.filter((b) => JSON.stringify(b).includes('no_such_tool')).length, 1, 'forwarded once');
      });
    });
  }

  it('/v1: a deposit paying a tool that fails keeps its receipt (the client learns what it deposited); its next voucher is corrected once', async () => {
    await onPricedSession({ json: false }, async ({ agentId, client, sessionId }) => {
      const { required, buyer } = await echoBuyer(agentId, sessionId);
      const unpaid = await rawRequest(agentId, sessionId, 'tools/call', { name: 'no_such_tool', arguments: {} });
      assert.equal(unpaid.status, 402, unpaid.text);
      const deposit = await buyer.createPaymentPayload(
        decodePaymentRequiredHeader(unpaid.headers['payment-required'] as string),
      );
      assert.equal((deposit.payload as { type: string }).type, 'deposit');
      const failed = (await client.callTool({
        name: 'no_such_tool',
        arguments: {},
        _meta: { 'x402/payment': deposit },
      })) as ToolResult;
      assert.equal(failed.isError, true, JSON.stringify(failed));
      const receipt = receiptOf(failed);
      assert.ok(receipt, `the deposit's receipt: ${JSON.stringify(failed)}`);
      assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/);
      assert.equal(receipt.amount, String(DEPOSIT));
      await handBack(buyer, deposit, { settleResponse: receipt });

      // The client counts the failed call's ceiling, which was not charged: corrected once, no second deposit.
      const ahead = await buyer.createPaymentPayload(required);
      assert.equal((ahead.payload as { type: string }).type, 'voucher', 'no second deposit');
      const corrected = await rawEcho(agentId, sessionId, 'after a failed tool', { 'x402/payment': ahead });
      assert.equal(corrected.status, 402, corrected.text);
      const corrective = decodePaymentRequiredHeader(corrected.headers['payment-required'] as string);
      assert.equal(await handBack(buyer, ahead, { paymentRequired: corrective }), true);
      const retried = await buyer.createPaymentPayload(required);
      const served = (await client.callTool({
        name: 'echo',
        arguments: { text: 'after a failed tool' },
        _meta: { 'x402/payment': retried },
      })) as ToolResult;
      assert.equal(receiptOf(served)?.extra.channelState.chargedCumulativeAmount, String(TOOL));
    });
  });

  it('/v1: a forged voucher is refused with nothing forwarded; a client that forgot its channel recovers through the corrective 402', async () => {
    await onPricedSession({ json: true }, async ({ mcp, agentId, sessionId }) => {
      const { required, payer, buyer } = await echoBuyer(agentId, sessionId);
      const paidEcho = async (text: string) => {
        const payload = await buyer.createPaymentPayload(required);
        const served = await rawEcho(agentId, sessionId, text, { 'x402/payment': payload });
        assert.equal(served.status, 200, served.text);
        const receipt = JSON.parse(served.text).result._meta['x402/payment-response'] as Receipt;
        await handBack(buyer, payload, { settleResponse: receipt });
        return receipt.extra.channelState.channelId as string;
      };
      const channelId = await paidEcho('the deposit');
      const channelFree = async () => {
        const [row] = await stack()
          .orm.em.getConnection()
          .execute<Array<{ free: boolean }>>(`select busy_until is null as free from channels where id = ?`, [
            channelId,
          ]);
        return row?.free === true;
      };

      // Forged: on the channel this process holds between calls since it served a voucher there
      // (the signature checked as the call's row is written), then once it let it go (checked
      // before the channel is leased).
      for (const held of [true, false]) {
        await paidEcho(`a voucher ${held}`);
        if (held) assert.equal(await channelFree(), false, 'held by this process');
        else await waitFor(channelFree, { timeoutMs: 15_000, what: 'the channel let go' });
        const marker = `forged ${held} ${randomUUID()}`;
        const refused = await rawEcho(agentId, sessionId, marker, {
          'x402/payment': forgedVoucher(await buyer.createPaymentPayload(required)),
        });
        assert.equal(refused.status, 402, refused.text);
        assert.equal(refused.json.error, 'invalid payment');
        assert.ok(refused.headers['payment-required'], 'the refusal carries PAYMENT-REQUIRED');
        assert.ok(!JSON.stringify(mcp.bodies).includes(marker), 'nothing reached the upstream');
      }
      await channelCharged(channelId, 3n * TOOL);

      // A client with no record of the channel: it reads the chain (nothing claimed), signs a
      // voucher the gateway does not expect, is answered the corrective 402 (the channel's state
      // and the payer's latest voucher in PAYMENT-REQUIRED), recovers and pays again.
      const fresh = channelBuyer(payer.privateKey);
      const lost = await fresh.createPaymentPayload(required);
      const { voucher } = lost.payload as { voucher: { maxClaimableAmount: string } };
      assert.equal(voucher.maxClaimableAmount, String(TOOL), 'nothing claimed yet, so it counts nothing charged');
      const marker = `recovered ${randomUUID()}`;
      const corrected = await rawEcho(agentId, sessionId, marker, { 'x402/payment': lost });
      assert.equal(corrected.status, 402, corrected.text);
      const corrective = decodePaymentRequiredHeader(corrected.headers['payment-required'] as string);
      assert.equal(corrective.error, 'invalid_batch_settlement_evm_cumulative_amount_mismatch');
      assert.equal((corrective.accepts[0].extra as Json).channelState.chargedCumulativeAmount, String(3n * TOOL));
      const http = new x402HTTPClient(fresh);
      const outcome = await http.processPaymentResult(
        lost,
        (name) => corrected.headers[name.toLowerCase()] as string,
        402,
      );
      assert.equal(outcome.recovered, true);
      const repaid = await fresh.createPaymentPayload(corrective);
      const served = await rawEcho(agentId, sessionId, marker, { 'x402/payment': repaid });
      assert.equal(served.status, 200, served.text);
      const after = JSON.parse(served.text).result._meta['x402/payment-response'] as Receipt;
      assert.equal(after.extra.channelState.chargedCumulativeAmount, String(4n * TOOL));
      assert.equal(mcp.bodies.filter((b) => JSON.stringify(b).includes(marker)).length, 1, 'served once');
      await channelCharged(channelId, 4n * TOOL);
      assert.equal(await balanceOf(paying.provider, payer.address), 1_000_000n - DEPOSIT, 'no second deposit');
    });
  });

  describe('a public MCP agent: the payment-required tool result', () => {
    // A replica whose challenge buckets do not run dry: every unpaid tools/call here is a challenge.
    let gateway: ExtraGateway;
    before(async () => {
      const limits = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000, payerRps: 1000 };
      gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...limits } });
    });
    after(() => gateway.close());

    it("the session's methods and its tool calls pay from one channel; a forged voucher is refused in a tool result; a forgetful client recovers", async () => {
      const mcp = await startMcpServer();
      try {
        const payTo = newPayTo();
        const agentId = await mcpAgent(mcp.url, {
          pricing: channelPricing(payTo),
          public: true,
          public_description: 'Echoes text, paid from a channel',
        });
        const agent = await call('GET', `/v1/agents/${agentId}`, { token: paying.token });
        const streamUrl = `${gateway.url}${new URL(agent.json.public_stream_url as string).pathname}`;
        const payer = await newPayer(1_000_000n);
        const buyer = channelBuyer(payer.privateKey);
        // The session's own methods (initialize, the initialized notification) pay the flat price
        // in a header, through @x402/fetch, from the same client and so the same channel.
        const client = new Client({ name: 'x402-public-mcp-channels', version: '1.0.0' });
        await client.connect(
          new StreamableHTTPClientTransport(new URL(streamUrl), { fetch: wrapFetchWithPayment(fetch, buyer) }),
        );
        try {
          let channelId = '';
          for (let i = 1; i <= 3; i++) {
            const marker = `public channel call ${i} ${randomUUID()}`;
            const { result, payloads, corrective } = await callToolPaying(client, buyer, 'echo', { text: marker });
            assert.equal(corrective, undefined, 'the client knew its channel');
            assert.equal(payloads.length, 1);
            assert.equal((payloads[0]!.payload as { type: string }).type, 'voucher', 'the session deposited');
            assert.deepEqual(result.content, [{ type: 'text', text: `echo: ${marker}` }]);
            const receipt = receiptOf(result)!;
            assert.equal(receipt.extra.chargedAmount, String(TOOL));
            channelId = receipt.extra.channelState.channelId as string;
          }

          // A forged voucher: the payment-required tool result, nothing forwarded, nothing charged.
          const unpaid = (await client.callTool({ name: 'echo', arguments: { text: 'price' } })) as ToolResult;
          const required = paymentRequiredOf(unpaid)!;
          const marker = `public forged ${randomUUID()}`;
          const refused = (await client.callTool({
            name: 'echo',
            arguments: { text: marker },
            _meta: { 'x402/payment': forgedVoucher(await buyer.createPaymentPayload(required)) },
          })) as ToolResult;
          assert.equal(refused.isError, true, JSON.stringify(refused));
          assert.equal(paymentRequiredOf(refused)?.error, 'invalid payment');
          assert.ok(!JSON.stringify(mcp.bodies).includes(marker), 'nothing reached the upstream');

          // A client that forgot its channel: the corrective payment-required tool result carries
          // the channel's state and the payer's latest voucher; the scheme recovers and pays again.
          const fresh = channelBuyer(payer.privateKey);
          const recoveredMarker = `public recovered ${randomUUID()}`;
          const recovered = await callToolPaying(client, fresh, 'echo', { text: recoveredMarker });
          assert.ok(recovered.corrective, 'answered the corrective payment-required result first');
          assert.equal(recovered.corrective.error, 'invalid_batch_settlement_evm_cumulative_amount_mismatch');
          const correctiveExtra = recovered.corrective.accepts[0]!.extra as Json;
          assert.equal(correctiveExtra.channelState.channelId, channelId);
          assert.ok(correctiveExtra.voucherState, "the payer's latest voucher");
          assert.deepEqual(recovered.result.content, [{ type: 'text', text: `echo: ${recoveredMarker}` }]);
          assert.equal(mcp.bodies.filter((b) => JSON.stringify(b).includes(recoveredMarker)).length, 1);

          // The channel's total is what its served calls were charged: the session's methods at
          // the flat price, the tool calls at theirs.
          const paid = await waitFor(
            async () => {
              const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, {
                token: paying.token,
              });
              const mine = (listed.json.data as Json[]).filter((inv) => inv.payment_channel === channelId);
              return mine.every((inv) => inv.payment_settlement === 'settled') && mine;
            },
            { timeoutMs: 30_000, what: "every call's charge committed" },
          );
          assert.equal(paid.filter((inv) => inv.mcp_tool === 'echo').length, 4);
          const charged = paid.reduce((sum, inv) => sum + BigInt(inv.payment_charge ?? '0'), 0n);
          assert.ok(charged > 4n * TOOL, 'the session methods paid too');
          await channelCharged(channelId, charged);
          assert.equal(await balanceOf(paying.provider, payer.address), 1_000_000n - DEPOSIT, 'one deposit moved');
          assert.ok(!JSON.stringify(mcp.bodies).includes('x402/payment'), 'no payment reached the upstream');
        } finally {
          await client.close();
        }
      } finally {
        await mcp.close();
      }
    });
  });
});
