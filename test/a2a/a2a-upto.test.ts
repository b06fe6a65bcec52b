// A public A2A agent priced by use (x402 `upto`), paid the way the x402 A2A transport says: the
// unmodified @a2a-js/sdk client activates the extension; an unpaid message is answered with an
// input-required task whose PaymentRequired offers the upto maximum; the paying message carries
// the payment the unmodified @x402/evm upto client signs for it. The agent runs once, and the
// charge its header meter states is settled after the answer, once, on chain.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Message, SendMessageRequest, Task } from '@a2a-js/sdk';
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { stack } from '../support/stack.ts';
import { call, uniqueName } from '../support/http.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { payUptoChallenge, rpcReader, uptoPayer } from '../support/upto.ts';
import { balanceOf, chainProvider, newAccount, newPayTo, settlingTenant, type TestAccount } from '../support/x402.ts';
import { waitFor } from '../support/wait.ts';

const EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';
const MAX = '40000';

type Json = Record<string, any>;

describe('public A2A agents priced by use (upto) through the x402 A2A transport', function () {
  this.timeout(180_000);
  let upstream: A2aUpstream;
  let provider: ReturnType<typeof chainProvider>;
  let account: TestAccount;
  let token: string;
  let gateway: ExtraGateway;

  before(async () => {
    const limits = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000 };
    gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...limits } });
    upstream = await startA2aServer({ responseHeaders: { 'x-usage-cost': '1357' } });
    provider = chainProvider();
    account = await newAccount(`a2a-upto-${randomUUID()}`);
    token = await settlingTenant(`tenant-a2a-upto-${randomUUID()}`, account);
  });
  after(async () => {
    await gateway.close();
    await upstream.close();
    await account.client.close();
    provider.destroy();
  });

  it('an unpaid message gets the upto PaymentRequired; the paying message runs once and is charged its metered cost', async () => {
    const payTo = newPayTo();
    const created = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('a2a-upto'),
        protocol: 'a2a',
        upstream_url: upstream.url,
        pricing: {
          scheme: 'upto',
          amount: MAX,
          asset: 'USDC',
          network: 'base',
          pay_to: payTo,
          meter: { kind: 'header', header: 'X-Usage-Cost' },
        },
        public: true,
        public_description: 'Echoes text over A2A, priced by use',
      },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.json.id as string;
    const publicUrl = `${gateway.url}${new URL(created.json.public_url).pathname}`;
    const activating: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('X-A2A-Extensions', EXTENSION);
      return fetch(input, { ...init, headers });
    };
    const client = await new ClientFactory({
      transports: [new JsonRpcTransportFactory({ fetchImpl: activating })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl: activating }),
    }).createFromUrl(`${publicUrl}/`);
    const send = (text: string, metadata?: Json) =>
      SendMessageRequest.fromJSON({
        message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...(metadata ? { metadata } : {}) },
      });
    const asJson = (result: Message | Task) =>
      ('messageId' in result ? Message.toJSON(result) : Task.toJSON(result)) as Json;

    const unpaid = asJson(await client.sendMessage(send('echo the price')));
    const required = unpaid.status.message.metadata['x402.payment.required'];
    assert.equal(required.accepts[0].scheme, 'upto');
    assert.equal(required.accepts[0].amount, MAX);

    const payer = await uptoPayer(provider, 1_000_000n);
    const { wire } = await payUptoChallenge(payer.privateKey, required, rpcReader(stack().infra.chainRpcUrl));
    const marker = `echo metered ${randomUUID()}`;
    const paid = asJson(
      await client.sendMessage(
        send(marker, { 'x402.payment.status': 'payment-submitted', 'x402.payment.payload': wire }),
      ),
    );
    assert.equal(paid.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(paid));
    assert.equal(paid.status.message.parts[0].text, `echo: ${marker}`);

    // The call's invocation, its charge settled after the answer.
    const invocation = await waitFor(
      async () => {
        const listed = await call('GET', `/v1/invocations?agent_id=${agentId}&limit=100`, { token });
        // A public call is the tenant's to list (its poll belongs to the payer's poll key).
        const found = (listed.json.data as Json[]).find((i) => i.payment_scheme === 'upto');
        return found?.payment_settlement && found.payment_settlement !== 'settling' && found;
      },
      { timeoutMs: 60_000, what: 'the metered A2A call settled' },
    );
    assert.equal(invocation.payment_settlement, 'settled', JSON.stringify(invocation));
    assert.equal(invocation.payment_charge, '1357');
    assert.equal(invocation.payment_max_amount, MAX);
    assert.equal(await balanceOf(provider, payer.address), 1_000_000n - 1357n);
    assert.equal(await balanceOf(provider, payTo), 1357n);
  });
});
