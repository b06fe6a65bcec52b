// A public A2A agent priced `batch-settlement` (payment channels), paid the way the x402 A2A
// transport says: @a2a-js/sdk's unmodified client activates the extension, an unpaid message is
// answered with an input-required task carrying the PaymentRequired, and the paying message
// carries the PaymentPayload the unmodified reference client builds (@x402/core's x402Client with
// @x402/evm's BatchSettlementEvmScheme, reading the stack's chain). No x402 A2A client is
// published, so the answers are handed back to the client's scheme as the x402 reference MCP
// client does with its transport's: the SettleResponse of `x402.payment.receipts`, or the
// PaymentRequired of an input-required task, to `handlePaymentResponse`. One deposit, then
// vouchers on one channel; a forged voucher fails before the agent; a client that forgot its
// channel is asked for the payment again (the corrective answer: input-required on a new payment
// task that keeps the message), recovers and pays it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Message, SendMessageRequest, StreamResponse, Task } from '@a2a-js/sdk';
import { Client, ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { x402HTTPClient } from '@x402/core/client';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import type { PaymentRequired, SettleResponse } from '@x402/core/types';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { withPayingTenant, type PayingTenant } from '../support/settling.ts';
import { channelBuyer, forgedVoucher, handBack } from '../support/batch-settlement.ts';
import { balanceOf, newPayTo, newPayer } from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';

const EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';
const PRICE = 1_000n;
const DEPOSIT = 20_000n;

type Json = Record<string, any>;

const activating: typeof fetch = (input, init) => {
  const headers = new Headers(init?.headers);
  headers.set('X-A2A-Extensions', EXTENSION);
  return fetch(input, { ...init, headers });
};

const send = (text: string, extra: Json = {}) =>
  SendMessageRequest.fromJSON({ message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra } });

const resultJson = (result: Message | Task) =>
  ('messageId' in result ? Message.toJSON(result) : Task.toJSON(result)) as Json;

const paying = (taskId: string | undefined, payload: unknown) => ({
  ...(taskId ? { taskId } : {}),
  metadata: { 'x402.payment.status': 'payment-submitted', 'x402.payment.payload': payload },
});

/** A streamed send's events, as JSON. */
async function streamedEvents(client: Client, request: SendMessageRequest): Promise<Json[]> {
  const events: Json[] = [];
  for await (const event of client.sendMessageStream(request)) events.push(StreamResponse.toJSON(event) as Json);
  return events;
}

/** The metadata of a task's status message. */
const metaOf = (task: Json) => task.status.message.metadata as Json;

describe('public A2A agents paid from a payment channel (batch-settlement) through the x402 A2A transport', function () {
  this.timeout(240_000);
  let paying_: PayingTenant;
  let upstream: A2aUpstream;
  let gateway: ExtraGateway;
  withPayingTenant('a2a-channels', (p) => (paying_ = p));

  before(async () => {
    // Every unpaid message here takes a challenge token: a replica whose buckets do not run dry.
    const limits = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000, payerRps: 1000 };
    gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...limits } });
    upstream = await startA2aServer();
  });
  after(async () => {
    await gateway.close();
    await upstream.close();
  });

  async function channelAgent() {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token: paying_.token,
      json: {
        name: uniqueName('a2a-channel'),
        protocol: 'a2a',
        upstream_url: upstream.url,
        pricing: {
          scheme: 'batch-settlement',
          amount: String(PRICE),
          asset: 'USDC',
          network: 'base',
          pay_to: payTo,
          min_deposit: String(DEPOSIT),
          withdraw_delay: 900,
        },
        public: true,
        public_description: 'Echoes text over A2A, paid from a channel',
      },
    });
    assert.equal(created.status, 201, created.text);
    const url = (created.json.public_url as string).replace(stack().apiUrl, gateway.url);
    const client: Client = await new ClientFactory({
      transports: [new JsonRpcTransportFactory({ fetchImpl: activating })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: activating }),
    }).createFromUrl(`${url}/`);
    return { id: created.json.id as string, url, client };
  }

  const reached = (marker: string) => upstream.bodies.filter((b) => JSON.stringify(b).includes(marker));

  /** The channel as GET /v1/channels/{id} shows it, once its charged total is `charged`. */
  const channelCharged = (channelId: string, charged: bigint) =>
    waitFor(
      async () => {
        const res = await call('GET', `/v1/channels/${channelId}`, { token: paying_.token });
        return res.status === 200 && res.json.charged_cumulative === String(charged) && res.json;
      },
      { timeoutMs: 30_000, what: `channel ${channelId} charged ${charged}` },
    );

  it('one deposit, then vouchers, sent and streamed: each answer carries the channel state in its receipt', async () => {
    const { client, url } = await channelAgent();
    const payer = await newPayer(1_000_000n);
    const buyer = channelBuyer(payer.privateKey);
    let channelId = '';
    for (let i = 1; i <= 4; i++) {
      const marker = `echo channel ${i} ${randomUUID()}`;
      const streamed = i % 2 === 0;
      // The paying message uses the method of the message it pays for.
      const unpaid = streamed
        ? (await streamedEvents(client, send(marker)))[0]!.task
        : resultJson(await client.sendMessage(send(marker)));
      assert.equal(unpaid.status.state, 'TASK_STATE_INPUT_REQUIRED', JSON.stringify(unpaid));
      const required = PaymentRequiredV2Schema.parse(metaOf(unpaid)['x402.payment.required']) as PaymentRequired;
      assert.equal(required.accepts[0]!.scheme, 'batch-settlement');
      const payload = await buyer.createPaymentPayload(required);
      assert.equal((payload.payload as { type: string }).type, i === 1 ? 'deposit' : 'voucher');

      let answer: Json;
      let last: Json;
      if (streamed) {
        const events = await streamedEvents(client, send('Here is the payment.', paying(unpaid.id, payload)));
        answer = (events[0]!.task ?? events[0]!.statusUpdate) as Json;
        last = (events.at(-1)!.statusUpdate ?? events.at(-1)!.task) as Json;
      } else {
        answer = resultJson(await client.sendMessage(send('Here is the payment.', paying(unpaid.id, payload))));
        last = answer;
      }
      assert.equal(last.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(answer));
      assert.equal(last.status.message.parts[0].text, `echo: ${marker}`, 'the first message ran');
      assert.equal(metaOf(answer)['x402.payment.status'], 'payment-completed');
      const [receipt] = metaOf(answer)['x402.payment.receipts'] as Json[];
      assert.equal(receipt.success, true);
      assert.equal(receipt.extra.chargedAmount, String(PRICE));
      assert.equal(receipt.extra.channelState.chargedCumulativeAmount, String(BigInt(i) * PRICE));
      if (i === 1) {
        assert.equal(receipt.amount, String(DEPOSIT));
        channelId = receipt.extra.channelState.channelId;
      } else assert.equal(receipt.transaction, '', 'a voucher moves nothing');
      await handBack(buyer, payload, { settleResponse: receipt as SettleResponse });
      assert.equal(reached(marker).length, 1);
    }

    // The transactional URL too: a 202 whose PAYMENT-RESPONSE carries the state, kept by the client
    // as @x402/fetch keeps it, and its next voucher is served.
    const unpaid = resultJson(await client.sendMessage(send('echo asking the price')));
    const required = metaOf(unpaid)['x402.payment.required'] as PaymentRequired;
    const payload = await buyer.createPaymentPayload(required);
    const marker = `echo transactional ${randomUUID()}`;
    const accepted = await callAt(gateway.url, 'POST', new URL(url).pathname, {
      json: {
        jsonrpc: '2.0',
        id: 1,
        method: 'SendMessage',
        params: SendMessageRequest.toJSON(send(marker, paying(undefined, payload))),
      },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(accepted.status, 202, accepted.text);
    const outcome = await new x402HTTPClient(buyer).processPaymentResult(
      payload,
      (name) => accepted.headers[name.toLowerCase()] as string,
      202,
    );
    assert.equal((outcome.settleResponse?.extra?.channelState as Json).chargedCumulativeAmount, String(5n * PRICE));
    await waitFor(async () => reached(marker).length === 1, { timeoutMs: 30_000, what: 'the transactional run' });
    const next = await buyer.createPaymentPayload(required);
    const served = resultJson(await client.sendMessage(send('echo after', paying(undefined, next))));
    assert.equal(served.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(served));

    await channelCharged(channelId, 6n * PRICE);
    assert.equal(await balanceOf(paying_.provider, payer.address), 1_000_000n - DEPOSIT, 'one deposit moved');
    assert.ok(!JSON.stringify(upstream.bodies).includes('x402.payment'), 'no payment reached the agent');
  });

  it('a forged voucher fails before the agent; a client that forgot its channel is asked again, on a new payment task keeping the message, and recovers', async () => {
    const { client } = await channelAgent();
    const payer = await newPayer(1_000_000n);
    const buyer = channelBuyer(payer.privateKey);
    const ask = async (text: string) => {
      const unpaid = resultJson(await client.sendMessage(send(text)));
      return { task: unpaid, required: metaOf(unpaid)['x402.payment.required'] as PaymentRequired };
    };
    const paidEcho = async (text: string) => {
      const asked = await ask(text);
      const payload = await buyer.createPaymentPayload(asked.required);
      const done = resultJson(await client.sendMessage(send('paying', paying(asked.task.id, payload))));
      const [receipt] = metaOf(done)['x402.payment.receipts'] as Json[];
      await handBack(buyer, payload, { settleResponse: receipt as SettleResponse });
      return receipt.extra.channelState.channelId as string;
    };
    // A deposit, then a voucher: the process now holds the channel between calls, and checks a
    // voucher's signature as its call's row is written.
    const channelId = await paidEcho('echo opening');
    await paidEcho('echo holding');
    const [hold] = await stack()
      .orm.em.getConnection()
      .execute<Array<{ held: boolean }>>(`select busy_until is not null as held from channels where id = ?`, [
        channelId,
      ]);
    assert.equal(hold?.held, true, 'held by the process between calls');

    const forgedMarker = `echo forged ${randomUUID()}`;
    const asked = await ask(forgedMarker);
    const refused = resultJson(
      await client.sendMessage(
        send('paying', paying(asked.task.id, forgedVoucher(await buyer.createPaymentPayload(asked.required)))),
      ),
    );
    assert.equal(refused.status.state, 'TASK_STATE_FAILED', JSON.stringify(refused));
    assert.equal(metaOf(refused)['x402.payment.status'], 'payment-failed');
    assert.equal(metaOf(refused)['x402.payment.error'], 'INVALID_PAYMENT');
    assert.equal(reached(forgedMarker).length, 0, 'nothing reached the agent');

    const keptTasks = async (taskId?: string) =>
      Number(
        (
          await stack()
            .orm.em.getConnection()
            .execute<Array<{ n: string }>>(
              `select count(*)::text as n from a2a_payment_tasks where expires_at > now() and (?::text is null or task_id = ?)`,
              [taskId ?? null, taskId ?? null],
            )
        )[0]!.n,
      );
    // Forgetful, paying the payment task it was given, then paying a message as it sends it.
    for (const viaTask of [true, false]) {
      const fresh = channelBuyer(payer.privateKey);
      const marker = `echo recovered ${viaTask} ${randomUUID()}`;
      const first = viaTask ? await ask(marker) : await ask('echo asking the price');
      const lost = await fresh.createPaymentPayload(first.required);
      const sent = viaTask ? send('paying', paying(first.task.id, lost)) : send(marker, paying(undefined, lost));
      const keptBefore = await keptTasks();
      const again = resultJson(await client.sendMessage(sent));
      assert.equal(again.status.state, 'TASK_STATE_INPUT_REQUIRED', JSON.stringify(again));
      // Paying a task, the task its refused payment took moves to the new id (one row, the old id
      // gone); paid as sent, the message is kept anew.
      assert.equal(await keptTasks(), keptBefore + (viaTask ? 0 : 1), 'the payment tasks kept');
      if (viaTask) assert.equal(await keptTasks(first.task.id), 0, 'the taken task moved');
      assert.equal(metaOf(again)['x402.payment.status'], 'payment-required');
      assert.notEqual(again.id, first.task.id, 'a new payment task');
      const corrective = PaymentRequiredV2Schema.parse(metaOf(again)['x402.payment.required']) as PaymentRequired;
      assert.equal(corrective.error, 'invalid_batch_settlement_evm_cumulative_amount_mismatch');
      const extra = corrective.accepts[0]!.extra as Json;
      assert.equal(extra.channelState.channelId, channelId);
      assert.ok(extra.voucherState, "the payer's latest voucher");
      assert.equal(reached(marker).length, 0, 'not run yet');

      assert.equal(await handBack(fresh, lost, { paymentRequired: corrective }), true, 'the scheme recovered');
      const repaid = await fresh.createPaymentPayload(corrective);
      const done = resultJson(await client.sendMessage(send('paying again', paying(again.id, repaid))));
      assert.equal(done.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(done));
      assert.equal(done.status.message.parts[0].text, `echo: ${marker}`, 'the kept message ran');
      assert.equal(metaOf(done)['x402.payment.status'], 'payment-completed');
      assert.equal(reached(marker).length, 1, 'run once');
    }
    await channelCharged(channelId, 4n * PRICE);
    assert.equal(await balanceOf(paying_.provider, payer.address), 1_000_000n - DEPOSIT, 'no second deposit');
  });
});
