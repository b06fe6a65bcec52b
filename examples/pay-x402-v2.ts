// Pays a priced agent with @x402/fetch and @x402/evm, the x402 v2 clients, on the streaming
// endpoint: the client reads the 402's PAYMENT-REQUIRED header, signs an EIP-3009
// authorization for the price (network eip155:8453) and sends the call again with
// PAYMENT-SIGNATURE. The gateway verifies and settles the payment before the stream opens, then
// streams the agent's own answer back with PAYMENT-RESPONSE (the settlement receipt) in its
// head. Settings: examples/settings.ts. Run against `npm start`:
//   npm run example:x402-v2 -- agt_…
import { x402Client } from '@x402/core/client';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { fail, report, settings, usage } from './settings.ts';

usage(`usage: npm run example:x402-v2 -- AGENT_ID
  Pays a priced agent with @x402/fetch and @x402/evm (x402 v2) on the streaming endpoint and
  prints the invocation, the payment and the answer. Settings: examples/settings.ts.`);
const s = settings();
const client = new x402Client().register('eip155:*', new ExactEvmScheme(privateKeyToAccount(s.payerKey)));
// The client pays only in assets it knows (USDC on the real networks) or is told about: the
// local dev token is allowed explicitly, up to MAX_PAYMENT per call.
client.setSpendControls({
  allowedAssets: [{ network: 'eip155:8453', asset: s.tokenAddress, maxAmountPerPayment: s.maxPayment.toString() }],
});
const pay = wrapFetchWithPayment(fetch, client);
const url = `${s.gateway}/v1/proxy/${s.agentId}/stream`;
const res = await pay(url, {
  method: 'POST',
  headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'text/plain' },
  body: s.body,
});
const answer = await res.text();
const invocationId = res.headers.get('x-gateway-invocation-id');
if (!invocationId) fail(`POST ${url} answered ${res.status}: ${answer}`);
// The settlement receipt, written in the head before the first byte of the answer.
const header = res.headers.get('payment-response');
if (header) console.log(`PAYMENT-RESPONSE: transaction ${decodePaymentResponseHeader(header).transaction}`);
await report(s, invocationId, answer);
