// A metered (x402 `upto`) call charged after its answer, end to end on the real stack and chain:
// an unmodified @x402/fetch + @x402/evm UptoEvmScheme client pays a metered agent on both
// endpoints; the charge its meter measured is settled through the tenant's facilitator once the
// answer is complete (the transactional call's workflow step, the streamed call's
// MeteredChargeWorkflow), and the payer's balance moves by exactly that charge: 0 moves nothing,
// an over-maximum reading moves the maximum, a payer that moved its funds between the call and
// the settle is a visible loss. A client that sends `TE: trailers` gets the settlement as the
// streamed answer's PAYMENT-RESPONSE trailer.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type ServerResponse } from 'node:http';
import { Wallet, type JsonRpcProvider } from 'ethers';
import { stack } from '../support/stack.ts';
import { startUpstream, type Received, type TestUpstream } from '../support/upstream.ts';
import { createAgent, readAll } from '../support/proxy-helpers.ts';
import { payUptoChallenge, rpcReader, settledInvocation, uptoFetch, uptoPayer } from '../support/upto.ts';
import { withPayingTenant } from '../support/settling.ts';
import { balanceOf, newPayTo } from '../support/x402.ts';
import { OPENAI_CHAT_SSE } from '../support/llm-answers.ts';
import { encodeBase64Json } from '../../x402/schemas.ts';
import { tokenContract } from '../../scripts/dev/chain.ts';

const MAX = 50_000n;
const HEADER_METER = { kind: 'header', header: 'X-Usage-Cost' };
// ceil((input × 1000 + output × 3000) / 1000)
const TOKENS_METER = { kind: 'tokens', input_per_1k: '1000', output_per_1k: '3000' };

type Answer = (req: Received, res: ServerResponse) => void | Promise<void>;

const answerWith =
  (status: number, headers: Record<string, string>, body: string): Answer =>
  (_req, res) => {
    res.writeHead(status, headers);
    res.end(body);
  };

describe('upto: the metered charge settled after the call', function () {
  this.timeout(120_000);
  let upstream: TestUpstream;
  let token: string;
  let provider: JsonRpcProvider;
  withPayingTenant('charged', (paying) => {
    token = paying.token;
    provider = paying.provider;
  });
  const answers = new Map<string, Answer>();

  before(async () => {
    upstream = await startUpstream(async (req, res) => {
      const answer = answers.get(String(req.headers['x-answer']));
      if (answer) await answer(req, res);
      else answerWith(200, { 'content-type': 'application/json' }, '{}')(req, res);
    });
  });
  after(() => upstream.close());

  /** An agent priced by use at most MAX, paying `payTo`. */
  async function meteredAgent(meter: Record<string, unknown>, payTo: string): Promise<string> {
    return createAgent(token, {
      upstream_url: upstream.url,
      pricing: { scheme: 'upto', amount: String(MAX), asset: 'USDC', network: 'base', pay_to: payTo, meter },
    });
  }

  /** A paid call through the client; its invocation id once the answer is read whole. */
  async function paidCall(
    pay: typeof fetch,
    agentId: string,
    mode: 'transactional' | 'streaming',
    answer: Answer,
    streamedStatus = 200,
  ): Promise<string> {
    const key = randomUUID();
    answers.set(key, answer);
    const res = await pay(`${stack().apiUrl}/v1/proxy/${agentId}${mode === 'streaming' ? '/stream' : ''}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-answer': key },
      body: '{"model":"m"}',
    });
    await res.arrayBuffer();
    assert.equal(res.status, mode === 'streaming' ? streamedStatus : 202);
    const id = res.headers.get('x-gateway-invocation-id');
    assert.ok(id);
    return id;
  }

  it('a payer that approved Permit2 pays the header meter’s charge on both endpoints; its balance moves by exactly that', async () => {
    const payTo = newPayTo();
    const agentId = await meteredAgent(HEADER_METER, payTo);
    const payer = await uptoPayer(provider, 10_000_000n);
    const pay = uptoFetch(payer);
    const before = await balanceOf(provider, payer.address);

    const json = answerWith(200, { 'content-type': 'application/json', 'x-usage-cost': '1234' }, '{"ok":true}');
    const transactional = await paidCall(pay, agentId, 'transactional', json);
    const first = await settledInvocation(token, agentId, transactional);
    assert.equal(first.payment_settlement, 'settled');
    assert.equal(first.payment_scheme, 'upto');
    assert.equal(first.payment_max_amount, String(MAX));
    assert.equal(first.payment_charge, '1234');
    assert.equal(first.payment_amount, '1234', 'payment_amount is the charge');
    assert.match(String(first.payment_transaction), /^0x[0-9a-f]{64}$/);
    assert.equal(await balanceOf(provider, payer.address), before - 1234n);
    // The payer's signature was kept on its binding only until its charge was settled.
    const [binding] = await stack()
      .orm.em.getConnection()
      .execute<Array<{ status: string; signed_payment: unknown }>>(
        'select status, signed_payment from payment_claims where invocation_id = ?',
        [transactional],
      );
    assert.deepEqual(binding, { status: 'settled', signed_payment: null });

    const sse = answerWith(200, { 'content-type': 'text/event-stream', 'x-usage-cost': '777' }, 'data: {}\n\n');
    const streamed = await paidCall(pay, agentId, 'streaming', sse);
    const second = await settledInvocation(token, agentId, streamed);
    assert.equal(second.payment_settlement, 'settled');
    assert.equal(second.payment_charge, '777');
    assert.match(String(second.payment_transaction), /^0x[0-9a-f]{64}$/);
    assert.notEqual(second.payment_transaction, first.payment_transaction);
    assert.equal(await balanceOf(provider, payer.address), before - 1234n - 777n);
    assert.equal(await balanceOf(provider, payTo), 1234n + 777n);
  });

  it('a payer that never approved Permit2 (the sponsoring permit) pays the tokens meter’s charge of a streamed SSE answer', async () => {
    const agentId = await meteredAgent(TOKENS_METER, newPayTo());
    const payer = await uptoPayer(provider, 10_000_000n, false);
    const before = await balanceOf(provider, payer.address);
    const sse = answerWith(200, { 'content-type': 'text/event-stream' }, OPENAI_CHAT_SSE);
    const id = await paidCall(uptoFetch(payer), agentId, 'streaming', sse);
    const done = await settledInvocation(token, agentId, id);
    // 12 prompt and 34 completion tokens: ceil((12000 + 102000) / 1000)
    assert.equal(done.payment_charge, '114');
    assert.equal(done.payment_settlement, 'settled');
    assert.equal(await balanceOf(provider, payer.address), before - 114n);
  });

  it('a charge of 0 moves nothing; an over-maximum reading moves the maximum', async () => {
    const agentId = await meteredAgent(HEADER_METER, newPayTo());
    const payer = await uptoPayer(provider, 10_000_000n);
    const pay = uptoFetch(payer);
    const before = await balanceOf(provider, payer.address);

    const unread = answerWith(200, { 'content-type': 'application/json' }, '{}');
    const zero = await settledInvocation(token, agentId, await paidCall(pay, agentId, 'transactional', unread));
    assert.equal(zero.payment_charge, '0');
    assert.equal(zero.payment_settlement, 'settled');
    assert.equal(zero.payment_transaction, null, 'nothing went on chain');
    const failedUpstream = answerWith(503, { 'content-type': 'application/json', 'x-usage-cost': '999' }, '{}');
    const free = await settledInvocation(
      token,
      agentId,
      await paidCall(pay, agentId, 'streaming', failedUpstream, 503),
    );
    assert.equal(free.payment_charge, '0');
    assert.equal(free.payment_transaction, null);
    assert.equal(await balanceOf(provider, payer.address), before);

    const over = answerWith(200, { 'content-type': 'application/json', 'x-usage-cost': '999999999' }, '{}');
    const capped = await settledInvocation(token, agentId, await paidCall(pay, agentId, 'transactional', over));
    assert.equal(capped.payment_charge, String(MAX));
    assert.equal(capped.payment_settlement, 'settled');
    assert.equal(await balanceOf(provider, payer.address), before - MAX);
  });

  it('a payer that moves its funds during the call leaves the charge failed, the seller’s loss recorded with why', async () => {
    const agentId = await meteredAgent(HEADER_METER, newPayTo());
    const payer = await uptoPayer(provider, 10_000_000n);
    const elsewhere = Wallet.createRandom().address;
    // The upstream answers once the payer has emptied its wallet: the charge comes after.
    const drained: Answer = async (_req, res) => {
      const token = tokenContract(stack().infra.tokenAddress, payer);
      const all = (await token.balanceOf(payer.address)) as bigint;
      await (await token.transfer(elsewhere, all)).wait();
      answerWith(200, { 'content-type': 'application/json', 'x-usage-cost': '500' }, '{}')(_req, res);
    };
    const done = await settledInvocation(
      token,
      agentId,
      await paidCall(uptoFetch(payer), agentId, 'transactional', drained),
    );
    assert.equal(done.payment_charge, '500');
    assert.equal(done.payment_settlement, 'failed');
    assert.equal(done.payment_settle_error, 'payer_balance_short');
    assert.equal(done.payment_transaction, null);
  });

  it('a streamed answer ends with the PAYMENT-RESPONSE trailer for a client that sent TE: trailers', async () => {
    const agentId = await meteredAgent(HEADER_METER, newPayTo());
    const payer = await uptoPayer(provider, 10_000_000n);
    const key = randomUUID();
    answers.set(key, answerWith(200, { 'content-type': 'text/event-stream', 'x-usage-cost': '321' }, 'data: {}\n\n'));
    const path = `/v1/proxy/${agentId}/stream`;
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-answer': key };
    const challenge = await fetch(`${stack().apiUrl}${path}`, { method: 'POST', headers, body: '{}' });
    assert.equal(challenge.status, 402);
    const required = JSON.parse(Buffer.from(challenge.headers.get('payment-required')!, 'base64').toString('utf8'));
    const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
    const answer = await new Promise<{ status: number; trailer: string | undefined; declared: unknown; body: string }>(
      (resolve, reject) => {
        const req = httpRequest(
          `${stack().apiUrl}${path}`,
          { method: 'POST', headers: { ...headers, te: 'trailers', 'payment-signature': encodeBase64Json(wire) } },
          (res) => {
            void readAll(res).then(
              (body) =>
                resolve({
                  status: res.statusCode ?? 0,
                  trailer: res.trailers['payment-response'],
                  declared: res.headers.trailer,
                  body: body.toString(),
                }),
              reject,
            );
          },
        );
        req.on('error', reject);
        req.end('{}');
      },
    );
    assert.equal(answer.status, 200);
    assert.equal(answer.body, 'data: {}\n\n');
    assert.equal(String(answer.declared).toLowerCase(), 'payment-response');
    assert.ok(answer.trailer, 'the trailer is sent');
    const receipt = JSON.parse(Buffer.from(answer.trailer, 'base64').toString('utf8'));
    assert.equal(receipt.success, true);
    assert.match(receipt.transaction, /^0x[0-9a-f]{64}$/);
    assert.equal(receipt.payer.toLowerCase(), payer.address.toLowerCase());
  });
});
