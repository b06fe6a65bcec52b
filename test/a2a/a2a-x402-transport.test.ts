// A public A2A agent paid the way the x402 A2A transport says (docs/API.md "A2A agents", "Selling
// an agent to any x402 client"), on the real stack: @a2a-js/sdk's own client, unmodified, reads
// the public card and activates the extension with the `X-A2A-Extensions` header its fetch adds.
// An unpaid message is answered with an `input-required` task carrying the PaymentRequired; the
// paying message names that task and carries the PaymentPayload in its metadata, and the agent
// (an @a2a-js/sdk server, test/support/a2a-server.ts) runs the FIRST message, never sees a
// payment, and its answer carries the receipt.
// No x402 A2A client is published, so the test builds the PaymentPayload as one would: @x402/core's
// x402Client with @x402/evm's ExactEvmScheme (test/support/x402.ts v2PayerClient), from the
// PaymentRequired of the task.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import net, { type AddressInfo } from 'node:net';
import { getAddress } from 'ethers';
import { Message, SendMessageRequest, StreamResponse, Task } from '@a2a-js/sdk';
import { Client, ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { LegacyJsonRpcTransport } from '@a2a-js/sdk/compat/v0_3/client';
import { PaymentRequiredV2Schema } from '@x402/core/schemas';
import { stack } from '../support/stack.ts';
import { createPaymentTasks } from '../../gateway/a2a/payment-tasks.ts';
import { queryRows } from '../../gateway/db/orm.ts';
import { call, callAt, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { waitFor } from '../support/wait.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
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

const EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';
const PRICE = 1_000n;

type Json = Record<string, any>;

/** fetch that activates the extension on every request, and keeps the answers' headers. */
function activating(seen: Headers[]): typeof fetch {
  return async (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('X-A2A-Extensions', EXTENSION);
    const res = await fetch(input, { ...init, headers });
    seen.push(res.headers);
    return res;
  };
}

async function clientAt(publicUrl: string, fetchImpl: typeof fetch): Promise<Client> {
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  });
  return factory.createFromUrl(`${publicUrl}/`);
}

const send = (text: string, extra: Json = {}) =>
  SendMessageRequest.fromJSON({ message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra } });

/** The same request as JSON, for a request written by hand. */
const sendJson = (text: string, extra: Json = {}) => SendMessageRequest.toJSON(send(text, extra));

/** A send's result as JSON: a Task (`id`, `status`) or a Message. */
function resultJson(result: Message | Task): Json {
  return ('messageId' in result ? Message.toJSON(result) : Task.toJSON(result)) as Json;
}

const paying = (taskId: string | undefined, payload: unknown) => ({
  ...(taskId ? { taskId } : {}),
  metadata: { 'x402.payment.status': 'payment-submitted', 'x402.payment.payload': payload },
});

describe('public A2A agents: the x402 A2A transport', function () {
  this.timeout(180_000);
  let upstream: A2aUpstream;
  let provider: ReturnType<typeof chainProvider>;
  let account: TestAccount;
  let token: string;
  // A replica of its own whose unpaid buckets do not run dry: every unpaid request here (card
  // reads, payment-required answers, refused payments) takes a challenge token, and the stack's
  // client bucket is shared with every other test calling from 127.0.0.1.
  let gateway: ExtraGateway;

  before(async () => {
    const limits = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000 };
    gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...limits } });
    upstream = await startA2aServer();
    provider = chainProvider();
    account = await newAccount(`a2a-x402-${randomUUID()}`);
    token = await settlingTenant(`tenant-a2a-x402-${randomUUID()}`, account);
  });
  after(async () => {
    await gateway.close();
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  /** A public agent of the test's tenant (or `of`'s), priced PRICE (and `pricing` beside). */
  async function publicAgent(payTo = newPayTo(), { of = token, pricing = {} as Json } = {}) {
    const created = await call('POST', '/v1/agents', {
      token: of,
      json: {
        name: uniqueName('a2a-x402'),
        protocol: 'a2a',
        upstream_url: upstream.url,
        pricing: { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo, ...pricing },
        public: true,
        public_description: 'Echoes text over A2A',
        capture_body: true,
      },
    });
    assert.equal(created.status, 201, created.text);
    const url = (created.json.public_url as string).replace(stack().apiUrl, gateway.url);
    return { id: created.json.id as string, url, path: new URL(url).pathname, payTo };
  }

  /** The upstream's requests since `from` that carry `marker`. */
  const reached = (from: number, marker: string) =>
    upstream.bodies.slice(from).filter((b) => JSON.stringify(b).includes(marker));

  it('the card declares the extension; unpaid: input-required; the paying message runs the first one, with the receipt', async () => {
    const agent = await publicAgent();
    const card = await callAt(gateway.url, 'GET', `${agent.path}/.well-known/agent-card.json`);
    assert.equal(card.status, 200, card.text);
    assert.deepEqual(
      card.json.capabilities.extensions.find((e: Json) => e.uri === EXTENSION),
      { uri: EXTENSION, description: card.json.capabilities.extensions[0].description, required: false },
    );
    assert.equal(card.json.securitySchemes, undefined, 'no scheme of the upstream, no token');
    assert.ok(card.json.supportedInterfaces.every((i: Json) => i.url === `${agent.url}/stream`));
    assert.ok(!card.text.includes(new URL(upstream.url).host), 'nothing of the upstream');

    const seen: Headers[] = [];
    const client = await clientAt(agent.url, activating(seen));
    const payer = await newPayer(1_000_000n);
    const buyer = v2PayerClient(payer);
    const first = `echo first ${randomUUID()}`;
    const from = upstream.bodies.length;
    const fromSeen = upstream.seen.length;

    const unpaid = resultJson(await client.sendMessage(send(first)));
    assert.equal(unpaid.status.state, 'TASK_STATE_INPUT_REQUIRED', JSON.stringify(unpaid));
    assert.equal(seen.at(-1)!.get('x-a2a-extensions'), EXTENSION, 'the activation is echoed');
    const metadata = unpaid.status.message.metadata as Json;
    assert.equal(metadata['x402.payment.status'], 'payment-required');
    const required = PaymentRequiredV2Schema.parse(metadata['x402.payment.required']);
    assert.equal(required.accepts[0].amount, String(PRICE));
    assert.equal(getAddress(required.accepts[0].payTo), agent.payTo);
    assert.ok(required.extensions?.bazaar, 'the bazaar extension, as for MCP');
    assert.equal(reached(from, first).length, 0, 'nothing reached the upstream unpaid');

    const payload = await buyer.createPaymentPayload(required as Parameters<typeof buyer.createPaymentPayload>[0]);
    const paid = resultJson(await client.sendMessage(send('Here is the payment.', paying(unpaid.id, payload))));
    assert.equal(paid.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(paid));
    assert.equal(paid.status.message.parts[0].text, `echo: ${first}`, 'the first message is what ran');
    const paidMeta = paid.status.message.metadata as Json;
    assert.equal(paidMeta['x402.payment.status'], 'payment-completed');
    const [receipt] = paidMeta['x402.payment.receipts'] as Json[];
    assert.equal(receipt.success, true);
    assert.equal(getAddress(receipt.payer), payer.address);

    const forwarded = upstream.bodies.slice(from);
    assert.equal(reached(from, first).length, 1, JSON.stringify(forwarded));
    assert.ok(!JSON.stringify(forwarded).includes('Here is the payment'), "the paying message's text is not run");
    assert.ok(!JSON.stringify(forwarded).includes('x402.payment'), 'no payment reached the upstream');
    assert.ok(!JSON.stringify(forwarded).includes(unpaid.id), "the gateway's payment task id is not forwarded");
    assert.ok(
      !JSON.stringify(upstream.seen.slice(fromSeen)).includes(EXTENSION),
      'the agent is never told the extension is active (the gateway answers it)',
    );
    const transfers = await transfersTo(provider, agent.payTo);
    assert.deepEqual(transfers, [{ hash: receipt.transaction, value: PRICE }]);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE);

    // Used: the same paying message again pays nothing and runs nothing (its payment is used).
    const again = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: { jsonrpc: '2.0', id: 7, method: 'SendMessage', params: sendJson('again', paying(unpaid.id, payload)) },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.result.task.status.state, 'TASK_STATE_FAILED', again.text);
    assert.equal(again.json.result.task.status.message.metadata['x402.payment.error'], 'PAYMENT_ALREADY_USED');
    assert.equal(reached(from, first).length, 1, 'not run again');
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE);
  });

  it('two payments for one payment task at the same moment: one runs and is charged, the other is a 404 and never charged', async () => {
    const agent = await publicAgent();
    const headers = { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION };
    const first = `echo raced ${randomUUID()}`;
    const from = upstream.bodies.length;
    const unpaid = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson(first) },
      headers,
    });
    assert.equal(unpaid.status, 200, unpaid.text);
    const task = unpaid.json.result.task as Json;
    const required = PaymentRequiredV2Schema.parse(task.status.message.metadata['x402.payment.required']);
    const payers = [await newPayer(1_000_000n), await newPayer(1_000_000n)];
    const payloads = await Promise.all(
      payers.map((p) => {
        const buyer = v2PayerClient(p);
        return buyer.createPaymentPayload(required as Parameters<typeof buyer.createPaymentPayload>[0]);
      }),
    );
    const answers = await Promise.all(
      payloads.map((payload, i) =>
        callAt(gateway.url, 'POST', `${agent.path}/stream`, {
          json: {
            jsonrpc: '2.0',
            id: 2 + i,
            method: 'SendMessage',
            params: sendJson('paying', paying(task.id, payload)),
          },
          headers,
        }),
      ),
    );
    const statuses = answers.map((a) => a.status).sort();
    assert.deepEqual(statuses, [200, 404], answers.map((a) => a.text).join('\n'));
    const winner = answers.findIndex((a) => a.status === 200);
    assert.equal(answers[winner].json.result.task.status.state, 'TASK_STATE_COMPLETED', answers[winner].text);
    assert.equal(reached(from, first).length, 1, 'the first message ran once');
    assert.equal(await balanceOf(provider, payers[winner].address), 1_000_000n - PRICE);
    assert.equal(await balanceOf(provider, payers[1 - winner].address), 1_000_000n, 'the other payer paid nothing');
    assert.equal((await transfersTo(provider, agent.payTo)).length, 1);
  });

  it('a self-contained paid message runs; the same payment again pays nothing; a forged or unfunded one fails before the upstream', async () => {
    const agent = await publicAgent();
    const client = await clientAt(agent.url, activating([]));
    const payer = await newPayer(1_000_000n);
    const buyer = v2PayerClient(payer);
    const unpaid = resultJson(await client.sendMessage(send('echo asking the price')));
    const required = unpaid.status.message.metadata['x402.payment.required'];
    const payload = await buyer.createPaymentPayload(required);
    const from = upstream.bodies.length;

    const marker = `echo self ${randomUUID()}`;
    const paid = resultJson(await client.sendMessage(send(marker, paying(undefined, payload))));
    assert.equal(paid.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(paid));
    assert.equal(paid.status.message.parts[0].text, `echo: ${marker}`);
    assert.equal(paid.status.message.metadata['x402.payment.status'], 'payment-completed');

    const twice = resultJson(await client.sendMessage(send(`${marker} twice`, paying(undefined, payload))));
    assert.equal(twice.status.state, 'TASK_STATE_FAILED', JSON.stringify(twice));
    const twiceMeta = twice.status.message.metadata;
    assert.equal(twiceMeta['x402.payment.status'], 'payment-failed');
    assert.equal(twiceMeta['x402.payment.error'], 'PAYMENT_ALREADY_USED');
    assert.deepEqual(twiceMeta['x402.payment.receipts'], [
      { success: false, errorReason: 'payment already used', network: required.accepts[0].network, transaction: '' },
    ]);
    assert.equal(reached(from, marker).length, 1, 'the message ran once');
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE, 'paid once');

    // A forged signature: refused before any settlement, the upstream never called.
    const forged = structuredClone(await buyer.createPaymentPayload(required)) as Json;
    forged.payload.signature = `0x${'11'.repeat(65)}`;
    const forgedMarker = `echo forged ${randomUUID()}`;
    const refused = resultJson(await client.sendMessage(send(forgedMarker, paying(undefined, forged))));
    assert.equal(refused.status.state, 'TASK_STATE_FAILED');
    assert.equal(refused.status.message.metadata['x402.payment.error'], 'INVALID_PAYMENT');

    // Signed by a payer with no USDC: the facilitator refuses it.
    const broke = v2PayerClient(await newPayer(0n));
    const brokeMarker = `echo broke ${randomUUID()}`;
    const unfunded = resultJson(
      await client.sendMessage(send(brokeMarker, paying(undefined, await broke.createPaymentPayload(required)))),
    );
    assert.equal(unfunded.status.state, 'TASK_STATE_FAILED', JSON.stringify(unfunded));
    assert.equal(unfunded.status.message.metadata['x402.payment.status'], 'payment-failed');
    assert.equal(unfunded.status.message.metadata['x402.payment.error'], 'SETTLEMENT_FAILED');
    assert.equal(reached(from, forgedMarker).length + reached(from, brokeMarker).length, 0);
  });

  it("no payment key reaches the agent: other casings, and the request's own params.metadata, are stripped too", async () => {
    const agent = await publicAgent();
    const client = await clientAt(agent.url, activating([]));
    const unpaid = resultJson(await client.sendMessage(send('echo asking the price')));
    const required = unpaid.status.message.metadata['x402.payment.required'];
    const payload = await v2PayerClient(await newPayer(1_000_000n)).createPaymentPayload(required);
    const marker = `echo casings ${randomUUID()}`;
    const from = upstream.bodies.length;
    const params = sendJson(marker, {
      metadata: {
        'x402.payment.payload': payload,
        'X402.Payment.Payload': payload,
        'X402.PAYMENT.STATUS': 'payment-submitted',
        kept: 'yes',
      },
    });
    const paid = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: {
        jsonrpc: '2.0',
        id: 1,
        method: 'SendMessage',
        params: {
          ...(params as Json),
          metadata: { 'x402.payment.payload': payload, 'x402.Payment.Receipts': [], also: 1 },
        },
      },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(paid.status, 200, paid.text);
    assert.equal(paid.json.result.task.status.state, 'TASK_STATE_COMPLETED', paid.text);
    const [forwarded] = reached(from, marker) as Json[];
    assert.ok(forwarded, 'the message ran');
    assert.ok(!JSON.stringify(forwarded).toLowerCase().includes('x402.payment'), JSON.stringify(forwarded));
    assert.deepEqual(forwarded.params.message.metadata, { kept: 'yes' }, 'other metadata passes');
    assert.deepEqual(forwarded.params.metadata, { also: 1 });
  });

  it("a paying message must use the kept message's method: the kept message never runs at another method's price", async () => {
    const { path } = await publicAgent(newPayTo(), {
      pricing: { methods: { SendMessage: String(5n * PRICE), SendStreamingMessage: String(PRICE) } },
    });
    const headers = { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION };
    const marker = `echo dear ${randomUUID()}`;
    const asked = await callAt(gateway.url, 'POST', `${path}/stream`, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson(marker) },
      headers,
    });
    assert.equal(asked.status, 200, asked.text);
    const task = asked.json.result.task as Json;
    const required = PaymentRequiredV2Schema.parse(task.status.message.metadata['x402.payment.required']);
    assert.equal(required.accepts[0].amount, String(5n * PRICE));
    // Signed for the streaming method's lower price, sent as a streaming message naming the task.
    const cheap = { ...required, accepts: [{ ...required.accepts[0], amount: String(PRICE) }] };
    const payer = await newPayer(1_000_000n);
    const buyer = v2PayerClient(payer);
    const payload = await buyer.createPaymentPayload(cheap as Parameters<typeof buyer.createPaymentPayload>[0]);
    const from = upstream.bodies.length;
    const switched = await callAt(gateway.url, 'POST', `${path}/stream`, {
      json: {
        jsonrpc: '2.0',
        id: 2,
        method: 'SendStreamingMessage',
        params: sendJson('paying', paying(task.id, payload)),
      },
      headers,
    });
    assert.equal(switched.status, 400, switched.text);
    assert.match(switched.json.error, /method of the message it pays for/);
    assert.equal(reached(from, marker).length, 0, 'the kept message did not run');
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n, 'nothing paid');
  });

  it('a payment whose settlement is not known yet keeps its payment task: the same message resumes it, charged once; another payment is a 404', async () => {
    // A tenant whose facilitator does not answer (a closed port): a settle's outcome is unknown.
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const deadUrl = new URL(stack().facilitator.url);
    deadUrl.port = String((closed.address() as AddressInfo).port);
    await new Promise((resolve) => closed.close(resolve));
    const tenantToken = await settlingTenant(`tenant-a2a-x402-dead-${randomUUID()}`, account, deadUrl.href);
    const { path } = await publicAgent(newPayTo(), { of: tenantToken });
    const headers = { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION };
    const marker = `echo settling ${randomUUID()}`;
    const asked = await callAt(gateway.url, 'POST', `${path}/stream`, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson(marker) },
      headers,
    });
    assert.equal(asked.status, 200, asked.text);
    const task = asked.json.result.task as Json;
    const required = task.status.message.metadata['x402.payment.required'];
    const payer = await newPayer(1_000_000n);
    const payload = await v2PayerClient(payer).createPaymentPayload(required);
    const from = upstream.bodies.length;
    const pay = (id: number, with_: unknown) =>
      callAt(gateway.url, 'POST', `${path}/stream`, {
        json: { jsonrpc: '2.0', id, method: 'SendMessage', params: sendJson('paying', paying(task.id, with_)) },
        headers,
      });

    const unknown = await pay(2, payload);
    assert.equal(unknown.status, 503, unknown.text);
    const retried = await pay(3, payload);
    assert.equal(retried.status, 503, `the same payment still finds its task: ${retried.text}`);
    const other = await newPayer(1_000_000n);
    const another = await pay(4, await v2PayerClient(other).createPaymentPayload(required));
    assert.equal(another.status, 404, another.text);

    // The facilitator answers again: the same message gets the run, charged once.
    const current = await call('GET', '/v1/settlement/config', { token: tenantToken });
    const config = await call('PUT', '/v1/settlement/config', {
      token: tenantToken,
      json: {
        facilitator_url: stack().facilitator.url,
        facilitator_credential_ref: current.json.facilitator_credential_ref,
      },
    });
    assert.ok([200, 201].includes(config.status), config.text);
    const paid = await pay(5, payload);
    assert.equal(paid.status, 200, paid.text);
    assert.equal(paid.json.result.task.status.state, 'TASK_STATE_COMPLETED', paid.text);
    assert.equal(reached(from, marker).length, 1, 'the kept message ran once');
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - PRICE);
    assert.equal(await balanceOf(provider, other.address), 1_000_000n);
  });

  it("refuses a payment task on another agent, expired or declined, bounds what an unpaid message may keep, and leaves HTTP 402 to clients that don't activate", async () => {
    const agent = await publicAgent();
    const other = await publicAgent();
    const client = await clientAt(agent.url, activating([]));
    const unpaid = resultJson(await client.sendMessage(send('echo for the first agent')));
    const required = unpaid.status.message.metadata['x402.payment.required'];
    const payer = await newPayer(1_000_000n);
    const payload = await v2PayerClient(payer).createPaymentPayload(required);
    const elsewhere = await callAt(gateway.url, 'POST', `${other.path}/stream`, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson('pay here', paying(unpaid.id, payload)) },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(elsewhere.status, 404, elsewhere.text);
    assert.deepEqual(elsewhere.json, { error: 'payment task not found through this agent' });
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n, 'nothing paid');

    // Expired (its requirement's maxTimeoutSeconds passed): refused, nothing paid.
    await stack()
      .orm.em.fork()
      .getConnection()
      .execute(`update a2a_payment_tasks set expires_at = now() - interval '1 second' where task_id = ?`, [unpaid.id]);
    const expired = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson('pay late', paying(unpaid.id, payload)) },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(expired.status, 404, expired.text);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n, 'nothing paid');

    const kept = () =>
      stack()
        .orm.em.fork()
        .getConnection()
        .execute<Array<{ n: string }>>('select count(*) as n from a2a_payment_tasks where agent_id = ?', [agent.id]);
    const before = Number((await kept())[0].n);
    const oversize = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: { jsonrpc: '2.0', id: 2, method: 'SendMessage', params: sendJson(`echo ${'x'.repeat(70 * 1024)}`) },
      headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(oversize.status, 413, oversize.text);
    assert.equal(Number((await kept())[0].n), before, 'nothing kept');

    // Without the extension: the HTTP 402 challenge as before, nothing kept.
    const plain = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: { jsonrpc: '2.0', id: 3, method: 'SendMessage', params: sendJson('echo plain') },
      headers: { 'a2a-version': '1.0' },
    });
    assert.equal(plain.status, 402, plain.text);
    assert.ok(plain.headers['payment-required']);
    assert.equal(plain.headers['x-a2a-extensions'], undefined);
    assert.equal(Number((await kept())[0].n), before);

    // The 0.3 spelling gets the 0.3 shape.
    const legacy = await callAt(gateway.url, 'POST', `${agent.path}/stream`, {
      json: {
        jsonrpc: '2.0',
        id: 'l',
        method: 'message/send',
        params: { message: { kind: 'message', messageId: 'm', role: 'user', parts: [{ kind: 'text', text: 'echo' }] } },
      },
      headers: { 'x-a2a-extensions': EXTENSION },
    });
    assert.equal(legacy.status, 200, legacy.text);
    assert.equal(legacy.json.result.kind, 'task');
    assert.equal(legacy.json.result.status.state, 'input-required');
    assert.equal(legacy.json.result.status.message.role, 'agent');
    assert.equal(legacy.json.result.status.message.metadata['x402.payment.status'], 'payment-required');

    // The client declines: the task fails with payment-rejected and its message is no longer kept.
    const decline = (id: string, metadata: Json) =>
      callAt(gateway.url, 'POST', `${agent.path}/stream`, {
        json: {
          jsonrpc: '2.0',
          id,
          method: 'message/send',
          params: {
            message: {
              kind: 'message',
              messageId: id,
              role: 'user',
              taskId: legacy.json.result.id,
              parts: [{ kind: 'text', text: 'no thanks' }],
              metadata,
            },
          },
        },
        headers: { 'x-a2a-extensions': EXTENSION },
      });
    // Declining and paying at once is refused, and declines nothing.
    const both = await decline('b', { 'x402.payment.status': 'payment-rejected', 'x402.payment.payload': payload });
    assert.equal(both.status, 400, both.text);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n, 'nothing paid');
    const declined = await decline('d', { 'x402.payment.status': 'payment-rejected' });
    assert.equal(declined.status, 200, declined.text);
    assert.equal(declined.json.result.id, legacy.json.result.id);
    assert.equal(declined.json.result.status.state, 'failed');
    assert.equal(declined.json.result.status.message.metadata['x402.payment.status'], 'payment-rejected');
    const late = await decline('e', { 'x402.payment.status': 'payment-submitted', 'x402.payment.payload': payload });
    assert.equal(late.status, 404, late.text);
  });

  it('a streaming message: the input-required task as one event, then the paid stream with the receipt', async () => {
    const agent = await publicAgent();
    const client = await clientAt(agent.url, activating([]));
    const payer = await newPayer(1_000_000n);
    const marker = `echo streamed ${randomUUID()}`;
    const asked: Json[] = [];
    for await (const event of client.sendMessageStream(send(marker))) asked.push(StreamResponse.toJSON(event) as Json);
    assert.equal(asked.length, 1, JSON.stringify(asked));
    const task = asked[0].task as Json;
    assert.equal(task.status.state, 'TASK_STATE_INPUT_REQUIRED');
    const required = task.status.message.metadata['x402.payment.required'];
    const payload = await v2PayerClient(payer).createPaymentPayload(required);

    const events: Json[] = [];
    for await (const event of client.sendMessageStream(send('paying', paying(task.id, payload))))
      events.push(StreamResponse.toJSON(event) as Json);
    const first = (events[0].task ?? events[0].statusUpdate) as Json;
    assert.equal(first.status.message.metadata['x402.payment.status'], 'payment-completed', JSON.stringify(events));
    const [receipt] = first.status.message.metadata['x402.payment.receipts'];
    assert.equal(receipt.success, true);
    const last = events.at(-1)!.statusUpdate as Json;
    assert.equal(last.status.state, 'TASK_STATE_COMPLETED');
    assert.equal(last.status.message.parts[0].text, `echo: ${marker}`);
    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: receipt.transaction, value: PRICE }]);
  });

  it("keeps at most a tenant's maximum of live payment tasks, and drops expired ones as it writes", async () => {
    const conn = stack().orm.em.fork().getConnection();
    const tasks = createPaymentTasks(queryRows(stack().orm), 2);
    const tenant = `tenant-a2a-x402-bound-${randomUUID()}`;
    const agentId = `agt_${randomUUID()}`;
    const task = (n: number) => ({
      taskId: `x402-payment-${randomUUID()}`,
      contextId: 'c',
      method: 'SendMessage',
      request: `{"n":${n}}`,
    });
    const [a, b, c] = [task(1), task(2), task(3)];
    assert.equal(await tasks.save(tenant, agentId, a, 60, 'client-a'), true);
    assert.equal(await tasks.save(tenant, agentId, b, 60, 'client-b'), true);
    assert.equal(await tasks.save(tenant, agentId, c, 60, 'client-c'), false, 'the tenant is full');
    assert.equal(await tasks.save(`${tenant}-other`, agentId, c, 60, 'client-c'), true, 'another tenant is not');
    assert.deepEqual(await tasks.find(agentId, a.taskId), a);
    assert.equal(await tasks.find(`agt_${randomUUID()}`, a.taskId), null, "another agent's id is not found");

    await conn.execute(`update a2a_payment_tasks set expires_at = now() - interval '1 second' where task_id = ?`, [
      a.taskId,
    ]);
    assert.equal(await tasks.find(agentId, a.taskId), null, 'expired');
    const d = task(4);
    assert.equal(await tasks.save(tenant, agentId, d, 60, 'client-d'), true, 'an expired task does not count');
    const left = await conn.execute<Array<{ task_id: string }>>(
      'select task_id from a2a_payment_tasks where task_id = ?',
      [a.taskId],
    );
    assert.deepEqual(left, [], 'the expired row went with the write');
    // And without any write: the purge each API runs every minute.
    await conn.execute(`update a2a_payment_tasks set expires_at = now() - interval '1 second' where task_id = ?`, [
      d.taskId,
    ]);
    assert.ok((await tasks.purgeExpired()) >= 1);
    assert.deepEqual(
      await conn.execute('select task_id from a2a_payment_tasks where task_id = ?', [d.taskId]),
      [],
      'the purge removed the expired row',
    );
    await tasks.remove(agentId, b.taskId);
    assert.equal(await tasks.find(agentId, b.taskId), null, 'used');
    await assert.rejects(
      tasks.save(tenant, agentId, { ...task(5), request: 'x'.repeat(64 * 1024 + 1) }, 60, 'client-e'),
    );

    // One client holds at most its own maximum, whatever room its tenants have.
    const perClient = createPaymentTasks(queryRows(stack().orm), 10, 2);
    const client = `client-${randomUUID()}`;
    assert.equal(await perClient.save(`${tenant}-c1`, agentId, task(6), 60, client), true);
    assert.equal(await perClient.save(`${tenant}-c2`, agentId, task(7), 60, client), true);
    assert.equal(await perClient.save(`${tenant}-c3`, agentId, task(8), 60, client), false, 'the client is full');
    assert.equal(await perClient.save(`${tenant}-c3`, agentId, task(9), 60, `${client}-other`), true);
  });

  it('keeps a message only for an unpaid request its client bucket admitted: a flood is 429 and keeps nothing more', async () => {
    const agent = await publicAgent();
    // A client address of its own behind a trusted proxy, so its bucket starts full.
    const tight = await startCapturedGateway({
      publicAddress: { trustProxy: true },
      publicAgents: { ...stack().config.publicAgents, challengeRpsPerClient: 2, challengeRpsPerTenant: 1000 },
    });
    const client = `198.51.100.${1 + Math.floor(Math.random() * 250)}`;
    try {
      const answers = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          callAt(tight.url, 'POST', `${agent.path}/stream`, {
            json: { jsonrpc: '2.0', id: i, method: 'SendMessage', params: sendJson(`echo flood ${i}`) },
            headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION, 'x-forwarded-for': client },
          }),
        ),
      );
      const asked = answers.filter((a) => a.status === 200);
      assert.ok(asked.length > 0 && asked.length < answers.length, answers.map((a) => a.status).join(','));
      assert.ok(answers.every((a) => a.status === 200 || a.status === 429));
      const [row] = await stack()
        .orm.em.fork()
        .getConnection()
        .execute<Array<{ n: string }>>('select count(*) as n from a2a_payment_tasks where agent_id = ?', [agent.id]);
      assert.equal(Number(row.n), asked.length, 'one kept message per admitted request');
    } finally {
      await tight.close();
    }
  });

  it("one client keeps at most a tenth of a tenant's live payment tasks: a few addresses cannot fill the tenant's for its payers", async () => {
    const agent = await publicAgent();
    const proxied = await startCapturedGateway({
      publicAddress: { trustProxy: true },
      publicAgents: { ...stack().config.publicAgents, challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000 },
    });
    const octet = () => 1 + Math.floor(Math.random() * 250);
    const [noisy, payer] = [`203.0.113.${octet()}`, `192.0.2.${octet()}`];
    const ask = (client: string, i: number) =>
      callAt(proxied.url, 'POST', `${agent.path}/stream`, {
        json: { jsonrpc: '2.0', id: i, method: 'SendMessage', params: sendJson(`echo noisy ${i}`) },
        headers: { 'a2a-version': '1.0', 'x-a2a-extensions': EXTENSION, 'x-forwarded-for': client },
      });
    try {
      for (let batch = 0; batch < 10; batch++) {
        const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => ask(noisy, batch * 10 + i)));
        assert.ok(
          answers.every((a) => a.status === 200),
          answers.map((a) => a.status).join(','),
        );
      }
      const over = await ask(noisy, 100);
      assert.equal(over.status, 429, over.text);
      assert.ok(over.headers['retry-after']);
      const other = await ask(payer, 101);
      assert.equal(other.status, 200, other.text);
      assert.equal(other.json.result.task.status.state, 'TASK_STATE_INPUT_REQUIRED');
      const rows = await stack()
        .orm.em.fork()
        .getConnection()
        .execute<Array<{ client_key: string }>>(
          'select distinct client_key from a2a_payment_tasks where agent_id = ?',
          [agent.id],
        );
      assert.equal(rows.length, 2);
      assert.ok(
        rows.every((r) => /^[0-9a-f]{64}$/.test(r.client_key)),
        'a digest, never the address',
      );
    } finally {
      await proxied.close();
    }
  });

  it('the transactional URL: input-required, then 202 with PAYMENT-RESPONSE; the poll has the first message run', async () => {
    const agent = await publicAgent();
    const payer = await newPayer(1_000_000n);
    const marker = `echo polled ${randomUUID()}`;
    const headers = { 'a2a-version': '1.0', 'a2a-extensions': EXTENSION };
    const unpaid = await callAt(gateway.url, 'POST', agent.path, {
      json: { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: sendJson(marker) },
      headers,
    });
    assert.equal(unpaid.status, 200, unpaid.text);
    assert.equal(unpaid.headers['a2a-extensions'], EXTENSION);
    const task = unpaid.json.result.task as Json;
    assert.equal(task.status.state, 'TASK_STATE_INPUT_REQUIRED');
    const required = task.status.message.metadata['x402.payment.required'];
    const payload = await v2PayerClient(payer).createPaymentPayload(required);
    const paid = await callAt(gateway.url, 'POST', agent.path, {
      json: { jsonrpc: '2.0', id: 2, method: 'SendMessage', params: sendJson('paying', paying(task.id, payload)) },
      headers,
    });
    assert.equal(paid.status, 202, paid.text);
    const settled = JSON.parse(Buffer.from(paid.headers['payment-response'] as string, 'base64').toString('utf8'));
    assert.equal(settled.success, true);
    const polled = await waitFor(
      async () => {
        const res = await callAt(
          gateway.url,
          'GET',
          new URL(paid.json.poll_url).pathname + new URL(paid.json.poll_url).search,
        );
        return res.json?.status === 'succeeded' ? res.json : null;
      },
      { what: 'the paid call' },
    );
    const answer = JSON.parse(Buffer.from(polled.response_body_b64, 'base64').toString('utf8'));
    assert.equal(answer.id, 2);
    assert.equal(answer.result.task.status.message.parts[0].text, `echo: ${marker}`);
    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: settled.transaction, value: PRICE }]);
  });

  it("the SDK's A2A 0.3 client: input-required, then the first message run, with the receipt", async () => {
    const agent = await publicAgent();
    const fetchImpl = activating([]);
    const card = await (await clientAt(agent.url, fetchImpl)).getAgentCard();
    const client = new Client(new LegacyJsonRpcTransport({ endpoint: `${agent.url}/stream`, fetchImpl }), card);
    const payer = await newPayer(1_000_000n);
    const marker = `echo legacy ${randomUUID()}`;
    const unpaid = resultJson(await client.sendMessage(send(marker)));
    assert.equal(unpaid.status.state, 'TASK_STATE_INPUT_REQUIRED', JSON.stringify(unpaid));
    const required = unpaid.status.message.metadata['x402.payment.required'];
    const payload = await v2PayerClient(payer).createPaymentPayload(required);
    const paid = resultJson(await client.sendMessage(send('paying', paying(unpaid.id, payload))));
    assert.equal(paid.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(paid));
    assert.equal(paid.status.message.parts[0].text, `echo: ${marker}`);
    assert.equal(paid.status.message.metadata['x402.payment.status'], 'payment-completed');
    const [receipt] = paid.status.message.metadata['x402.payment.receipts'];
    assert.deepEqual(await transfersTo(provider, agent.payTo), [{ hash: receipt.transaction, value: PRICE }]);
  });
});
