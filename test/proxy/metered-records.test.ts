// Metered (x402 `upto`) calls measured and recorded (gateway/invocations/metered.ts): the meter
// reads the upstream's real answer as it passes, in the transactional activity and in the
// streaming relay, and the charge lands on the row in its completing statement. Each agent here
// is created through the API priced `upto` at the maximum with its meter. Its calls are paid as
// a payer pays `upto`: the gateway's 402 answered by the
// unmodified @x402/evm upto client (an EIP-2612 permit, the payer never having approved
// Permit2), through a tenant whose settlement goes through the stack's facilitator. The payment
// is verified and bound before the call and nothing is settled yet (that comes after the call),
// so the calls run the stack's real admission, worker, relay and row writers.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { stack } from '../support/stack.ts';
import { waitForInvocation } from '../support/http.ts';
import { startUpstream, type Received, type TestUpstream } from '../support/upstream.ts';
import { createAgent, waitForRow } from '../support/proxy-helpers.ts';
import { payUptoChallenge, rpcReader } from '../support/upto.ts';
import { withPayingTenant } from '../support/settling.ts';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { newPayTo, newPayer } from '../support/x402.ts';
import { ANTHROPIC_SSE, OPENAI_CHAT_JSON, OPENAI_CHAT_SSE } from '../support/llm-answers.ts';
import { registry } from '../../lib/observability/metrics.ts';
import { failStaleStreams } from '../../gateway/invocations/stale-streams.ts';
import type { Wallet } from 'ethers';

const MAX = '50000';
const HEADER_METER = { kind: 'header', header: 'X-Usage-Cost' };
// ceil((input × 1000 + output × 3000) / 1000)
const TOKENS_METER = { kind: 'tokens', input_per_1k: '1000', output_per_1k: '3000' };

type Answer = (req: Received, res: ServerResponse) => void;

const json =
  (body: string, headers: Record<string, string> = {}, status = 200): Answer =>
  (_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(body);
  };
const sse =
  (body: string, headers: Record<string, string> = {}): Answer =>
  (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', ...headers });
    // In small pieces, so events and UTF-8 sequences are split across chunks.
    const bytes = Buffer.from(body);
    for (let i = 0; i < bytes.length; i += 7) res.write(bytes.subarray(i, i + 7));
    res.end();
  };

async function counted(name: string, labels: Record<string, string>): Promise<number> {
  const metric = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  const match = metric.find((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value));
  return match?.value ?? 0;
}

describe('metered calls: the meter read as answers pass, the charge on the row', function () {
  this.timeout(60_000);
  let upstream: TestUpstream;
  let token: string;
  let payer: Wallet;
  withPayingTenant('metered', (paying) => (token = paying.token));
  // Each call names the answer its upstream gives (the request's `x-answer` header).
  const answers = new Map<string, Answer>();

  before(async () => {
    upstream = await startUpstream((req, res) => {
      const answer = answers.get(String(req.headers['x-answer']));
      if (answer) answer(req, res);
      else json('{}')(req, res);
    });
    payer = await newPayer(10_000_000n);
  });
  after(() => upstream.close());

  async function meteredAgent(meter: Record<string, unknown>): Promise<string> {
    return createAgent(token, {
      upstream_url: upstream.url,
      pricing: { amount: MAX, asset: 'USDC', network: 'base', pay_to: newPayTo(), scheme: 'upto', meter },
    });
  }

  /** A paid call answered by `answer`; the invocation id and the request the upstream received. */
  async function paidCall(
    agentId: string,
    mode: 'transactional' | 'streaming',
    answer: Answer,
  ): Promise<{ id: string; received: () => Received | undefined; status: number }> {
    const key = randomUUID();
    answers.set(key, answer);
    const url = `${stack().apiUrl}/v1/proxy/${agentId}${mode === 'streaming' ? '/stream' : ''}`;
    const send = (payment?: string) =>
      fetch(url, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'accept-encoding': 'gzip',
          'x-answer': key,
          ...(payment ? { 'payment-signature': payment } : {}),
        },
        body: '{"model":"m","stream":true}',
      });
    const challenge = await send();
    assert.equal(challenge.status, 402);
    await challenge.arrayBuffer();
    const required = JSON.parse(Buffer.from(challenge.headers.get('payment-required')!, 'base64').toString('utf8'));
    assert.equal(required.accepts[0].scheme, 'upto');
    const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
    const res = await send(encodeBase64Json(wire));
    await res.arrayBuffer().catch(() => undefined);
    const id = res.headers.get('x-gateway-invocation-id');
    assert.ok(id, `an invocation id (status ${res.status})`);
    return { id, status: res.status, received: () => upstream.received.find((r) => r.headers['x-answer'] === key) };
  }

  async function charged(id: string) {
    const row = await waitForRow(id);
    return {
      status: row.status,
      scheme: row.paymentScheme,
      max: row.paymentMaxAmount,
      charge: row.paymentCharge,
      reading: row.meterReading,
    };
  }

  it('header meter: a transactional JSON answer and a streamed SSE answer are charged what the header states', async () => {
    const agentId = await meteredAgent(HEADER_METER);
    const call = await paidCall(agentId, 'transactional', json('{"ok":true}', { 'x-usage-cost': '1234' }));
    assert.equal(call.status, 202);
    const polled = await waitForInvocation(token, agentId, call.id);
    assert.equal(polled.payment_scheme, 'upto');
    assert.equal(polled.payment_max_amount, MAX);
    assert.equal(polled.payment_charge, '1234');
    assert.equal(polled.payment_amount, '1234', 'payment_amount: the charge, once complete');
    assert.deepEqual(await charged(call.id), {
      status: 'succeeded',
      scheme: 'upto',
      max: MAX,
      charge: '1234',
      reading: { kind: 'amount', amount: '1234', capped: false, reason: 'measured' },
    });

    const stream = await paidCall(agentId, 'streaming', sse('data: {"a":1}\n\n', { 'x-usage-cost': ' 0777 ' }));
    assert.equal(stream.status, 200);
    assert.deepEqual(await charged(stream.id), {
      status: 'succeeded',
      scheme: 'upto',
      max: MAX,
      charge: '777',
      reading: { kind: 'amount', amount: '777', capped: false, reason: 'measured' },
    });
  });

  it('tokens meter: OpenAI JSON, OpenAI SSE with a usage chunk and Anthropic SSE give the exact charge; the upstream is asked for identity', async () => {
    const agentId = await meteredAgent(TOKENS_METER);
    const openAiJson = await paidCall(agentId, 'transactional', json(OPENAI_CHAT_JSON));
    // 19 prompt and 10 completion tokens: ceil((19000 + 30000) / 1000)
    assert.equal((await charged(openAiJson.id)).charge, '49');
    assert.deepEqual((await charged(openAiJson.id)).reading, {
      kind: 'usage',
      input: 19,
      output: 10,
      capped: false,
      reason: 'measured',
    });
    assert.equal(openAiJson.received()?.headers['accept-encoding'], 'identity');

    const openAiSse = await paidCall(agentId, 'streaming', sse(OPENAI_CHAT_SSE));
    // 12 and 34: ceil((12000 + 102000) / 1000)
    assert.equal((await charged(openAiSse.id)).charge, '114');
    assert.equal(openAiSse.received()?.headers['accept-encoding'], 'identity', 'not the caller’s gzip');

    const anthropic = await paidCall(agentId, 'streaming', sse(ANTHROPIC_SSE));
    // message_start's 25 input, the last message_delta's 15 output: ceil((25000 + 45000) / 1000)
    assert.deepEqual((await charged(anthropic.id)).reading, {
      kind: 'usage',
      input: 25,
      output: 15,
      capped: false,
      reason: 'measured',
    });
    assert.equal((await charged(anthropic.id)).charge, '70');
  });

  it('a reading over the maximum is charged the maximum, marked capped and counted', async () => {
    const agentId = await meteredAgent(HEADER_METER);
    const before = {
      transactional: await counted('gateway_meter_readings_capped_total', { mode: 'transactional' }),
      streaming: await counted('gateway_meter_readings_capped_total', { mode: 'streaming' }),
    };
    for (const mode of ['transactional', 'streaming'] as const) {
      const call = await paidCall(agentId, mode, json('{}', { 'x-usage-cost': '1000000000' }));
      assert.deepEqual(await charged(call.id), {
        status: 'succeeded',
        scheme: 'upto',
        max: MAX,
        charge: MAX,
        reading: { kind: 'amount', amount: '1000000000', capped: true, reason: 'measured' },
      });
      assert.equal(await counted('gateway_meter_readings_capped_total', { mode }), before[mode] + 1);
    }
  });

  it('an upstream 5xx, an upstream that dies before answering, and an answer without a reading are charged 0 with their reason', async () => {
    const agentId = await meteredAgent(HEADER_METER);
    const failedBefore = await counted('gateway_meter_readings_total', {
      mode: 'transactional',
      reason: 'upstream_failed',
    });
    const serverError = await paidCall(agentId, 'transactional', json('{}', { 'x-usage-cost': '999' }, 500));
    assert.deepEqual((await charged(serverError.id)).reading, {
      kind: 'amount',
      amount: '999',
      capped: false,
      reason: 'upstream_failed',
    });
    assert.equal((await charged(serverError.id)).charge, '0');
    assert.equal(
      await counted('gateway_meter_readings_total', { mode: 'transactional', reason: 'upstream_failed' }),
      failedBefore + 1,
    );

    const reset = await paidCall(agentId, 'streaming', (_req, res) => res.socket?.destroy());
    assert.equal(reset.status, 502);
    assert.deepEqual(await charged(reset.id), {
      status: 'failed',
      scheme: 'upto',
      max: MAX,
      charge: '0',
      reading: { kind: 'none', capped: false, reason: 'upstream_failed' },
    });

    for (const mode of ['transactional', 'streaming'] as const) {
      const unread = await paidCall(agentId, mode, json('{}', { 'x-usage-cost': '-5' }));
      assert.deepEqual((await charged(unread.id)).reading, { kind: 'none', capped: false, reason: 'no_reading' });
      assert.equal((await charged(unread.id)).charge, '0');
    }
  });

  it('a metered stream lost with its process is charged 0, its reading none (what was read died with it)', async () => {
    const agentId = await meteredAgent(HEADER_METER);
    const id = `inv_${randomUUID().replaceAll('-', '')}`;
    // A paid stream's row as its payment binding wrote it, its process gone before the mark.
    await stack()
      .orm.em.getConnection()
      .execute(
        `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, request_headers, attempts, payment_scheme, payment_max_amount, created_at, updated_at)
         values (?, (select tenant_id from agents where id = ?), ?, 'streaming', 'running', 'req', 'u', '{}', 0, 'upto', ?, now() - interval '1 hour', now())`,
        [id, agentId, agentId, MAX],
      );
    await failStaleStreams(stack().orm, 60_000);
    assert.deepEqual(await charged(id), {
      status: 'failed',
      scheme: 'upto',
      max: MAX,
      charge: '0',
      reading: { kind: 'none', capped: false, reason: 'gateway_lost' },
    });
  });

  it('a call that is not metered records none of it', async () => {
    const agentId = await createAgent(token, { upstream_url: upstream.url });
    const res = await fetch(`${stack().apiUrl}/v1/proxy/${agentId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-usage-cost': '5' },
      body: '{}',
    });
    const { invocation_id: id } = (await res.json()) as { invocation_id: string };
    const polled = await waitForInvocation(token, agentId, id);
    assert.equal(polled.payment_scheme, null);
    assert.equal(polled.payment_max_amount, null);
    assert.equal(polled.payment_charge, null);
    assert.equal((await waitForRow(id)).meterReading, null);
  });
});
