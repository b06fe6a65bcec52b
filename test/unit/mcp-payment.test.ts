// The x402 MCP transport's shapes (x402 specs/transports-v2/mcp.md, tool-result binding): the
// JSON-RPC payment-required answer a route outside /v1 may give (api/proxy/mcp.ts, gateway/mcp/x402.ts),
// and the receipt added to a paid call's JSON-RPC result, in a JSON body or in the one SSE event
// that answers the request, whatever the chunking (gateway/mcp/x402.ts).
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { ApiError } from '../../api/errors.ts';
import { inAnswerStyle, mcpPaymentRequired, mcpReceiptInjector, parseMcpBody } from '../../api/proxy/mcp.ts';
import type { PaymentConfig } from '../../gateway/payment/config.ts';
import type { ChallengeEntry } from '../../x402/schemas.ts';

const config = {
  network: 'base',
  domain: {
    name: 'USD Coin',
    version: '2',
    chainId: 8453,
    verifyingContract: '0x0000000000000000000000000000000000000001',
  },
} as PaymentConfig;

const entry: ChallengeEntry = {
  scheme: 'exact',
  network: 'base',
  maxAmountRequired: '7000',
  resource: 'https://gateway.test/v1/proxy/agt_x/stream',
  description: 'Call of tool echo on agent a',
  mimeType: 'application/json',
  payTo: '0x0000000000000000000000000000000000000002',
  maxTimeoutSeconds: 60,
  asset: '0x0000000000000000000000000000000000000001',
  extra: { name: 'USD Coin', version: '2' },
};

const toolCall = { method: 'tools/call', tool: 'echo', rpcId: 7 };
// A public MCP agent describing its tool: its challenges declare the bazaar extension too.
const agent = {
  public: true,
  protocol: 'mcp' as const,
  publicDescription: 'Echoes text',
  publicInterface: { tools: { echo: { input_schema: { type: 'object', properties: { text: { type: 'string' } } } } } },
};
const receipt = { success: true as const, transaction: `0x${'ab'.repeat(32)}`, network: 'eip155:8453', payer: '0x03' };

describe('x402 MCP transport answers', () => {
  it('builds the tool-result payment-required answer: isError, PaymentRequired in structuredContent and as content[0].text', () => {
    const body = mcpPaymentRequired(config, { agent, mcp: toolCall }, entry, 'payment required') as {
      id: unknown;
      result: { isError: boolean; structuredContent: unknown; content: Array<{ type: string; text: string }> };
    };
    assert.equal(body.id, 7);
    assert.equal(body.result.isError, true);
    const required = PaymentRequiredV2Schema.parse(body.result.structuredContent);
    assert.equal(required.accepts[0].amount, '7000');
    assert.equal(required.accepts[0].network, 'eip155:8453');
    assert.ok(required.extensions?.['payment-identifier']);
    const bazaar = required.extensions?.bazaar as { info: { input: Record<string, unknown> } };
    assert.equal(bazaar.info.input.type, 'mcp');
    assert.equal(bazaar.info.input.toolName, 'echo');
    assert.deepEqual(bazaar.info.input.inputSchema, agent.publicInterface.tools.echo.input_schema);
    assert.deepEqual(body.result.content, [{ type: 'text', text: JSON.stringify(body.result.structuredContent) }]);
  });

  it('answers in MCP style only when the call asks for it, for a tools/call with an id, and only for a 402', () => {
    const refusal = new ApiError(402, 'invalid payment');
    assert.equal(inAnswerStyle(config, { agent, mcp: toolCall }, entry, refusal), refusal, '/v1 keeps its 402');
    const mcp = inAnswerStyle(config, { agent, mcp: toolCall, paymentAnswer: 'mcp' }, entry, refusal);
    assert.equal(mcp.status, 200);
    assert.equal((mcp.body as { result: { isError: boolean } }).result.isError, true);
    const notification = { method: 'tools/call', tool: 'echo' };
    assert.equal(inAnswerStyle(config, { agent, mcp: notification, paymentAnswer: 'mcp' }, entry, refusal), refusal);
    const other = new ApiError(503, 'payment is still settling; retry with the same payment header');
    assert.equal(inAnswerStyle(config, { agent, mcp: toolCall, paymentAnswer: 'mcp' }, entry, other), other);
  });
});

describe('the receipt in a paid MCP result', () => {
  const paid = { mcp: toolCall, payment: { metaResponse: receipt } } as Parameters<typeof mcpReceiptInjector>[0];
  const through = async (contentType: string, chunks: string[]) => {
    const wrap = mcpReceiptInjector(paid, { 'content-type': contentType });
    assert.ok(wrap);
    return text(wrap(Readable.from(chunks.map((c) => Buffer.from(c)))));
  };

  it('adds _meta["x402/payment-response"] to a JSON result, keeping the result’s own _meta', async () => {
    const body = '{"jsonrpc":"2.0","id":7,"result":{"content":[],"big":12345678901234567890123,"_meta":{"mine":1}}}';
    const text = await through('application/json', [body.slice(0, 5), body.slice(5)]);
    const out = JSON.parse(text);
    assert.deepEqual(out.result._meta, { mine: 1, 'x402/payment-response': receipt });
    assert.ok(text.includes('"big":12345678901234567890123'), 'numbers as the upstream wrote them');
  });

  it('re-writes only the SSE event answering the request, split anywhere, and passes the others byte for byte', async () => {
    const note = 'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n';
    const answer = `event: message\nid: 3\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 7, result: { content: [] } })}\r\n\r\n`;
    const after = 'data: {"jsonrpc":"2.0","id":7,"result":{}}\n\n';
    const whole = note + answer + after;
    for (let cut = 1; cut < whole.length; cut += 17) {
      const out = await through('text/event-stream', [whole.slice(0, cut), whole.slice(cut)]);
      assert.ok(out.startsWith(note), `cut ${cut}`);
      const events = out.split('\n\n');
      const rewritten = events[1].split('\n');
      assert.deepEqual(rewritten.slice(0, 2), ['event: message', 'id: 3']);
      assert.deepEqual(JSON.parse(rewritten[2].slice(6)).result._meta, { 'x402/payment-response': receipt });
      assert.ok(out.endsWith(after), 'what follows the answer passes untouched');
    }
  });

  it('passes a 1 MiB stream of empty events through unchanged, in one chunk or many', async () => {
    const empty = '\n\n'.repeat(512 * 1024);
    const answer = `data: ${JSON.stringify({ jsonrpc: '2.0', id: 7, result: {} })}\n\n`;
    assert.equal(await through('text/event-stream', [empty]), empty);
    const chunks = empty.match(/[^]{1,1000}/g)!;
    const out = await through('text/event-stream', [...chunks, answer]);
    assert.ok(out.startsWith(empty), 'the empty events pass byte for byte');
    assert.ok(
      out.slice(empty.length).includes('x402/payment-response'),
      'and the answer after them still gets the receipt',
    );
  });

  it('leaves other answers alone: an error, another id, an encoded body', async () => {
    const error = JSON.stringify({ jsonrpc: '2.0', id: 7, error: { code: -1, message: 'no' } });
    assert.equal(await through('application/json', [error]), error);
    const other = JSON.stringify({ jsonrpc: '2.0', id: 8, result: {} });
    assert.equal(await through('application/json', [other]), other);
    assert.equal(mcpReceiptInjector(paid, { 'content-type': 'application/json', 'content-encoding': 'gzip' }), null);
    assert.equal(mcpReceiptInjector(paid, { 'content-type': 'text/plain' }), null);
  });
});

describe('the request forwarded without its _meta payment', () => {
  it('removes only the x402/payment key and keeps every other byte of meaning, numbers as written', () => {
    const sent =
      '{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"n":12345678901234567890123,"f":1.0,"s":"\\u00e9"},' +
      '"_meta":{"x402/payment":{"x402Version":2},"progressToken":7}}}';
    const parsed = parseMcpBody(Buffer.from(sent));
    assert.deepEqual(parsed.payment, { x402Version: 2 });
    assert.equal(
      parsed.forwardBody?.toString(),
      '{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"n":12345678901234567890123,"f":1.0,"s":"é"},"_meta":{"progressToken":7}}}',
    );
  });

  it('refuses a paid request over 64 KiB before re-serializing it', () => {
    const numbers = Array.from({ length: 2 * 1024 * 1024 }, (_, i) => i % 10).join(',');
    const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":[${numbers}]},"_meta":{"x402/payment":0}}}`;
    assert.ok(body.length > 4 * 1024 * 1024);
    assert.throws(
      () => parseMcpBody(Buffer.from(body)),
      (err: ApiError) => err.status === 400 && /64/.test(err.message),
    );
  });

  it('refuses a request whose x402/payment key the parsed request does not show (duplicate _meta, escaped, twice)', () => {
    for (const params of [
      '"_meta":{"x402/payment":{"x402Version":2}},"_meta":{}',
      '"_meta":{"x402\\/payment":{"x402Version":2}},"_meta":{}',
      '"_meta":{"\\u0078402\\u002Fpayment":{"x402Version":2}},"_meta":{}',
      '"arguments":{"x402/payment":1},"_meta":{"x402/payment":{"x402Version":2}}',
    ]) {
      const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",${params}}}`;
      assert.throws(
        () => parseMcpBody(Buffer.from(body)),
        (err: ApiError) => err.status === 400 && /duplicate or hidden x402\/payment/.test(err.message),
        body,
      );
    }
  });

  it('leaves a request without the key alone (nothing to forward but what was sent)', () => {
    const parsed = parseMcpBody(
      Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{}}}'),
    );
    assert.equal(parsed.forwardBody, undefined);
    assert.equal(parsed.payment, undefined);
  });
});
