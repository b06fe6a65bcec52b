import { randomUUID } from 'node:crypto';
import { stack } from './support/stack.ts';
import { call, callAt, uniqueName } from './support/http.ts';
import { startCapturedGateway, type ExtraGateway } from './support/catalog.ts';
import { startA2aServer, type A2aUpstream } from './support/a2a-server.ts';
import { newAccount, newPayTo, settlingTenant, type TestAccount } from './support/x402.ts';

const EXTENSION = 'https://github.com/google-a2a/a2a-x402/v0.1';
describe('probe', function () {
  this.timeout(120_000);
  let gateway: ExtraGateway; let upstream: A2aUpstream; let account: TestAccount; let token: string;
  before(async () => {
    const limits = { challengeRpsPerClient: 1000, challengeRpsPerTenant: 1000, rpsPerClient: 1000 };
    gateway = await startCapturedGateway({ publicAgents: { ...stack().config.publicAgents, ...limits } });
    upstream = await startA2aServer();
    account = await newAccount(`probe-${randomUUID()}`);
    token = await settlingTenant(`tenant-probe-${randomUUID()}`, account);
  });
  after(async () => { await gateway.close(); await upstream.close(); await account.client.close(); });
  it('probes', async () => {
    const created = await call('POST', '/v1/agents', { token, json: { name: uniqueName('probe'), protocol: 'a2a', upstream_url: upstream.url,
      pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: newPayTo() }, public: true, public_description: 'x' } });
    const path = new URL(created.json.public_url as string).pathname;
    const msg = (extra: any = {}) => ({ message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'echo hi' }], ...extra } });
    const deep: any = {}; let d = deep; for (let i = 0; i < 30; i++) { d.a = {}; d = d.a; }
    const cases: Array<[string, any, Record<string, string>?, string?]> = [
      ['payload null', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': null } }) }],
      ['payload 123', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': 123 } }) }],
      ['payload str', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': 'abc' } }) }],
      ['payload arr', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': [1] } }) }],
      ['payload weird obj', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': { x402Version: 2, accepted: 5, payload: { authorization: 'x' } } } }) }],
      ['payload v1-ish', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature: '0x', authorization: { from: 'x', to: 'y', value: '1e400', validAfter: '-1', validBefore: 'z', nonce: 'n' } } } } }) }],
      ['deep payload', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': deep } }) }],
      ['metadata string', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: 'x' }) }],
      ['proto', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg() }, {}, '__proto__'],
      ['fake task id', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ taskId: `x402-payment-${randomUUID()}` }) }],
      ['task id number', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ taskId: 5 }) }],
      ['rejected no task', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.status': 'payment-rejected' } }) }],
      ['rejected fake task', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ taskId: `x402-payment-${randomUUID()}`, metadata: { 'x402.payment.status': 'payment-rejected' } }) }],
      ['status number', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.status': 7 } }) }],
      ['contextId obj', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ contextId: { a: 1 } }) }],
      ['contextId long', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ contextId: 'c'.repeat(5000) }) }],
      ['id huge', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg() }, {}, 'bigid'],
      ['id null', { jsonrpc: '2.0', id: null, method: 'SendMessage', params: msg() }],
      ['no id', { jsonrpc: '2.0', method: 'SendMessage', params: msg() }],
      ['params array', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: [1] }],
      ['no params', { jsonrpc: '2.0', id: 1, method: 'SendMessage' }],
      ['message null', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { message: null } }],
      ['stream on tx', { jsonrpc: '2.0', id: 1, method: 'SendStreamingMessage', params: msg() }, {}, 'tx'],
      ['0.3 on stream', { jsonrpc: '2.0', id: 1, method: 'message/stream', params: msg() }],
      ['header+payload', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg({ metadata: { 'x402.payment.payload': {} } }) }, { 'payment-signature': 'abc' }],
      ['header only', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg() }, { 'payment-signature': 'abc' }],
      ['x-payment only', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg() }, { 'x-payment': 'abc' }],
      ['a2a-ext junk', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: msg() }, { 'a2a-extensions': ',,, ,' + EXTENSION + ',' + 'x'.repeat(3000) }],
      ['GetTask payment id', { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: `x402-payment-${randomUUID()}` } }],
      ['Cancel payment id', { jsonrpc: '2.0', id: 1, method: 'CancelTask', params: { id: `x402-payment-${randomUUID()}` } }],
      ['params.metadata payload', { jsonrpc: '2.0', id: 1, method: 'SendMessage', params: { ...msg(), metadata: { 'x402.payment.payload': {} } } }],
    ];
    for (const [name, body, hdrs, special] of cases) {
      let text = JSON.stringify(body);
      if (special === '__proto__') text = text.replace('"parts"', '"metadata":{"__proto__":{"x402.payment.payload":{"a":1}},"x402.payment.status":"payment-submitted"},"parts"');
      if (special === 'bigid') text = text.replace('"id":1', '"id":1e400');
      const url = special === 'tx' ? path : `${path}/stream`;
      for (const act of [true, false]) {
        const res = await callAt(gateway.url, 'POST', url, { body: text, headers: { 'content-type': 'application/json', 'a2a-version': '1.0', ...(act ? { 'x-a2a-extensions': EXTENSION } : {}), ...(hdrs ?? {}) } } as any);
        console.log(`${name} act=${act}: ${res.status} ${res.text.slice(0, 160)}`);
      }
    }
  });
});
